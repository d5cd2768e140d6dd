//! The end of a recording: the events closed, the losses no record
//! reported, what still waits written, and the trailer's totals and the
//! warnings made.

use std::io;

use flamerec_format::Totals;

use super::{Finished, State};
use crate::python::Python;
use crate::rings::Event;
use crate::sys;

impl<W: io::Write> State<W> {
    /// The sampling events are closed: nothing may hold them open.
    pub(crate) fn events_closed(&mut self) {
        if let Some(p) = &mut self.python {
            p.events_closed();
        }
    }

    /// After the last drain: losses no LOST record reported. The kernel
    /// writes one only once the ring has room again, so a ring still full
    /// when the command ended (its reader kept from every CPU until then)
    /// would hide what it dropped. Each event counts what it could not
    /// write; per CPU, what those counts exceed the LOST records read by is
    /// added, at the recording's end.
    pub(crate) fn unreported_losses(&mut self, events: &[Event]) {
        let mut counted: std::collections::BTreeMap<u32, u64> = Default::default();
        for e in events.iter().filter(|e| e.counts_lost) {
            if let Ok(n) = sys::lost_records(&e.fd) {
                *counted.entry(e.cpu).or_default() += n;
            }
        }
        let end = self.rel(sys::monotonic_ns());
        for (cpu, n) in counted {
            let unreported = n.saturating_sub(self.losses.of_cpu(cpu));
            if unreported > 0 {
                self.losses.add(cpu, unreported);
                self.conv.writer_mut().lost(end, unreported);
            }
        }
    }

    /// Recording stopped `duration_ns` after it started (the last drain
    /// done, the symbol table in): what still waits is written — threads
    /// still blocked count until the stop, samples still waiting to be
    /// shown whole go cut, deferred samples without their user part — and
    /// the trailer's totals and the warnings are made.
    pub(crate) fn finish(mut self, duration_ns: u64) -> Finished<W> {
        self.write_waiting(duration_ns);
        let deferred = self.deferred.as_ref().map(|d| d.stats).unwrap_or_default();
        // Cut short by the unwinder (dwarf), and at the kernel's callchain caps.
        let cut_at_cap = self.counts.cut_at_cap + deferred.cut;
        let mut totals = Totals {
            truncated_stacks: self.counts.truncated + cut_at_cap,
            completed_stacks: self.counts.completed,
            deferred_stitched: deferred.stitched,
            deferred_unmatched_samples: deferred.unmatched_samples,
            deferred_orphan_records: deferred.orphan_records,
            duration_ns,
            processes: self.counts.pids.len() as u64,
            threads: self.counts.tids.len() as u64,
            ..Default::default()
        };
        self.losses.fill(&mut totals);
        let samples = self.conv.writer().samples();
        let mut warnings = std::mem::take(&mut self.warnings);
        warnings.extend(crate::deep::cut_warning(
            self.counts.truncated,
            &self.live,
            samples,
            self.copy_is_largest,
            self.jit.followed_a_jvm(),
        ));
        warnings.extend(crate::depth::warnings(
            cut_at_cap,
            self.fp_cap,
            self.deferred.is_some().then_some(&deferred),
            self.losses.total(),
            samples,
        ));
        let jit = std::mem::take(&mut self.jit);
        let jit = jit.finish(self.conv.writer(), sys::monotonic_ns());
        // Python frames that `-X perf`'s trampolines named: shown without BPF.
        let trampolines = jit.names.iter().any(|(_, n)| {
            n.first()
                .is_some_and(|n| n.starts_with(crate::pynames::PY_PREFIX))
        });
        warnings.extend(jit.warnings);
        totals.jit_frames = jit.frames;
        warnings.extend(self.last_warnings(trampolines));
        Finished {
            files: (std::mem::take(&mut self.files), self.take_located()),
            python: self.python.take().map(Python::finish),
            loss_warning: self.losses.warning(samples),
            writer: self.conv.into_writer(),
            totals,
            warnings,
            jit_names: jit.names,
        }
    }

    /// At the stop, what still waits is written: blocked threads weighed
    /// until now, samples waiting for a deeper one, deferred samples.
    fn write_waiting(&mut self, duration_ns: u64) {
        if let Some(b) = &mut self.off_cpu {
            for s in b.finish(duration_ns) {
                self.conv.writer_mut().sample(s);
            }
        }
        if let Some(u) = self.conv.unwinder_mut() {
            let done = self.live.finish_all(u);
            self.write_settled(done);
        }
        if let Some(d) = &mut self.deferred {
            let ready = d.finish();
            self.finish_raws(ready);
        }
    }

    /// What the user should know of throttling, of CPython frames not read
    /// (unless `-X perf`'s `trampolines` named them), and of files not
    /// reached as their processes saw them.
    fn last_warnings(&mut self, trampolines: bool) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.counts.throttles > 0 {
            warnings.push(format!(
                "the kernel throttled sampling {} times (kernel.perf_event_max_sample_rate): lower -F",
                self.counts.throttles
            ));
        }
        let unread = self.python_unread.take().filter(|(_, s)| !s.is_empty());
        if let Some((why, seen)) = unread.filter(|_| !trampolines) {
            let seen: Vec<String> = seen.into_iter().collect();
            warnings.push(format!(
                "CPython ran ({}) but its Python frames were not read: {why}",
                seen.join(", ")
            ));
        }
        if self.files.unreached > 0 {
            warnings.push(format!(
                "{} mapped files (the first: {}) were not the files at their paths here (a \
                 process in a container, a chroot or a mount namespace of its own, or a file \
                 replaced since) and could not be opened as the process saw them (it had \
                 exited or unmapped it, or the recorder lacks CAP_SYS_ADMIN): their frames are \
                 named from the files at their paths only where the build ids match",
                self.files.unreached,
                self.files.first_unreached.as_deref().unwrap_or("?")
            ));
        }
        warnings
    }
}
