//! JIT code while recording: each process's perf map and jitdumps followed
//! (see `flamerec_jit`), their code made known to the unwinder, and the
//! user frames of samples in anonymous memory named by the code in force
//! there at the sample's time.
//!
//! A process is followed once it maps anonymous executable memory (where
//! JIT code lives), maps a `jit-*.dump` (the runtimes mmap their dump so
//! perf sees it: that mapping is how its path is found), or is first
//! sampled with a map already in `/tmp`. The files are read at the start
//! of each drain round: a runtime writes a function's load or map line
//! before it runs the code, so every sample of that round that ran it
//! finds it.
//!
//! A named frame moves to a module of its own per JIT name (kind
//! anonymous, path `[jit]`, the name's number as build id), at the same
//! absolute address: code re-JITted at one address under another name is
//! then another frame, and the name travels in the names section like
//! every other (see [`JitNames::finish`]). Frames no timed line or load
//! named stay in `[anon]` and are named at the end when the files, read
//! whole by then, leave no doubt (see `name_at_end`).

use std::collections::{HashMap, HashSet};
use std::io;
use std::ops::Range;
use std::path::PathBuf;

use flamerec_format::{Frame, FrameId, JitFrames, Module, ModuleId, ModuleKind, Writer};
use flamerec_jit::{Clock, JitDump, PerfMap, Rules};
use flamerec_perf::procfs::view;
use flamerec_unwind::StackUnwinder;

/// The largest perf map read.
const MAX_MAP: u64 = 256 << 20;
/// The largest jitdump read (node writes the code bytes too).
const MAX_DUMP: u64 = 1 << 30;
use crate::ended::Ended;
use crate::pynames::PY_PREFIX;

mod advice;
mod at_end;
mod interpreted;
mod unwinding;

use unwinding::{find_trampolines, register};

/// One process's JIT files, and how much of each the unwinder knows.
struct Sources {
    map: PerfMap,
    map_done: usize,
    dumps: Vec<(JitDump, usize)>,
    rules: Rules,
}

/// Every followed process's JIT code and the modules its names became.
#[derive(Default)]
pub(crate) struct JitNames {
    procs: HashMap<u32, Sources>,
    /// Processes not followed: their owner could not be read (gone), or
    /// they had no map when first sampled. Samples do not ask again; a
    /// mapping of JIT memory or of a dump does.
    unreadable: HashSet<u32>,
    /// Whether each module of the recording (by id) is plain anonymous
    /// memory, whose frames are looked up.
    anon: Vec<bool>,
    /// Whether each module of the recording (by id) is a CPython binary.
    interpreter: Vec<bool>,
    /// JIT name → its module, and back.
    modules: HashMap<String, ModuleId>,
    names: HashMap<ModuleId, String>,
    /// JIT name's module → where the name was first found at a sample's
    /// time.
    sources: HashMap<ModuleId, Source>,
    /// Samples with JIT frames no file named when sampled, anywhere in
    /// their stacks, by (process, those frames' addresses), with each
    /// process's command name: said at the end when some are still
    /// unnamed (see [`setup_advice`]).
    unnamed: HashMap<(u32, Vec<u64>), u64>,
    /// Per address of a frame no file named when sampled: per process,
    /// the first and last time it was sampled (see [`JitNames::name_at_end`]).
    spans: HashMap<u64, Vec<(u32, u64, u64)>>,
    /// node binaries' interpreter entries (module, file offsets), and per
    /// process the samples that ran through one (see `interpreted`).
    interpreter_entries: Vec<(ModuleId, Range<u64>)>,
    interpreted: HashMap<u32, u64>,
    /// The command the recording started, by its process name: processes
    /// of other names ran behind it (see `advice`).
    pub(crate) command: Option<String>,
    /// Samples per process, for each command's share.
    samples: HashMap<u32, u64>,
    comms: HashMap<u32, String>,
    /// Processes that mapped a CPython binary: their anonymous executable
    /// memory is searched for perf trampolines (see [`find_trampolines`]).
    cpython: HashSet<u32>,
    /// Processes whose dump was said to be on another clock.
    clock_said: HashSet<u32>,
    warnings: Vec<String>,
    /// Frames of the recording looked at by [`JitNames::new_names`] so far.
    frames_seen: usize,
    /// Followed processes that exited (when, on the samples' clock), oldest
    /// first: read once more at their exit, then no longer polled, and let
    /// go [`EXITED_KEPT_NS`] later (their late samples are named until then).
    exited: Ended<EXITED_KEPT_NS>,
    done: HashSet<u32>,
}

