//! Exports to the tools users already have: pprof (`go tool pprof`,
//! Pyroscope, Parca, Grafana), speedscope and the Firefox Profiler.
//!
//! Unlike folded text, these formats want what aggregation drops: each
//! sample's time, thread and weight. Folding with
//! [`FoldOptions::keep_samples`](crate::FoldOptions::keep_samples) keeps
//! them, after the same filters, in a [`Timeline`] that shares the folded
//! profile's symbols, so every export names frames exactly as the
//! flamegraph does (inlined frames expanded unless `--no-inline`).
//!
//! This module owns the [`Timeline`] and what a sample's weight means in
//! each format (`Measure`); each format's module owns only its encoding.
//! Writers never panic on names: JSON goes through serde, protobuf strings
//! are length-prefixed bytes.
//!
//! Folded text can be exported to pprof only ([`write_pprof_folded`], from
//! a profile's stacks): it has no time axis and no threads, so speedscope's
//! time order and the Firefox Profiler's tracks have nothing to show.

mod firefox;
mod otlp;
mod pprof;
pub mod proto;
mod speedscope;

use std::io;

use flamerec_format::{Frame, FrameId, Identity, Metadata, Module, Sample, StackId, Tables};
use flamerec_symbolize::names::{sanitize_root, UNKNOWN};
use flamerec_symbolize::{FuncId, Function, Symbols};
use rustc_hash::FxHashMap as HashMap;

pub use firefox::write_firefox;
pub use otlp::{write_otlp, OtlpResource, OtlpValue};
pub use pprof::{write_pprof, write_pprof_folded};
pub use speedscope::{write_speedscope, SPEEDSCOPE_SCHEMA};

/// Samples that passed the filters, in time order, with their threads and
/// the names of the frames they use.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    samples: Vec<TimedSample>,
    threads: Vec<ThreadInfo>,
    /// The functions frames expand to, as in [`Symbols::functions`].
    functions: Vec<Function>,
    /// Per frame id, its functions outermost first (empty when unused).
    frame_funcs: Vec<Vec<FuncId>>,
    frames: Vec<Frame>,
    modules: Vec<Module>,
    /// The stack prefix tree, `(parent, frame)`; index 0 is the empty stack.
    nodes: Vec<(StackId, FrameId)>,
    /// Inlined frames were expanded.
    inline: bool,
    /// Per identified process: its container label and id (`host` and
    /// empty on the host); empty for recordings without identities.
    containers: HashMap<u32, (String, String)>,
}

/// One kept sample. 24 bytes: millions fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimedSample {
    /// Nanoseconds since the recording started.
    time_ns: u64,
    /// In the recording's weight unit.
    weight: u64,
    stack: StackId,
    /// Index into [`Timeline::threads`].
    thread: u32,
}

/// A thread with its names at its last kept sample.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ThreadInfo {
    pid: u32,
    tid: u32,
    /// Spelled as the root frames of folded text are.
    name: String,
    /// The process's name, spelled the same way.
    process: String,
}

/// What the aggregation pass keeps for a [`Timeline`].
#[derive(Debug, Default)]
pub(crate) struct Kept {
    samples: Vec<TimedSample>,
    /// pid, tid, thread name, process name.
    threads: Vec<(u32, u32, u32, u32)>,
    index: HashMap<(u32, u32), u32>,
    /// Each identified process's container label and id (the last
    /// identity of its pid).
    containers: HashMap<u32, (String, String)>,
}

impl Kept {
    /// The index of thread `(pid, tid)`, whose names are now the given
    /// interned ones.
    /// Process `id.pid` is identified as `id`.
    pub(crate) fn identity(&mut self, id: &Identity) {
        self.containers
            .insert(id.pid, (id.container_label(), id.container.clone()));
    }

    pub(crate) fn thread(&mut self, pid: u32, tid: u32, name: u32, process: u32) -> u32 {
        let next = self.threads.len() as u32;
        let i = *self.index.entry((pid, tid)).or_insert(next);
        match self.threads.get_mut(i as usize) {
            Some(t) => *t = (pid, tid, name, process),
            None => self.threads.push((pid, tid, name, process)),
        }
        i
    }

    pub(crate) fn push(&mut self, s: &Sample, thread: u32) {
        self.samples.push(TimedSample {
            time_ns: s.time_ns,
            weight: s.weight,
            stack: s.stack,
            thread,
        });
    }
}

impl Timeline {
    /// Assembles the kept samples with the symbols of the profile they
    /// were folded into; `names` resolves the interned thread names.
    pub(crate) fn new(
        kept: Kept,
        names: &[String],
        tables: &Tables,
        symbols: &Symbols,
        inline: bool,
    ) -> Timeline {
        let name = |id: u32| sanitize_root(names.get(id as usize).map_or(UNKNOWN, String::as_str));
        let threads = kept
            .threads
            .iter()
            .map(|&(pid, tid, n, p)| ThreadInfo {
                pid,
                tid,
                name: name(n),
                process: name(p),
            })
            .collect();
        let mut samples = kept.samples;
        // Chunks from different CPUs may interleave slightly; exports want
        // time order, and equal times keep stream order.
        samples.sort_by_key(|s| s.time_ns);
        let nodes = (0..tables.node_count() as StackId)
            .map(|id| tables.node(id).unwrap_or((0, 0)))
            .collect();
        Timeline {
            samples,
            threads,
            functions: symbols.functions.clone(),
            frame_funcs: symbols.frames.clone(),
            frames: tables.frames.clone(),
            modules: tables.modules.clone(),
            nodes,
            inline,
            containers: kept.containers,
        }
    }

