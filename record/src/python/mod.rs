//! Python frames in recordings, read at the sample (as root): a BPF
//! program attached to every sampling event walks the sampled thread's
//! CPython frames in the kernel before the sample is written
//! (`flamerec_python::bpf`), and writes the walk, stamped with its time, to
//! a ring this module reads each round before the round's samples are
//! handled. A sample takes the walk of its thread that ran just before it;
//! its Python frames are then spliced into its native stack where each call
//! of the eval loop runs, the interpreter's own frames between two runs
//! left out (the rules are `splice`'s; this module names the frames).
//!
//! What this module keeps: the CPython processes seen (their layout, where
//! their eval loop is, as (module, file offset)), which of their threads
//! the program knows (thread states are read from the process when a
//! sample of a thread it does not know comes), the walks waiting for their
//! samples, and one frame per code object, named once from the process's
//! memory ("qualname (file)"), whose names go into the recording's names
//! section. It never guesses: a sample whose runs and eval-loop frames do
//! not pair one for one keeps its native frames alone, and is counted.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use flamerec_bpf::{BpfError, Program, RingBuffer};
use flamerec_convert::Converter;
use flamerec_format::{Frame, FrameId, ModuleId, PythonRead};
use flamerec_python::bpf::{Entry, Record, WalkerMaps};
use flamerec_python::{is_cpython_binary, FindError, Interpreter, Process};

use crate::rings::Event;
use crate::sys;

mod frames;
mod stats;

use frames::CodeFrame;
pub(crate) use stats::PythonStats;

/// The ring the walks go through: records of up to 3 KiB, read each round;
/// sized for two seconds of walks at the sampling rate, within these.
const RING_BYTES: std::ops::RangeInclusive<u32> = (256 << 10)..=(8 << 20);

/// The walks' ring for `walks_per_s` samples a second (frequency × CPUs): two
/// seconds of the largest records, a power of two (the kernel's rule) within
/// [`RING_BYTES`]. At 999 Hz on 2 CPUs that is the 8 MiB it always was; at
/// 19 Hz, 256 KiB (an always-on recorder's 16 MiB of RSS otherwise).
fn ring_bytes(walks_per_s: u64) -> u32 {
    let want = walks_per_s.saturating_mul(3 << 10).saturating_mul(2);
    let want = u32::try_from(want).unwrap_or(u32::MAX);
    // Within the bounds, both powers of two: the next one stays within.
    want.clamp(*RING_BYTES.start(), *RING_BYTES.end())
        .next_power_of_two()
}
/// Names read by walks and not yet used, at most (a bound; each is used
/// by the sample whose walk read it).
const MAX_NAMES_READ: usize = 1 << 16;
/// A walk ran this close to its sample's time (the kernel takes the
/// sample's time, then runs the program: microseconds apart); older walks
/// of the thread were for samples that were lost.
const MATCH_WINDOW_NS: u64 = 1_000_000;
/// A process's thread states are read again at most this often.
const REFRESH_EVERY: Duration = Duration::from_millis(10);

/// One CPython process.
struct Proc {
    interp: Interpreter,
    /// The module the interpreter's binary is, and its eval loop's file
    /// offset ranges there, once the mapping of the binary was handled.
    binary: Option<ModuleId>,
    eval: Vec<(u64, u64)>,
    /// The threads the program knows, with their thread states.
    known: HashMap<u32, u64>,
    refreshed: Option<Instant>,
    /// Its samples with Python frames shown, and those left native.
    shown: u64,
    native_only: u64,
}

impl Proc {
    /// The eval loop as (module, file offset) ranges, once the converter
    /// holds the mapping of the interpreter's binary (the process's first
    /// CPython mapping may be an executable that maps libpython after).
    fn place<W: io::Write>(&mut self, pid: u32, conv: &Converter<W>) {
        let mut eval = Vec::new();
        for &(start, end) in &self.interp.eval {
            let (Some(a), Some(b)) = (
                conv.resolve_user(pid, start),
                conv.resolve_user(pid, end - 1),
            ) else {
                return;
            };
            if a.module != b.module || self.binary.is_some_and(|m| m != a.module) {
                return;
            }
            self.binary = Some(a.module);
            eval.push((a.address, b.address + 1));
        }
        self.eval = eval;
    }
}

/// What is shown beside the Python functions' frames.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown {
    /// One frame per line a function was sampled at (`--python-lines`).
    pub lines: bool,
    /// The interpreter's own frames (`--python-interpreter`).
    pub interpreter: bool,
}

