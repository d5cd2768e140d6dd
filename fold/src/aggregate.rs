//! Streaming aggregation: follows thread names through the event stream,
//! applies the pid/tid/comm filters and sums sample weights per
//! (root frame, stack node).
//!
//! It keeps one counter per distinct (root, stack) pair and, unless an
//! export asks for them ([`FoldOptions::keep_samples`]), never the samples
//! themselves, so memory follows the number of distinct stacks, not the
//! length of the recording. It must not symbolize or format frames.

use flamerec_format::{Event, Sample, StackId};
// Keys are small integers from our own file: a fast hash is safe here.
use rustc_hash::FxHashMap as HashMap;

use crate::export::Kept;
use crate::FoldOptions;
use flamerec_symbolize::names::UNKNOWN;

/// Between the frames of a root that is more than one frame (the
/// container above the thread's name).
pub(crate) const ROOT_FRAMES: char = '\u{1f}';

/// Index into [`Aggregate::names`].
pub(crate) type NameId = u32;

/// What the first frame of every line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RootMode {
    /// The thread's name.
    Comm,
    /// `comm-PID`, with the process's name.
    Process,
    /// `comm-PID/TID`, with the thread's name.
    Thread,
}

/// Per-process sample totals.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ProcessAcc {
    /// The process's name at its last sample.
    pub comm: NameId,
    /// Samples kept.
    pub samples: u64,
    /// Sum of their weights.
    pub weight: u64,
}

/// The result of one pass over a recording.
#[derive(Debug, Default)]
pub(crate) struct Aggregate {
    /// Interned root and thread names.
    pub names: Vec<String>,
    /// Weight per (root name, leaf stack node).
    pub counts: HashMap<(NameId, StackId), u64>,
    /// Per pid.
    pub processes: HashMap<u32, ProcessAcc>,
    /// Samples kept by the filters.
    pub samples: u64,
    /// Sum of their weights.
    pub weight: u64,
    /// Lost-sample records seen (complete files also carry this in the totals).
    pub lost: u64,
    /// Latest sample time, for truncated files without totals.
    pub last_time_ns: u64,
    /// The samples themselves, for exports; `None` unless asked for.
    pub kept: Option<Kept>,
}

/// What a thread's samples count under; `None` when filtered out.
type Slot = Option<Resolved>;

#[derive(Debug, Clone, Copy)]
struct Resolved {
    root: NameId,
    process: NameId,
    /// The thread's index in [`Aggregate::kept`] (0 when not kept).
    thread: u32,
}

/// Feeds events in stream order into an [`Aggregate`].
pub(crate) struct Aggregator<'o> {
    opts: &'o FoldOptions,
    mode: RootMode,
    agg: Aggregate,
    name_ids: HashMap<String, NameId>,
    /// Current name of each thread, by tid.
    comms: HashMap<u32, NameId>,
    /// Each identified process's container label (`--container`).
    containers: HashMap<u32, String>,
    /// What a thread's samples count under. Cleared whenever a name
    /// changes, so a sample costs one lookup.
    cache: HashMap<(u32, u32), Slot>,
    /// The last sample's thread and its cache entry: samples come in runs.
    last: Option<((u32, u32), Slot)>,
}

impl<'o> Aggregator<'o> {
    pub(crate) fn new(opts: &'o FoldOptions) -> Self {
        let mode = if opts.per_thread {
            RootMode::Thread
        } else if opts.per_process {
            RootMode::Process
        } else {
            RootMode::Comm
        };
        Aggregator {
            opts,
            mode,
            agg: Aggregate {
                kept: opts.keep_samples.then(Kept::default),
                ..Aggregate::default()
            },
            name_ids: HashMap::default(),
            comms: HashMap::default(),
            containers: HashMap::default(),
            cache: HashMap::default(),
            last: None,
        }
    }

    /// Samples kept so far.
    pub(crate) fn samples(&self) -> u64 {
        self.agg.samples
    }