    /// Appends the samples of another recording's timeline (several runs
    /// merged into one profile), its ids moved past this one's tables. Its
    /// samples follow this timeline's last one in time, a millisecond
    /// apart, so time-ordered exports show the runs one after the other;
    /// its threads stay apart from this one's even when their ids repeat.
    pub(crate) fn append(&mut self, other: Timeline) {
        let (funcs, frames, modules) = (
            self.functions.len() as FuncId,
            self.frames.len() as FrameId,
            self.modules.len() as u32,
        );
        // Node 0 is the empty stack in both: other's root is ours.
        let nodes = self.nodes.len().max(1) as StackId - 1;
        let threads = self.threads.len() as u32;
        let start = self
            .samples
            .last()
            .map_or(0, |s| s.time_ns.saturating_add(1_000_000))
            .saturating_sub(other.samples.first().map_or(0, |s| s.time_ns));
        let node = |id: StackId| if id == 0 { 0 } else { id + nodes };
        if self.nodes.is_empty() {
            self.nodes.push((0, 0));
        }
        self.functions.extend(other.functions);
        self.frame_funcs.extend(
            other
                .frame_funcs
                .into_iter()
                .map(|fs| fs.into_iter().map(|f| f + funcs).collect()),
        );
        self.frames.extend(other.frames.into_iter().map(|f| Frame {
            module: f.module + modules,
            address: f.address,
        }));
        self.modules.extend(other.modules);
        self.nodes.extend(
            other
                .nodes
                .into_iter()
                .skip(1)
                .map(|(parent, frame)| (node(parent), frame + frames)),
        );
        self.threads.extend(other.threads);
        self.samples
            .extend(other.samples.into_iter().map(|s| TimedSample {
                time_ns: s.time_ns.saturating_add(start),
                stack: node(s.stack),
                thread: s.thread + threads,
                ..s
            }));
        self.inline &= other.inline;
    }

    /// Number of kept samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample passed the filters.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Number of threads with kept samples.
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// The frames of `stack`, root first, into `out`.
    fn stack_frames(&self, stack: StackId, out: &mut Vec<FrameId>) {
        out.clear();
        let mut cur = stack;
        // Each step goes to a smaller id (parents are interned first); the
        // bound guards against a malformed tree all the same.
        for _ in 0..self.nodes.len() {
            if cur == 0 {
                break;
            }
            let Some(&(parent, frame)) = self.nodes.get(cur as usize) else {
                break;
            };
            out.push(frame);
            cur = parent;
        }
        out.reverse();
    }

    /// The functions of `frame`, outermost first.
    fn frame_functions(&self, frame: FrameId) -> &[FuncId] {
        self.frame_funcs
            .get(frame as usize)
            .map_or(&[], Vec::as_slice)
    }

    /// The functions of `stack`, root first, inlined frames expanded.
    fn stack_functions(&self, stack: StackId, frames: &mut Vec<FrameId>, out: &mut Vec<FuncId>) {
        self.stack_frames(stack, frames);
        out.clear();
        for &f in frames.iter() {
            out.extend_from_slice(self.frame_functions(f));
        }
    }

    fn function(&self, id: FuncId) -> Option<&Function> {
        self.functions.get(id as usize)
    }

    /// Whether `frame` is kernel code.
    fn is_kernel(&self, frame: FrameId) -> bool {
        self.frames
            .get(frame as usize)
            .and_then(|f| self.modules.get(f.module as usize))
            .is_some_and(|m| m.kind == flamerec_format::ModuleKind::Kernel)
    }
}

/// What one unit of sample weight stands for, and so which quantities an
/// export can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// A clock event (`cpu-clock`, `task-clock`) sampled at a frequency:
    /// each sample stands for `period_ns` of CPU time.
    Clock {
        /// 1e9 / frequency.
        period_ns: u64,
    },
    /// Off-CPU time: weights are nanoseconds blocked.
    OffCpu,
    /// Anything else (hardware events, unknown perf.data events): counts.
    Count,
}

impl Measure {
    fn of(meta: &Metadata) -> Measure {
        if crate::input::weight_unit(meta) == "ns" {
            return Measure::OffCpu;
        }
        // perf.data names may carry modifiers (`cpu-clock:u`).
        let event = meta.event.split(':').next().unwrap_or_default();
        match event {
            "cpu-clock" | "task-clock" if meta.frequency_hz > 0 => Measure::Clock {
                period_ns: (1_000_000_000 / meta.frequency_hz).max(1),
            },
            _ => Measure::Count,
        }
    }
}

/// The error writers give for a profile folded without
/// [`FoldOptions::keep_samples`].
fn no_timeline() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "the profile kept no samples to export (fold with FoldOptions::keep_samples)",
    )
}

#[cfg(test)]
mod tests;