/// Python frames of a recording: the walker, the CPython processes it
/// walks, and the frames and names made of their walks.
pub(crate) struct Python {
    maps: WalkerMaps,
    program: Program,
    /// The sampling events (duplicated descriptors) while the program
    /// waits for a CPython process to be attached to them.
    unattached: Vec<OwnedFd>,
    procs: HashMap<u32, Proc>,
    walks: HashMap<u32, VecDeque<Record>>,
    /// By (process, code object address, identity at the sample).
    code_frames: HashMap<(u32, u64, u64), CodeFrame>,
    /// Names the walks read at their samples, by (process, code object,
    /// identity), until a frame of that code is made.
    names_read: HashMap<(u32, u64, u64), (String, String)>,
    /// What is shown beside the functions' frames.
    shown: Shown,
    line_frames: HashMap<(u32, u64, u64, i32), Frame>,
    /// The frames standing for Python frames that cannot be named.
    markers: HashMap<&'static str, Frame>,
    module: Option<ModuleId>,
    next_address: u64,
    /// Processes whose thread states are to be read at the round's end.
    stale: HashSet<u32>,
    /// Names of the Python frames, for the names section.
    pub names: Vec<(FrameId, Vec<String>)>,
    /// Of those, how many were written as learned (see [`Python::new_names`]).
    names_written: usize,
    pub stats: PythonStats,
    /// By version, the processes gone and what their samples showed.
    read: BTreeMap<String, PythonRead>,
    /// CPython versions found that no layout is known for.
    unknown: BTreeSet<String>,
}

/// What the recording learnt of Python frames, at its end.
pub(crate) struct PythonEnd {
    pub names: Vec<(FrameId, Vec<String>)>,
    pub stats: PythonStats,
    pub read: Vec<PythonRead>,
    pub warnings: Vec<String>,
}

impl Python {
    /// Builds the walker (before the events are opened: see
    /// [`Python::program`]); the ring its walks go to comes with it. An
    /// error says why Python frames cannot be read (BPF refused: not root,
    /// or no CAP_BPF and CAP_PERFMON).
    pub(crate) fn start(
        shown: Shown,
        command: Option<&Path>,
        walks_per_s: u64,
    ) -> Result<(Python, RingBuffer), String> {
        let mut maps = WalkerMaps::new(4096, 65_536).map_err(unreadable)?;
        let ring = RingBuffer::new(ring_bytes(walks_per_s)).map_err(unreadable)?;
        let first = command.and_then(flamerec_python::minor_of_binary);
        let program = maps.program(Some(&ring), first).map_err(unreadable)?;
        let unattached = Vec::new();
        Ok((
            Python {
                maps,
                program,
                unattached,
                procs: HashMap::new(),
                walks: HashMap::new(),
                code_frames: HashMap::new(),
                names_read: HashMap::new(),
                shown,
                line_frames: HashMap::new(),
                markers: HashMap::new(),
                module: None,
                next_address: 0,
                stale: HashSet::new(),
                names: Vec::new(),
                names_written: 0,
                stats: PythonStats::default(),
                read: BTreeMap::new(),
                unknown: BTreeSet::new(),
            },
            ring,
        ))
    }

    /// The program the events run: attached as each is opened where it is
    /// wanted from the start (see `open::open_with_fallbacks`).
    pub(crate) fn program(&self) -> &OwnedFd {
        self.program.fd()
    }

    /// The sampling events, opened: `attached` when the program was
    /// attached as each was opened, else it is once a CPython process is
    /// found.
    pub(crate) fn events(&mut self, events: &[Event], attached: bool) -> Result<(), String> {
        if attached {
            return Ok(());
        }
        for e in events {
            self.unattached
                .push(e.fd.try_clone().map_err(|e| e.to_string())?);
        }
        Ok(())
    }

    /// The sampling events are closed: its copies of those it never
    /// attached to go too (an open one keeps the kernel's callchain cap).
    pub(crate) fn events_closed(&mut self) {
        self.unattached.clear();
    }

    /// Process `pid` mapped `path` (after the converter applied it): a
    /// CPython's binary makes it a CPython process.
    pub(crate) fn mapped<W: io::Write>(&mut self, pid: u32, path: &str, conv: &Converter<W>) {
        if self.procs.contains_key(&pid) || !is_cpython_binary(path) {
            return;
        }
        let interp = match Interpreter::find(pid) {
            Ok(Some(interp)) => interp,
            Err(FindError::UnknownVersion(major, minor, _)) => {
                self.unknown.insert(format!("{major}.{minor}"));
                return;
            }
            _ => return,
        };
        let Some(index) = self.maps.layout_index(&interp.layout) else {
            // More distinct layouts than one recording walks.
            let (major, minor, micro) = interp.version;
            self.unknown.insert(format!("{major}.{minor}.{micro}"));
            return;
        };
        if attach(&mut self.unattached, &self.program).is_err() {
            return;
        }
        self.follow(pid, interp, index, conv);
    }