    /// Applies one chunk's events, in order.
    pub(crate) fn feed(&mut self, events: Vec<Event>) {
        for event in events {
            match event {
                Event::Samples(samples) => {
                    for s in &samples {
                        self.sample(s);
                    }
                }
                Event::Comm { tid, name, .. } => {
                    let id = self.intern(&name);
                    self.comms.insert(tid, id);
                    // A process rename changes the roots of all its threads.
                    self.cache.clear();
                    self.last = None;
                }
                Event::Fork { pid, tid, ptid, .. } => {
                    // A new thread runs under its creator's name until it sets its own.
                    if let Some(&parent) = self.comms.get(&ptid) {
                        self.comms.insert(tid, parent);
                    }
                    self.cache.remove(&(pid, tid));
                    self.last = None;
                }
                Event::Identity(id) => {
                    if let Some(kept) = &mut self.agg.kept {
                        kept.identity(&id);
                    }
                    if self.opts.container {
                        self.containers.insert(id.pid, id.container_label());
                        self.cache.clear();
                        self.last = None;
                    }
                }
                Event::Lost { count, .. } => self.agg.lost = self.agg.lost.saturating_add(count),
                _ => {}
            }
        }
    }

    pub(crate) fn finish(self) -> Aggregate {
        self.agg
    }

    fn sample(&mut self, s: &Sample) {
        let key = (s.pid, s.tid);
        let slot = match self.last {
            Some((k, slot)) if k == key => slot,
            _ => {
                let slot = match self.cache.get(&key) {
                    Some(&slot) => slot,
                    None => {
                        let slot = self.resolve(s.pid, s.tid);
                        self.cache.insert(key, slot);
                        slot
                    }
                };
                self.last = Some((key, slot));
                slot
            }
        };
        let Some(r) = slot else {
            return;
        };
        let agg = &mut self.agg;
        let c = agg.counts.entry((r.root, s.stack)).or_insert(0);
        *c = c.saturating_add(s.weight);
        if let Some(kept) = &mut agg.kept {
            kept.push(s, r.thread);
        }
        let p = agg.processes.entry(s.pid).or_default();
        p.comm = r.process;
        p.samples += 1;
        p.weight = p.weight.saturating_add(s.weight);
        agg.samples += 1;
        agg.weight = agg.weight.saturating_add(s.weight);
        agg.last_time_ns = agg.last_time_ns.max(s.time_ns);
    }

    /// Root and process name of a thread, or `None` when the filters drop it.
    fn resolve(&mut self, pid: u32, tid: u32) -> Slot {
        let o = self.opts;
        if !o.pids.is_empty() && !o.pids.contains(&pid) {
            return None;
        }
        if !o.tids.is_empty() && !o.tids.contains(&tid) {
            return None;
        }
        let thread = self.comms.get(&tid).or_else(|| self.comms.get(&pid));
        let process = self.comms.get(&pid).or(thread);
        let thread = thread.copied();
        let process = process.copied();
        let name = |id: Option<NameId>| -> &str {
            id.and_then(|i| self.agg.names.get(i as usize))
                .map_or(UNKNOWN, String::as_str)
        };
        // `--comm` matches the thread's or the process's name, so naming the
        // program also keeps its differently named worker threads.
        if !o.comms.is_empty()
            && !o
                .comms
                .iter()
                .any(|c| c == name(thread) || c == name(process))
        {
            return None;
        }
        let mut root = match self.mode {
            RootMode::Comm => name(thread).to_string(),
            RootMode::Process => format!("{}-{pid}", name(process)),
            RootMode::Thread => format!("{}-{pid}/{tid}", name(thread)),
        };
        if o.container {
            // A frame of its own above the root (each sanitized alone).
            let label = self.containers.get(&pid).map_or("unknown", String::as_str);
            root = format!("{label}{ROOT_FRAMES}{root}");
        }
        let proc_name = name(process).to_string();
        let thread_name = self.agg.kept.is_some().then(|| name(thread).to_string());
        let root = self.intern(&root);
        let process = self.intern(&proc_name);
        // Names change only between resolutions, so a kept thread ends up
        // with its names at its last sample.
        let thread = match thread_name {
            Some(n) => {
                let n = self.intern(&n);
                let kept = self.agg.kept.as_mut();
                kept.map_or(0, |k| k.thread(pid, tid, n, process))
            }
            None => 0,
        };
        Some(Resolved {
            root,
            process,
            thread,
        })
    }

    fn intern(&mut self, s: &str) -> NameId {
        if let Some(&id) = self.name_ids.get(s) {
            return id;
        }
        let id = self.agg.names.len() as NameId;
        self.agg.names.push(s.to_string());
        self.name_ids.insert(s.to_string(), id);
        id
    }
}
