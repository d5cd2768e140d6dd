//! The stop: sampling stopped, the rings drained a last time, the events
//! closed and the kernel's settings put back; then the trailer and the
//! names section written and the file closed.

use std::io;
use std::time::Duration;

use flamerec_format::Totals;

use super::{join_kallsyms, output_error, Session};
use crate::depth::MaxStack;
use crate::embed::{Names, Pending};
use crate::spool::Spool;
use crate::state::Finished;
use crate::sys;
use crate::{CallGraph, NamesSummary, RecordError, RecordOptions};

impl Session {
    /// Stops the events, drains what is left, closes them and puts the
    /// kernel's settings back: what the state finished with, how long the
    /// recording ran, how many reader threads it had from when, and the
    /// namer (for the last names).
    pub(super) fn stop(self) -> Stopped {
        let Session {
            mut st,
            mut events,
            mut kallsyms_loader,
            mut max_stack,
            signals,
            started,
            mut scratch,
            readers,
            names,
            ..
        } = self;
        for e in &events {
            let _ = sys::disable(&e.fd);
        }
        let ring_readers = readers.as_ref().map(|(r, at)| (r.count(), *at));
        let taken = readers.map_or_else(Vec::new, |(r, _)| r.stop());
        st.drain(&mut events, &mut scratch, taken);
        st.unreported_losses(&events);
        // Closed before the sysctl is put back: the kernel refuses to change
        // it while events with callchains are open (the Python walker's
        // copies of them too).
        drop(events);
        st.events_closed();
        if kallsyms_loader.is_some() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let duration = started.elapsed();
        drop(signals);
        if let Some(w) = max_stack.as_mut().and_then(MaxStack::restore) {
            st.warn(w);
        }
        Stopped {
            finished: st.finish(duration.as_nanos() as u64),
            duration,
            ring_readers,
            names,
        }
    }
}

/// A recording stopped, its file not yet ended.
pub(super) struct Stopped {
    pub finished: Finished<Spool>,
    pub duration: Duration,
    pub ring_readers: Option<(usize, Duration)>,
    pub names: Option<Names>,
}

/// What the file's end says, for the summary.
pub(super) struct Written {
    pub samples: u64,
    pub counts: Totals,
    /// The loss warning last.
    pub warnings: Vec<String>,
    pub names: Option<NamesSummary>,
}

/// Writes the trailer and the names section (the namer's last batch with
/// the frames the recorder named itself) and closes the file: what it
/// holds, and its size in bytes.
pub(super) fn write_out(
    opts: &RecordOptions,
    finished: Finished<Spool>,
    names: Option<Names>,
) -> Result<(Written, u64), RecordError> {
    let Finished {
        writer,
        mut totals,
        mut warnings,
        loss_warning,
        python,
        jit_names,
        files: (held_files, located),
    } = finished;
    let mut own_names = Vec::new();
    if let Some(py) = python {
        let fp = opts.call_graph != CallGraph::Dwarf;
        warnings.extend(py.stats.warnings(fp));
        warnings.extend(py.warnings);
        totals.python = py.read;
        own_names = py.names;
    }
    // Frames the recorder named itself (Python code, JIT code): no binary
    // can name them later.
    own_names.extend(jit_names);
    let samples = writer.samples();
    // The last frames are named while the trailer is written; the names
    // follow it.
    let pending = names.map(|mut n| {
        n.locate(located);
        n.last_batch(&writer)
    });
    let counts = totals.clone();
    let mut out = writer.finish(totals).map_err(|e| output_error(opts, e))?;
    let names = match pending.map(Pending::wait) {
        Some(Some(mut l)) => {
            l.add(own_names);
            Some(
                l.write(&mut out, &mut warnings)
                    .map_err(|e| output_error(opts, e))?,
            )
        }
        Some(None) => {
            warnings.push("looking up names to embed failed; fold will read the binaries".into());
            write_own_names(&mut out, &own_names).map_err(|e| output_error(opts, e))?;
            None
        }
        // These frames cannot be named later: their names go in even when
        // the binaries' are left to fold.
        None => {
            write_own_names(&mut out, &own_names).map_err(|e| output_error(opts, e))?;
            None
        }
    };
    out.close().map_err(|e| output_error(opts, e.into()))?;
    // The namer read the held files until here.
    drop(held_files);
    let bytes = std::fs::metadata(&opts.output).map_or(0, |m| m.len());
    warnings.extend(loss_warning);
    let written = Written {
        samples,
        counts,
        warnings,
        names,
    };
    Ok((written, bytes))
}

/// The names of frames the recorder named itself alone, as a names
/// section that leaves every other frame to `fold`.
fn write_own_names<W: io::Write>(
    out: &mut W,
    names: &[(u32, Vec<String>)],
) -> Result<(), flamerec_format::FormatError> {
    if names.is_empty() {
        return Ok(());
    }
    flamerec_format::write_names(out, names, false).map(drop)
}