    /// Walks `pid`'s threads from now on, with the walk of layout `index`;
    /// its thread states are read at the round's end.
    fn follow<W: io::Write>(
        &mut self,
        pid: u32,
        interp: Interpreter,
        index: u32,
        conv: &Converter<W>,
    ) {
        if self.maps.add_process(pid, index).is_err() {
            return;
        }
        let mut p = Proc {
            interp,
            binary: None,
            eval: Vec::new(),
            known: HashMap::new(),
            refreshed: None,
            shown: 0,
            native_only: 0,
        };
        p.place(pid, conv);
        self.procs.insert(pid, p);
        self.stale.insert(pid);
    }

    /// `child` was forked from `parent` (fork, a pre-fork server's worker,
    /// multiprocessing's `fork` and `forkserver`): a copy of its parent's
    /// address space, the same interpreter at the same addresses, walked
    /// like it. The child's thread states are read at its first samples
    /// (its one thread's state is the forking thread's). No mapping record
    /// comes for what a fork copies, so this is the only way it is known.
    pub(crate) fn forked<W: io::Write>(&mut self, parent: u32, child: u32, conv: &Converter<W>) {
        if self.procs.contains_key(&child) {
            return;
        }
        let Some(interp) = self.procs.get(&parent).map(|p| p.interp.clone()) else {
            return;
        };
        let Some(index) = self.maps.layout_index(&interp.layout) else {
            return;
        };
        self.follow(child, interp, index, conv);
    }