/// How long the sources of an exited process stay for its late samples.
/// Without an end, a system-wide recording polled the perf map of every
/// process that had ever mapped anonymous executable memory, each round,
/// for as long as it ran (3% of the agent's CPU beside a build).
const EXITED_KEPT_NS: u64 = 30_000_000_000;

/// Where `pid`'s runtime writes its perf map: `perf-N.map` in its own
/// `/tmp`, N its pid in its own pid namespace (a container's runtime knows
/// no other).
fn perf_map_path(pid: u32) -> PathBuf {
    let ns_pid = view::ns_pid(pid).unwrap_or(pid);
    as_seen_by(pid, &format!("/tmp/perf-{ns_pid}.map"))
}

/// A path `pid` named (a jitdump it mapped, its perf map), reached from
/// here: under its own root when it sees other files than ours.
fn as_seen_by(pid: u32, path: &str) -> PathBuf {
    if view::shares_our_files(pid) == Some(false) {
        view::under_root(pid, path)
    } else {
        PathBuf::from(path)
    }
}

/// The most (process, unnamed JIT addresses of a sample) kept for the
/// setup advice.
const MAX_UNNAMED: usize = 1 << 16;

impl JitNames {
    /// An executable mapping of `pid` (a record or a line of /proc/PID/maps)
    /// of `path`; `image` when a file was found for it (then memory without
    /// a file at its path, a memfd, is an executable's image, not JIT code).
    pub(crate) fn mapping(
        &mut self,
        pid: u32,
        (path, image): (&str, bool),
        range: Range<u64>,
        now: u64,
        mut u: Option<&mut StackUnwinder>,
    ) {
        if flamerec_python::is_cpython_binary(path) {
            self.cpython.insert(pid);
            return;
        }
        if is_jitdump(path) {
            let Some(s) = self.follow(pid) else { return };
            let path = as_seen_by(pid, path);
            if !s.dumps.iter().any(|(d, _)| d.path() == path) {
                let rules = Rules {
                    max_len: MAX_DUMP,
                    ..s.rules
                };
                s.dumps.push((JitDump::new(path, rules), 0));
            }
        } else if !image && Module::mapped(path, &[]).kind == ModuleKind::Anonymous {
            self.follow(pid);
            if self.cpython.contains(&pid) {
                if let Some(u) = u.as_deref_mut() {
                    find_trampolines(pid, range, u);
                }
            }
        } else {
            return;
        }
        self.poll_pid(pid, now, u);
    }

    /// A sample of `pid`: a process not followed yet is when its perf map
    /// exists (attached to a runtime that wrote one before).
    pub(crate) fn sampled(&mut self, pid: u32, now: u64, u: Option<&mut StackUnwinder>) {
        *self.samples.entry(pid).or_default() += 1;
        if self.procs.contains_key(&pid) || self.unreadable.contains(&pid) {
            return;
        }
        if std::fs::symlink_metadata(perf_map_path(pid)).is_ok() {
            self.follow(pid);
            self.poll_pid(pid, now, u);
        } else {
            // Asked once per process: a map written later comes with
            // anonymous executable memory, whose mapping starts following.
            self.unreadable.insert(pid);
        }
    }

    /// Process `pid` exited at `now`: what its runtime wrote last is read,
    /// and it is polled no more.
    pub(crate) fn exited(&mut self, pid: u32, now: u64, u: Option<&mut StackUnwinder>) {
        if self.procs.contains_key(&pid) && self.done.insert(pid) {
            self.poll_pid(pid, now, u);
            self.exited.push(now, pid);
        }
        for (_, gone) in self.exited.expired(now) {
            if self.done.remove(&gone) {
                self.procs.remove(&gone);
            }
        }
    }

