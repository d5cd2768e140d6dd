//! Names travel with the recording: every distinct user frame (a sampled
//! address) is named while the recording runs, on threads at the lowest
//! priority that take the frames new since their last batch, from the
//! binaries the recorder saw — with their separate debug files and the
//! symbol cache `fold` uses ([`flamerec_symbolize::Namer`]). Each batch's
//! names go into the recording as they come back (an own-names record and
//! how far the lookup has come), so a recording cut short keeps them and a
//! continuous recording's windows carry theirs; at the end only the frames
//! of the last batch are left, and their names follow the trailer.
//!
//! Binaries that vanished before they were read, cannot be read or changed
//! since they were mapped (build id mismatch) are left out: `fold` looks
//! their frames up itself (and says so when it cannot), and one warning here
//! gives the count.

use std::io::Write;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flamerec_format::{write_names, FormatError, Frame, FrameId, Module, ModuleId, Writer};
use flamerec_symbolize::{Embedding, Located, NameOptions, Namer};

use crate::{sys, NamesSummary};

/// How often the frames new since the last batch are handed to the namer.
const BATCH_EVERY: Duration = Duration::from_millis(250);

/// Modules and frames new since the last batch (frame ids follow on).
struct Batch {
    modules: Vec<Module>,
    /// Where modules whose paths do not reach them are read.
    located: Vec<(ModuleId, Located)>,
    first: FrameId,
    frames: Vec<Frame>,
}

/// What one batch's lookup found: names, and the frame count it covered.
type Named = (Vec<(FrameId, Vec<String>)>, FrameId);

/// The naming thread, fed by the draining loop.
pub(crate) struct Names {
    /// The naming threads run at the lowest priority.
    lowered: bool,
    batches: Sender<Batch>,
    named: Receiver<Named>,
    /// Names written into the recording as they came back.
    streamed: u64,
    thread: JoinHandle<Embedding>,
    modules_sent: usize,
    frames_sent: usize,
    last_batch: Instant,
    /// Locations not sent yet.
    located: Vec<(ModuleId, Located)>,
}

impl Names {
    /// Starts the naming thread; as root at the lowest priority (raised
    /// back when the command has ended and the user waits for the names).
    pub(crate) fn start(opts: &NameOptions) -> std::io::Result<Self> {
        let lower = sys::is_root();
        let names = NameOptions {
            inline: true,
            ..opts.clone()
        };
        let (batches, rx) = mpsc::channel();
        let (found, named) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("flamerec-names".into())
            .spawn(move || name_batches(&names, &rx, &found, lower))?;
        Ok(Names {
            lowered: lower,
            batches,
            named,
            streamed: 0,
            thread,
            modules_sent: 0,
            frames_sent: 0,
            last_batch: Instant::now(),
            located: Vec::new(),
        })
    }

    /// Modules that are read elsewhere than at their paths (sent with the
    /// next batch, before their frames).
    pub(crate) fn locate(&mut self, located: Vec<(ModuleId, Located)>) {
        self.located.extend(located);
    }

    /// Hands the frames new in `writer` to the namer, at most every
    /// [`BATCH_EVERY`].
    pub(crate) fn offer<W: Write>(&mut self, writer: &Writer<W>) {
        if self.last_batch.elapsed() >= BATCH_EVERY {
            self.last_batch = Instant::now();
            self.send(writer);
        }
    }