    /// Thread `tid` of `pid` exited: its walks and its thread state go (a
    /// later thread may get its id).
    pub(crate) fn thread_exited(&mut self, pid: u32, tid: u32) {
        self.walks.remove(&tid);
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.known.remove(&tid).is_some() {
                let _ = self.maps.remove_thread(tid);
            }
        }
    }

    /// A process exited or exec'd: what was known of it goes.
    pub(crate) fn forget(&mut self, pid: u32) {
        if let Some(p) = self.procs.remove(&pid) {
            let _ = self.maps.remove_process(pid);
            self.count_gone(&p);
            for tid in p.known.into_keys() {
                let _ = self.maps.remove_thread(tid);
                self.walks.remove(&tid);
            }
        }
        self.code_frames.retain(|&(p, _, _), _| p != pid);
        self.line_frames.retain(|&(p, _, _, _), _| p != pid);
    }

    /// Adds a process's counts to its version's. A process image that was
    /// never sampled is not counted (a forked child that exec'd at once
    /// would count twice).
    fn count_gone(&mut self, p: &Proc) {
        if p.shown + p.native_only == 0 {
            return;
        }
        let (major, minor, micro) = p.interp.version;
        let r = self
            .read
            .entry(format!("{major}.{minor}.{micro}"))
            .or_insert_with_key(|version| PythonRead {
                version: version.clone(),
                read: "at-sample".into(),
                ..PythonRead::default()
            });
        r.processes += 1;
        r.samples_with_frames += p.shown;
        r.samples_native_only += p.native_only;
    }

    /// The end of the recording: names, counts, and what to say.
    pub(crate) fn finish(mut self) -> PythonEnd {
        for p in std::mem::take(&mut self.procs).into_values() {
            self.count_gone(&p);
        }
        let warnings = self
            .unknown
            .iter()
            .map(|v| format!("CPython {v} ran, a version flamerec has no layout for (it knows 3.8 to 3.15; from 3.13 as the runtime publishes it): its samples keep their native frames"))
            .collect();
        PythonEnd {
            names: self.names,
            stats: self.stats,
            read: self.read.into_values().collect(),
            warnings,
        }
    }

    /// The walks and names the program wrote, from the ring.
    pub(crate) fn read(ring: &mut RingBuffer) -> Vec<Entry> {
        let mut out = Vec::new();
        ring.drain(|b| out.extend(Entry::parse(b)));
        out
    }

    /// Walks read this round, each to wait for its sample, and the names
    /// read with them.
    pub(crate) fn absorb(&mut self, entries: Vec<Entry>) {
        for e in entries {
            match e {
                Entry::Walk(w) => self.walks.entry(w.tid).or_default().push_back(w),
                Entry::Names(n) => {
                    if let (Some(name), Some(file)) = (n.name, n.file) {
                        if self.names_read.len() < MAX_NAMES_READ {
                            let key = (n.tgid, n.code, n.identity);
                            self.names_read.insert(key, (name, file));
                        }
                    }
                }
            }
        }
    }

    /// The walk of sample (`pid`, `tid`, `time`, `ip`), if one ran for it:
    /// the walk of that thread at that instruction, within
    /// [`MATCH_WINDOW_NS`] of the sample's time.
    pub(crate) fn walk_of(
        &mut self,
        pid: u32,
        tid: u32,
        time: u64,
        ip: u64,
    ) -> Option<Box<Record>> {
        if !self.procs.contains_key(&pid) {
            return None;
        }
        let mut found = None;
        if let Some(q) = self.walks.get_mut(&tid) {
            // Walks too old for this sample were for samples that were lost.
            while q.front().is_some_and(|w| w.time + MATCH_WINDOW_NS < time) {
                q.pop_front();
            }
            let at = q
                .iter()
                .position(|w| w.ip == ip && w.time.abs_diff(time) <= MATCH_WINDOW_NS);
            found = at.and_then(|i| q.remove(i));
        }
        match found {
            Some(w) => Some(Box::new(w)),
            None => {
                self.stats.unwalked += 1;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.native_only += 1;
                }
                self.stale.insert(pid);
                None
            }
        }
    }

    /// The names made since the last call: written into the recording as
    /// they are learned, so a recorder killed before its names section
    /// leaves them (no binary can name Python frames later).
    pub(crate) fn new_names(&mut self) -> &[(FrameId, Vec<String>)] {
        let from = std::mem::replace(&mut self.names_written, self.names.len());
        &self.names[from..]
    }

    /// End of a round: the thread states of processes with threads the
    /// program did not know are read, and walks no sample took go.
    pub(crate) fn end_round(&mut self) {
        for pid in std::mem::take(&mut self.stale) {
            let Some(p) = self.procs.get_mut(&pid) else {
                continue;
            };
            if p.refreshed.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
                self.stale.insert(pid);
                continue;
            }
            p.refreshed = Some(Instant::now());
            let tids = flamerec_python::thread_ids(pid);
            let Ok(threads) = p.interp.thread_states(&Process(pid), &tids) else {
                continue;
            };
            // Its runtime has started: a 3.8–3.10's micro version is known.
            p.interp.learn_micro(&Process(pid));
            for t in threads {
                // A thread not told yet is read again at its next sample
                // without a walk.
                let Some(tid) = t.tid else { continue };
                if p.known.insert(tid, t.tstate) != Some(t.tstate) {
                    // A thread the map cannot take stays unwalked.
                    let _ = self.maps.add_thread(tid, t.tstate);
                }
            }
        }
        // A walk whose sample was lost waits no longer than a few rounds.
        for q in self.walks.values_mut() {
            while q.len() > 64 {
                q.pop_front();
            }
        }
    }
}

/// Why Python frames are not read, when the kernel would not run the BPF
/// program that reads them for want of privilege (said where a CPython runs).
pub(crate) const NEEDS_PRIVILEGE: &str =
    "they are read at each sample by a BPF program, which the \
     kernel runs only for root (or with CAP_BPF and CAP_PERFMON): run flamerec as root to see them";

/// Why Python frames cannot be read, from the walker's error.
fn unreadable(e: BpfError) -> String {
    if e.refused() {
        NEEDS_PRIVILEGE.to_string()
    } else {
        format!("the BPF program that reads them: {e}")
    }
}

/// Attaches `program` to every event in `events`, which empties.
fn attach(events: &mut Vec<OwnedFd>, program: &Program) -> Result<(), String> {
    for fd in events.iter() {
        sys::set_bpf(fd, program.fd())
            .map_err(|e| format!("the BPF program that reads them: attaching it: {e}"))?;
    }
    events.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walks_ring_follows_the_sampling_rate() {
        assert_eq!(ring_bytes(999 * 2), 8 << 20);
        assert_eq!(ring_bytes(199 * 2), 4 << 20);
        assert_eq!(ring_bytes(19 * 2), 256 << 10);
        assert_eq!(ring_bytes(1), 256 << 10);
        assert_eq!(ring_bytes(u64::MAX), 8 << 20);
    }
}