    /// `child` was forked from `parent`: a CPython's child is one too (its
    /// perf trampolines are found in the anonymous memory it maps).
    pub(crate) fn forked(&mut self, parent: u32, child: u32) {
        // A pid used again: what was followed was the exited process's.
        if self.done.remove(&child) {
            self.procs.remove(&child);
        }
        if self.cpython.contains(&parent) {
            self.cpython.insert(child);
        }
    }

    /// `pid` called exec: its files were the old image's.
    pub(crate) fn exec(&mut self, pid: u32) {
        // Its name is read again: a shell that exec'd node is node now.
        self.comms.remove(&pid);
        self.done.remove(&pid);
        self.procs.remove(&pid);
        self.unreadable.remove(&pid);
    }

    fn follow(&mut self, pid: u32) -> Option<&mut Sources> {
        if !self.procs.contains_key(&pid) {
            let uid = match flamerec_jit::process_uid(pid) {
                Ok(uid) => uid,
                Err(_) => {
                    self.unreadable.insert(pid);
                    return None;
                }
            };
            self.unreadable.remove(&pid);
            self.comms.entry(pid).or_insert_with(|| comm_of(pid));
            let rules = Rules {
                uid,
                max_len: MAX_MAP,
                // A map left by an earlier process with this pid is not its.
                not_before: flamerec_jit::process_start(pid).ok(),
            };
            self.procs.insert(
                pid,
                Sources {
                    map: PerfMap::new(perf_map_path(pid), rules),
                    map_done: 0,
                    dumps: Vec::new(),
                    rules,
                },
            );
        }
        self.procs.get_mut(&pid)
    }

    /// Reads what every followed process appended (at the start of a
    /// drain round; `now` on the samples' clock).
    pub(crate) fn poll(&mut self, now: u64, mut u: Option<&mut StackUnwinder>) {
        let pids: Vec<u32> = self
            .procs
            .keys()
            .filter(|p| !self.done.contains(p))
            .copied()
            .collect();
        for pid in pids {
            self.poll_pid(pid, now, u.as_deref_mut());
        }
    }

    fn poll_pid(&mut self, pid: u32, now: u64, u: Option<&mut StackUnwinder>) {
        let Some(s) = self.procs.get_mut(&pid) else {
            return;
        };
        if let Err(e) = s.map.poll(now) {
            self.warnings.push(format!("JIT names: {e}"));
        }
        for (d, _) in &mut s.dumps {
            if let Err(e) = d.poll(now) {
                self.warnings.push(format!("JIT names: {e}"));
            }
            if d.clock() == Some(Clock::ArchTimestamp) && self.clock_said.insert(pid) {
                self.warnings.push(format!(
                    "JIT names: {}: times are the CPU's time-stamp counter \
                     (JITDUMP_FLAGS_ARCH_TIMESTAMP), not the samples' clock: its code is \
                     named from when flamerec read it",
                    d.path().display()
                ));
            }
        }
        if let Some(u) = u {
            register(pid, s, u);
        }
    }

    /// Names the user frames of a sample of `pid` at `time` that lie in
    /// anonymous memory, moving each named one to its name's module.
    pub(crate) fn name_frames<W: io::Write>(
        &mut self,
        writer: &mut Writer<W>,
        pid: u32,
        time: u64,
        frames: &mut [Frame],
    ) {
        self.learn_modules(writer);
        self.count_interpreted(pid, frames);
        let mut unnamed = Vec::new();
        for f in frames.iter_mut() {
            if !self.anon.get(f.module as usize).copied().unwrap_or(false) {
                continue;
            }
            match self.lookup(pid, f.address, time) {
                Some((name, source)) => f.module = self.module_of(writer, name, source),
                None => {
                    self.sampled_unnamed(pid, f.address, time);
                    unnamed.push(f.address);
                }
            }
        }
        if !unnamed.is_empty() {
            self.unnamed_in(pid, unnamed);
        }
    }