    /// Writes the names that came back since the last call, and how far
    /// the lookup has come.
    pub(crate) fn write_found<W: Write>(&mut self, writer: &mut Writer<W>) {
        loop {
            match self.named.try_recv() {
                Ok((names, through)) => {
                    self.streamed += names.len() as u64;
                    writer.own_names(&names);
                    writer.names_through(through);
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            }
        }
    }

    fn send<W: Write>(&mut self, writer: &Writer<W>) {
        let frames = writer.frames_from(self.frames_sent);
        if frames.is_empty() {
            return;
        }
        let modules = writer.modules_from(self.modules_sent);
        let batch = Batch {
            modules: modules.to_vec(),
            located: std::mem::take(&mut self.located),
            first: self.frames_sent as FrameId,
            frames: frames.to_vec(),
        };
        self.modules_sent += modules.len();
        self.frames_sent += frames.len();
        // A namer that is gone (it panicked) is noticed at the end.
        let _ = self.batches.send(batch);
    }

    /// Hands over the last frames (the command has ended); their names
    /// are looked up while the caller writes the trailer.
    pub(crate) fn last_batch<W: Write>(mut self, writer: &Writer<W>) -> Pending {
        let started = Instant::now();
        if self.lowered {
            sys::restore_namer_priority();
        }
        self.send(writer);
        drop(self.batches);
        Pending {
            thread: self.thread,
            started,
            streamed: self.streamed,
            named: self.named,
        }
    }
}

/// The naming thread at work on the last batch.
pub(crate) struct Pending {
    thread: JoinHandle<Embedding>,
    started: Instant,
    /// Names already in the recording.
    streamed: u64,
    /// Names found but not yet written: they go into the names section.
    named: Receiver<Named>,
}

impl Pending {
    /// Waits for the names; `None` when the naming thread failed.
    pub(crate) fn wait(self) -> Option<Lookup> {
        let mut e = self.thread.join().ok()?;
        for (names, _) in self.named.try_iter() {
            e.names.extend(names);
        }
        let mut warnings = e.warnings;
        if e.unusable_modules > 0 {
            let s = if e.unusable_modules == 1 { "y" } else { "ies" };
            warnings.push(format!(
                "{} binar{s} missing, unreadable or changed since they were mapped: the names of their {} frames are not embedded (fold looks them up where the binaries are)",
                e.unusable_modules, e.unusable_frames
            ));
        }
        Some(Lookup {
            summary: NamesSummary {
                frames: e.names.len() as u64 + self.streamed,
                left_out: e.unusable_frames as u64,
                elapsed: Default::default(),
            },
            names: e.names,
            warnings,
            started: self.started,
        })
    }
}

/// The naming thread: each round takes every batch waiting (one lookup per
/// binary for all of them) until the draining loop hangs up.
fn name_batches(
    opts: &NameOptions,
    rx: &Receiver<Batch>,
    found: &Sender<Named>,
    lower: bool,
) -> Embedding {
    if lower {
        // Failing to lower it leaves it where it is: still correct.
        let _ = sys::lower_namer_priority();
    }
    let mut namer = Namer::new(opts);
    while let Ok(mut batch) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            batch.modules.extend(more.modules);
            batch.located.extend(more.located);
            batch.frames.extend(more.frames);
        }
        for (module, at) in batch.located {
            namer.locate(module, at);
        }
        let through = batch.first.saturating_add(batch.frames.len() as FrameId);
        namer.add(&batch.modules, batch.first, &batch.frames);
        // The receiver lives until the names section is written.
        let _ = found.send((namer.take_names(), through));
    }
    namer.finish()
}

/// The names of a recording's frames, ready to write.
pub(crate) struct Lookup {
    names: Vec<(u32, Vec<String>)>,
    summary: NamesSummary,
    warnings: Vec<String>,
    /// When the last batch was handed over (the command had ended).
    started: Instant,
}

impl Lookup {
    /// Names the recorder found itself, not in binaries: Python frames,
    /// named from the process's memory, and JIT code, named from the
    /// runtimes' maps and dumps.
    pub(crate) fn add(&mut self, mut names: Vec<(u32, Vec<String>)>) {
        self.summary.frames += names.len() as u64;
        self.names.append(&mut names);
    }

    /// Appends the names section to `out` (the finished recording).
    pub(crate) fn write<W: Write>(
        mut self,
        out: &mut W,
        warnings: &mut Vec<String>,
    ) -> Result<NamesSummary, FormatError> {
        let complete = self.summary.left_out == 0;
        write_names(out, &self.names, complete)?;
        warnings.append(&mut self.warnings);
        self.summary.elapsed = self.started.elapsed();
        Ok(self.summary)
    }
}