    /// Leaves out of `frames` (a sample of `pid`: its user frames, leaf first, named)
    /// the interpreter's own frames between two of CPython's perf
    /// trampolines, as the frame chain's splice leaves them out between two
    /// runs: `-X perf` without BPF reads like Python frames. Trampolines
    /// count once named (a perf map names them at the sample; a buffered
    /// jitdump only later, and those samples keep their frames).
    pub(crate) fn leave_out_interpreter(&self, pid: u32, frames: &mut Vec<Frame>) {
        // Nothing to look up in a process that mapped no CPython.
        if !self.cpython.contains(&pid) {
            return;
        }
        let trampoline = |f: &Frame| {
            self.name_of(f.module)
                .is_some_and(|n| n.starts_with(PY_PREFIX))
        };
        let (Some(first), Some(last)) = (
            frames.iter().position(trampoline),
            frames.iter().rposition(trampoline),
        ) else {
            return;
        };
        let mut i = 0;
        frames.retain(|f| {
            let between = i > first && i < last;
            i += 1;
            !(between
                && self
                    .interpreter
                    .get(f.module as usize)
                    .copied()
                    .unwrap_or(false))
        });
    }

    /// The names of the recording's frames new since the last call whose
    /// JIT code was named at their sample: written into the recording as
    /// they are learned (a continuous recording's windows carry them; a
    /// recorder killed before its names section leaves them).
    pub(crate) fn new_names<W: io::Write>(
        &mut self,
        writer: &Writer<W>,
    ) -> Vec<(FrameId, Vec<String>)> {
        let from = self.frames_seen;
        let frames = writer.frames_from(from);
        self.frames_seen = from + frames.len();
        if self.names.is_empty() {
            return Vec::new();
        }
        (from as FrameId..)
            .zip(frames)
            .filter_map(|(id, f)| Some((id, vec![self.names.get(&f.module)?.clone()])))
            .collect()
    }

    /// The name a JIT frame of `module` was given, if it is one.
    pub(crate) fn name_of(&self, module: ModuleId) -> Option<&str> {
        self.names.get(&module).map(String::as_str)
    }

    /// A sample of `pid` whose JIT frames at `addrs` were not named when
    /// it was taken (a later read may still name them).
    fn unnamed_in(&mut self, pid: u32, mut addrs: Vec<u64>) {
        addrs.sort_unstable();
        addrs.dedup();
        let key = (pid, addrs);
        if self.unnamed.len() >= MAX_UNNAMED && !self.unnamed.contains_key(&key) {
            return;
        }
        *self.unnamed.entry(key).or_default() += 1;
        self.comms.entry(pid).or_insert_with(|| comm_of(pid));
    }

    fn lookup(&self, pid: u32, addr: u64, time: u64) -> Option<(String, Source)> {
        let s = self.procs.get(&pid)?;
        // The newest dump first (a runtime may map more than one).
        let from_dump = s
            .dumps
            .iter()
            .rev()
            .find_map(|(d, _)| d.lookup(addr, time))
            .map(|l| (l.name.clone(), Source::Jitdump));
        from_dump.or_else(|| {
            s.map
                .lookup(addr, time)
                .map(|e| (e.name.clone(), Source::PerfMap))
        })
    }

    fn learn_modules<W: io::Write>(&mut self, writer: &Writer<W>) {
        let from = self.anon.len();
        for (i, m) in writer.modules_from(from).iter().enumerate() {
            let cpython =
                m.kind != ModuleKind::Anonymous && flamerec_python::is_cpython_binary(&m.path);
            self.interpreter.push(cpython);
            let id = (from + i) as ModuleId;
            self.learn_interpreter_entry(id, m);
            // Not the recorder's own: JIT names' modules, the Python
            // frames' (`[python]`, named by the Python reader), and
            // addresses no mapping holds.
            let plain = m.kind == ModuleKind::Anonymous
                && m.path != crate::pynames::MODULE
                && m.path != flamerec_convert::UNKNOWN_MODULE
                && !self.names.contains_key(&id);
            self.anon.push(plain);
        }
    }

    fn module_of<W: io::Write>(
        &mut self,
        writer: &mut Writer<W>,
        name: String,
        source: Source,
    ) -> ModuleId {
        if let Some(&m) = self.modules.get(&name) {
            return m;
        }
        let number = self.modules.len() as u32;
        let id = writer.module(&Module {
            kind: ModuleKind::Anonymous,
            path: "[jit]".into(),
            build_id: number.to_le_bytes().to_vec(),
        });
        self.names.insert(id, name.clone());
        self.sources.insert(id, source);
        self.modules.insert(name, id);
        // Its frames are named already.
        if let Some(slot) = self.anon.get_mut(id as usize) {
            *slot = false;
        }
        id
    }

    /// After the last drain, the processes ended: the last reads (a map
    /// written at exit), then the names of every JIT frame, for the names
    /// section (ascending frame ids), the warnings, and the frames counted
    /// by where their names came from.
    pub(crate) fn finish<W: io::Write>(mut self, writer: &Writer<W>, now: u64) -> JitEnd {
        let (out, counts) = self.name_all(writer, now);
        let advice = self.advice();
        self.warnings.extend(advice);
        JitEnd {
            names: out,
            warnings: self.warnings,
            frames: counts,
        }
    }

    /// The last reads, then the names of every JIT frame, and how many
    /// were named from where.
    fn name_all<W: io::Write>(
        &mut self,
        writer: &Writer<W>,
        now: u64,
    ) -> (Vec<(FrameId, Vec<String>)>, JitFrames) {
        for s in self.procs.values_mut() {
            if let Err(e) = s.map.finish(now) {
                self.warnings.push(format!("JIT names: {e}"));
            }
            for (d, _) in &mut s.dumps {
                if let Err(e) = d.poll(now) {
                    self.warnings.push(format!("JIT names: {e}"));
                }
            }
        }
        self.learn_modules(writer);
        let mut out = Vec::new();
        let mut counts = JitFrames::default();
        for (id, f) in writer.frames_from(0).iter().enumerate() {
            let id = id as FrameId;
            if let Some(name) = self.names.get(&f.module) {
                match self.sources.get(&f.module) {
                    Some(Source::Jitdump) => counts.jitdump += 1,
                    _ => counts.perf_map += 1,
                }
                out.push((id, vec![name.clone()]));
            } else if self.anon.get(f.module as usize).copied().unwrap_or(false) {
                match self.name_at_end(f.address) {
                    Some(name) => {
                        counts.at_end += 1;
                        out.push((id, vec![name.to_string()]));
                    }
                    None => counts.unnamed += 1,
                }
            }
        }
        (out, counts)
    }
}

/// What the recording learnt of JIT code, at its end.
pub(crate) struct JitEnd {
    /// The names of the JIT frames, for the names section.
    pub names: Vec<(FrameId, Vec<String>)>,
    pub warnings: Vec<String>,
    /// The frames by where their names came from.
    pub frames: JitFrames,
}

/// Where a JIT name was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A perf map line in force at the sample's time.
    PerfMap,
    /// A jitdump load in force at the sample's time.
    Jitdump,
}

/// The command name of `pid` now (empty when it is gone).
fn comm_of(pid: u32) -> String {
    flamerec_perf::procfs::comm_of(pid, pid).unwrap_or_default()
}

/// A runtime's jitdump: `jit-<pid>.dump` (the name perf looks for).
fn is_jitdump(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.strip_prefix("jit-")
        .and_then(|r| r.strip_suffix(".dump"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A followed process that exits is polled no more and let go once a
    /// later exit is [`EXITED_KEPT_NS`] past its own; its pid forked again
    /// is a new process.
    #[test]
    fn an_exited_process_is_let_go_after_a_while() {
        let me = std::process::id();
        let mut j = JitNames::default();
        j.follow(me);
        j.exited(me, 1_000, None);
        assert!(
            j.done.contains(&me) && j.procs.contains_key(&me),
            "kept a while"
        );
        j.exited(u32::MAX, 1_000 + EXITED_KEPT_NS - 1, None);
        assert!(j.procs.contains_key(&me));
        j.exited(u32::MAX, 1_000 + EXITED_KEPT_NS, None);
        assert!(!j.procs.contains_key(&me) && j.exited.is_empty(), "let go");
        j.follow(me);
        j.exited(me, 5, None);
        j.forked(1, me);
        assert!(!j.procs.contains_key(&me) && !j.done.contains(&me));
    }

    /// A followed process whose map holds `lines`, read as it ended.
    pub(super) fn with_map(names: &mut JitNames, dir: &Path, pid: u32, lines: &str) {
        let path = dir.join(format!("perf-{pid}.map"));
        std::fs::write(&path, lines).expect("write");
        let rules = Rules {
            uid: flamerec_jit::process_uid(std::process::id()).expect("uid"),
            max_len: MAX_MAP,
            not_before: None,
        };
        let mut map = PerfMap::new(path, rules);
        map.finish(10).expect("read");
        names.procs.insert(
            pid,
            Sources {
                map,
                map_done: 0,
                dumps: Vec::new(),
                rules,
            },
        );
    }

    #[test]
    fn a_frame_without_time_or_process_is_named_only_when_every_line_agrees() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut names = JitNames::default();
        with_map(
            &mut names,
            dir.path(),
            1,
            "1000 100 f\n2000 100 a\n2000 100 b\n",
        );
        with_map(&mut names, dir.path(), 2, "1000 100 f\n3000 100 c\n");
        assert_eq!(names.name_untimed(0x1010), Some("f"));
        assert_eq!(names.name_untimed(0x3000), Some("c"));
        // Two names ever held 0x2000: neither is certain.
        assert_eq!(names.name_untimed(0x2010), None);
        assert_eq!(names.name_untimed(0x4000), None);
        // A line of the map read at the end names what no line during the
        // recording covered.
        names
            .procs
            .get_mut(&2)
            .expect("2")
            .map
            .poll(5)
            .expect("poll");
        with_map(&mut names, dir.path(), 3, "1000 100 g\n");
        assert_eq!(names.name_untimed(0x1010), None);
        // A line seen during the recording and another at the end: the
        // one read at the end names what the timed one did not.
        let s = names.procs.get_mut(&3).expect("3");
        let path = s.map.path().to_path_buf();
        let mut map = PerfMap::new(&path, s.rules);
        std::fs::write(&path, "5000 10 x\n").expect("write");
        map.poll(1).expect("poll");
        std::fs::write(&path, "5000 10 x\n5000 10 y\n").expect("write");
        map.finish(2).expect("finish");
        s.map = map;
        assert_eq!(names.name_untimed(0x5004), Some("y"));
    }

    /// A jitdump (little-endian, version 1, x86-64) with header `flags`
    /// (0: the monotonic clock) holding a load of `[start, start + size)`
    /// named `name` at `time` per entry.
    pub(super) fn jitdump(flags: u64, loads: &[(u64, u64, u64, &str)]) -> Vec<u8> {
        let mut b = b"DTiJ".to_vec();
        for v in [1u32, 40, 62, 0, 7] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        for (i, &(start, size, time, name)) in loads.iter().enumerate() {
            let total = 16 + 40 + name.len() + 1 + size as usize;
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(total as u32).to_le_bytes());
            b.extend_from_slice(&time.to_le_bytes());
            b.extend_from_slice(&7u32.to_le_bytes());
            b.extend_from_slice(&7u32.to_le_bytes());
            for v in [start, start, size, i as u64] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(name.as_bytes());
            b.push(0);
            b.extend(std::iter::repeat_n(0x90u8, size as usize));
        }
        b
    }

    #[test]
    fn a_dump_on_the_cpus_clock_is_said_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut names = JitNames::default();
        with_map(&mut names, dir.path(), 7, "");
        // Flagging JITDUMP_FLAGS_ARCH_TIMESTAMP, and no records yet.
        let path = dir.path().join("jit-7.dump");
        std::fs::write(&path, jitdump(1, &[])).expect("write");
        let s = names.procs.get_mut(&7).expect("7");
        s.dumps.push((JitDump::new(&path, s.rules), 0));
        names.poll(1, None);
        names.poll(2, None);
        let said: Vec<&String> = names
            .warnings
            .iter()
            .filter(|w| w.contains("time-stamp counter"))
            .collect();
        assert_eq!(said.len(), 1, "{:?}", names.warnings);
    }

    #[test]
    fn jitdumps_are_known_by_their_name() {
        assert!(is_jitdump("/tmp/jit-123.dump"));
        assert!(is_jitdump("jit-1.dump"));
        assert!(!is_jitdump("/tmp/jit-.dump"));
        assert!(!is_jitdump("/tmp/jit-12x.dump"));
        assert!(!is_jitdump("/usr/lib/libjit-1.so"));
    }
}
