//! The recorder's state between drain rounds, and the one place that
//! changes it: perf records in (in time order, from every ring), `.frec`
//! records out.
//!
//! A sample goes through its user part first (its callchain's user frames,
//! or its stack copy unwound — past the copy where the thread's live stack
//! shows the callers, see `deep`; with `-g fp,defer`, joined with the user
//! part the kernel writes later, see `defer`), then its kernel part
//! (`kernel`: profiler frames trimmed, symbols written), then its stack is
//! interned and it is written (off-CPU: weighed when its thread runs again,
//! see `offcpu`). The helpers hold what waits and return what is ready;
//! only this file writes.
//!
//! Between the two, interpreted and compiled code get their names: a
//! CPython sample takes the walk of Python frames made at the sample
//! (`python`), spliced where each eval-loop call runs (`splice`: the rules,
//! pure); JIT frames stay (module, address) and are named from the perf
//! maps and jitdumps followed as they grow (`jit`), the trampolines of
//! `-X perf` among them.
//!
//! The user part is done as records arrive, in order with the mappings it
//! resolves against. The kernel part needs the kernel's symbol table, which
//! takes a while to read at start: until it is in, samples wait here with
//! their kernel addresses raw, so the recorder drains its rings from the
//! start and loses nothing meanwhile.

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::ops::Range;

use flamerec_convert::{Converter, Mmap};
use flamerec_format::{Frame, ModuleId, Totals, Writer};
use flamerec_perf::parse::{Layout, PerfRecord};
use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_symbolize::live::vdso_image;
use flamerec_symbolize::Located;
use flamerec_unwind::StackUnwinder;

use crate::deep::LiveStacks;
use crate::defer::Deferred;
use crate::files::ProcessFiles;
use crate::identity::Identities;
use crate::jit::JitNames;
use crate::kernel::{KernelFrames, TrimRules};
use crate::loss::Losses;
use crate::offcpu::Blocked;
use crate::python::{Python, PythonEnd};
use crate::raw::RawSample;
use crate::rings::{self, Event};
use crate::select::Selection;
use crate::sys;

mod end;
mod sample;

/// Everything a state is made from: the writer and what the options and
/// the set-up decided.
pub(crate) struct StateConfig<W: io::Write> {
    pub writer: Writer<W>,
    /// Dwarf mode: user stacks are copied and unwound here.
    pub dwarf: bool,
    /// `-e off-cpu`.
    pub off_cpu: bool,
    /// What kernel frames to trim.
    pub trim: TrimRules,
    /// CLOCK_MONOTONIC ns when recording started.
    pub start_mono: u64,
    /// What the sample records hold.
    pub layout: Layout,
    /// Frame-pointer modes: the kernel's callchain cap in addresses (the
    /// `sample_max_stack` in force).
    pub fp_cap: Option<usize>,
    /// Deferred user callchains are in use.
    pub defer: bool,
    /// Which processes' samples are kept (system-wide, never flamerec's own).
    pub selection: Selection,
    /// Warnings from the set-up, to come first.
    pub warnings: Vec<String>,
    /// Python frames read at the sample, and the ring their walks come in.
    pub python: Option<(Python, flamerec_bpf::RingBuffer)>,
    /// Why Python frames cannot be read here, where they were asked for.
    pub python_unread: Option<String>,
    /// The interpreter's own frames kept beside Python frames.
    pub python_interpreter: bool,
    /// Dwarf mode's stack copy is as large as the kernel copies (no larger
    /// `--stack-size` to advise).
    pub copy_is_largest: bool,
    /// Samples per second per CPU (0: taken on events).
    pub frequency_hz: u64,
}

/// Counts for the trailer and the summary.
#[derive(Default)]
struct Counts {
    pids: HashSet<u32>,
    tids: HashSet<u32>,
    /// User stacks cut short by the unwinder (dwarf mode).
    truncated: u64,
    /// User stacks deeper than their copy but completed.
    completed: u64,
    /// Callchains that reached `fp_cap`.
    cut_at_cap: u64,
    /// Throttle records seen (the kernel slowed sampling down).
    throttles: u64,
    /// Records that could not be decoded.
    malformed: u64,
}

/// What a finished state hands back.
pub(crate) struct Finished<W: io::Write> {
    pub writer: Writer<W>,
    pub totals: Totals,
    pub warnings: Vec<String>,
    /// The warning about lost samples, if any (said last).
    pub loss_warning: Option<String>,
    /// Names of the Python frames, for the names section, and what
    /// happened to Python samples.
    pub python: Option<PythonEnd>,
    /// The names of the JIT frames, for the names section (ascending ids).
    pub jit_names: Vec<(u32, Vec<String>)>,
    /// The files held for the namer (kept open until the names are
    /// written), and where the modules it was not told of yet are read.
    pub files: (ProcessFiles, Vec<(ModuleId, Located)>),
}

/// Everything the loop keeps between rounds.
pub(crate) struct State<W: io::Write> {
    /// Mappings, modules, frames, stacks and the DWARF unwinder (dwarf
    /// mode): what the perf.data importer shares.
    conv: Converter<W>,
    kernel: KernelFrames,
    /// Samples waiting for the kernel's symbol table.
    held: Vec<RawSample>,
    off_cpu: Option<Blocked>,
    layout: Layout,
    start_mono: u64,
    losses: Losses,
    counts: Counts,
    warnings: Vec<String>,
    /// Reused buffers of a sample's frames and user addresses.
    frames: Vec<Frame>,
    user_addrs: Vec<u64>,
    /// Dwarf mode: the live stacks that complete samples deeper than their copy.
    live: LiveStacks,
    fp_cap: Option<usize>,
    /// `-g fp,defer`: samples waiting for their user part, and the reverse.
    deferred: Option<Deferred>,
    /// Python frames of CPython processes (as root), and the ring their
    /// walks come in.
    python: Option<Python>,
    /// Why Python frames are not read, and the CPython binaries seen.
    python_unread: Option<(String, BTreeSet<String>)>,
    python_interpreter: bool,
    py_ring: Option<flamerec_bpf::RingBuffer>,
    /// JIT code: followed perf maps and jitdumps, and the names they give.
    jit: JitNames,
    /// Each process's mapped files, reached as it sees them.
    files: ProcessFiles,
    /// Modules read elsewhere than at their paths, not yet told the namer,
    /// and every module told.
    located: Vec<(ModuleId, Located)>,
    located_told: HashSet<ModuleId>,
    /// Which processes' identities were written.
    identities: Identities,
    /// Dwarf mode's stack copy is as large as the kernel copies.
    copy_is_largest: bool,
}

impl<W: io::Write> State<W> {
    pub(crate) fn new(c: StateConfig<W>) -> Self {
        let unwinder = c.dwarf.then(new_unwinder);
        let (python, py_ring) = c.python.map_or((None, None), |(p, r)| (Some(p), Some(r)));
        State {
            conv: Converter::new(c.writer, unwinder),
            kernel: KernelFrames::new(c.trim),
            held: Vec::new(),
            off_cpu: c.off_cpu.then(Blocked::default),
            layout: c.layout,
            start_mono: c.start_mono,
            losses: Losses::new(),
            counts: Counts::default(),
            warnings: c.warnings,
            frames: Vec::new(),
            user_addrs: Vec::new(),
            live: LiveStacks::new(c.frequency_hz),
            fp_cap: c.fp_cap,
            deferred: c.defer.then(Deferred::default),
            python,
            python_unread: c.python_unread.map(|why| (why, BTreeSet::new())),
            python_interpreter: c.python_interpreter,
            py_ring,
            jit: JitNames::default(),
            files: ProcessFiles::default(),
            located: Vec::new(),
            located_told: HashSet::new(),
            identities: Identities::new(c.selection),
            copy_is_largest: c.copy_is_largest,
        }
    }

    /// The file being written.
    pub(crate) fn writer(&self) -> &Writer<W> {
        self.conv.writer()
    }

    pub(crate) fn writer_mut(&mut self) -> &mut Writer<W> {
        self.conv.writer_mut()
    }

    /// Where the loop's time goes and what was lost.
    pub(crate) fn losses(&mut self) -> &mut Losses {
        &mut self.losses
    }

    /// A warning for the end of the recording.
    pub(crate) fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    fn seen(&mut self, pid: u32, tid: u32) {
        self.counts.pids.insert(pid);
        self.counts.tids.insert(tid);
    }

    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.start_mono)
    }

    /// The command flamerec started, named as the kernel will name it.
    pub(crate) fn command_started(&mut self, pid: u32, comm: &str) {
        self.jit.command = Some(comm.to_string());
        self.seen(pid, pid);
        self.conv.writer_mut().comm(0, pid, pid, comm, true);
    }

    /// A thread name learned from /proc (attached or system-wide targets).
    pub(crate) fn synth_comm(&mut self, pid: u32, tid: u32, name: &str) {
        self.seen(pid, tid);
        self.conv.writer_mut().comm(0, pid, tid, name, false);
    }

    /// An executable mapping learned from /proc/PID/maps.
    pub(crate) fn synth_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        self.exec_mapping(pid, start..end, pgoff, path, &[], 0);
    }

    /// An executable mapping (a record, or a line of /proc/PID/maps): its
    /// file reached as its process sees it (see `files`), then recorded,
    /// and the CPython and JIT followers told.
    fn exec_mapping(
        &mut self,
        pid: u32,
        range: Range<u64>,
        pgoff: u64,
        path: &str,
        build_id: &[u8],
        time_ns: u64,
    ) {
        let reached = self.files.reach(pid, range.clone(), path, build_id);
        let build_id = match &reached {
            Some(r) if build_id.is_empty() => &r.build_id[..],
            _ => build_id,
        };
        let read_from = reached.as_ref().and_then(|r| r.at.file.to_str());
        let module = self.conv.mmap(&Mmap {
            pid,
            start: range.start,
            len: range.end.saturating_sub(range.start),
            pgoff,
            path,
            build_id,
            read_from,
            exec: true,
            time_ns,
        });
        // The namer is told once per module where it is read.
        if let (Some(r), Some(module)) = (&reached, module) {
            if self.located_told.insert(module) {
                self.located.push((module, r.at.clone()));
            }
        }
        if let Some(p) = &mut self.python {
            p.mapped(pid, path, &self.conv);
        } else if let Some((_, seen)) = &mut self.python_unread {
            if flamerec_python::is_cpython_binary(path) && seen.len() < 8 {
                seen.insert(path.rsplit('/').next().unwrap_or(path).to_string());
            }
        }
        // A memfd read as the executable it holds is no JIT code.
        let image = reached.is_some();
        self.jit.mapping(
            pid,
            (path, image),
            range,
            sys::monotonic_ns(),
            self.conv.unwinder_mut(),
        );
    }

    /// Where the modules new since the last call are read, for the namer.
    pub(crate) fn take_located(&mut self) -> Vec<(ModuleId, Located)> {
        std::mem::take(&mut self.located)
    }

    /// One drain round: the records of every ring, in time order (see
    /// [`rings::read_round`]), then what the round's end settles. Returns
    /// whether a ring the loop reads was over half full: the loop is late.
    pub(crate) fn drain(
        &mut self,
        events: &mut [Event],
        scratch: &mut [Vec<u8>],
        taken: Vec<Vec<u8>>,
    ) -> bool {
        self.losses.begin_round();
        // Before the round's records: the JIT code they ran was written
        // to its map or dump before it ran.
        self.jit.poll(sys::monotonic_ns(), self.conv.unwinder_mut());
        let layout = self.layout;
        let mut malformed = 0;
        // Walks the kernel wrote before the round's samples are read after
        // those samples are fixed in their rings, before any is handled.
        let mut ring = self.py_ring.take();
        let (late, walks) = rings::read_round(
            events,
            scratch,
            &taken,
            &layout,
            &mut malformed,
            || ring.as_mut().map(Python::read).unwrap_or_default(),
            |walks: &mut Vec<flamerec_python::bpf::Entry>, r| {
                if !walks.is_empty() {
                    if let Some(p) = &mut self.python {
                        p.absorb(std::mem::take(walks));
                    }
                }
                self.handle(r)
            },
        );
        if let Some(p) = &mut self.python {
            p.absorb(walks);
        }
        self.py_ring = ring;
        self.counts.malformed += malformed;
        if let Some(u) = self.conv.unwinder_mut() {
            let done = self.live.end_round(u);
            self.write_settled(done);
        }
        if let Some(d) = &mut self.deferred {
            let ready = d.end_round();
            self.finish_raws(ready);
        }
        if let Some(p) = &mut self.python {
            p.end_round();
            self.conv.writer_mut().own_names(p.new_names());
        }
        let jit = self.jit.new_names(self.conv.writer());
        self.conv.writer_mut().own_names(&jit);
        late
    }

    /// A COMM record at `t`: a thread's name, or an exec of `pid`.
    fn comm(&mut self, pid: u32, tid: u32, name: &str, exec: bool, t: u64) {
        // An exec that came late (from a ring read after others) is
        // followed by newer records of the process already applied: it
        // changes nothing.
        if exec && !self.conv.is_late(pid, t) {
            // Samples still waiting are of the old image: they are written
            // against its mappings, before they go.
            if let Some(u) = self.conv.unwinder_mut() {
                let done = self.live.forget_process(u, pid);
                self.write_settled(done);
            }
            self.conv.exec(pid, t);
            if let Some(p) = &mut self.python {
                p.forget(pid);
            }
            self.jit.exec(pid);
            self.identities.forget(pid);
        }
        self.seen(pid, tid);
        self.conv.comm(t, pid, tid, name, exec);
    }

    /// Thread `tid` of `pid` exited at `t` (the process, when they are equal).
    fn exited(&mut self, pid: u32, tid: u32, t: u64) {
        if let Some(b) = &mut self.off_cpu {
            b.exited(tid, t);
        }
        if let Some(d) = &mut self.deferred {
            d.thread_exited(tid);
        }
        if let Some(p) = &mut self.python {
            p.thread_exited(pid, tid);
        }
        if let Some(u) = self.conv.unwinder_mut() {
            let done = if pid == tid {
                self.live.forget_process(u, pid)
            } else {
                self.live.exit(u, tid)
            };
            self.write_settled(done);
        }
        if pid == tid {
            self.identities.exited(pid, t);
            self.jit
                .exited(pid, sys::monotonic_ns(), self.conv.unwinder_mut());
            self.conv.exit(pid, t);
            if let Some(p) = &mut self.python {
                p.forget(pid);
            }
        }
        self.conv.writer_mut().exit(t, pid, tid);
    }

    /// Thread `tid` of `pid` was created at `t` by `ptid` of `ppid` (a new
    /// process when `pid == tid`).
    fn forked(&mut self, pid: u32, ppid: u32, tid: u32, ptid: u32, t: u64) {
        if let Some(b) = &mut self.off_cpu {
            b.born(tid);
        }
        self.conv.fork(ppid, pid, t);
        if pid == tid && pid != ppid {
            // A new process, maybe on a pid used before.
            self.identities.forget(pid);
            // A forked CPython is one too.
            if let Some(p) = &mut self.python {
                p.forked(ppid, pid, &self.conv);
            }
            self.jit.forked(ppid, pid);
        }
        self.seen(pid, tid);
        self.conv.writer_mut().fork(t, pid, ppid, tid, ptid);
    }

    /// A SWITCH record of `tid` at `t`: off-CPU time learns whether a
    /// switch-out was a preemption, and weighs the block a switch-in ends.
    fn switched(&mut self, out: bool, preempted: bool, pid: u32, tid: u32, t: u64) {
        let Some(b) = &mut self.off_cpu else { return };
        if out {
            b.switch_out_record(tid, preempted);
        } else if let Some(s) = b.switched_in(pid, tid, t) {
            // Back on a CPU: the interval since it blocked is off-CPU time.
            self.conv.writer_mut().sample(s);
        }
    }

    fn handle(&mut self, r: PerfRecord<'_>) {
        match r {
            PerfRecord::Sample(s) => self.sample(&s),
            PerfRecord::Mmap {
                pid,
                addr,
                len,
                pgoff,
                build_id,
                filename,
                time,
            } => {
                // The recorder asks for executable mappings only.
                let time_ns = self.rel(time);
                let range = addr..addr.saturating_add(len);
                self.exec_mapping(
                    pid,
                    range,
                    pgoff,
                    filename,
                    build_id.unwrap_or(&[]),
                    time_ns,
                );
            }
            PerfRecord::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            } => self.comm(pid, tid, name, exec, self.rel(time)),
            PerfRecord::Task {
                exit: true,
                pid,
                tid,
                time,
                ..
            } => self.exited(pid, tid, self.rel(time)),
            PerfRecord::Task {
                exit: false,
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => self.forked(pid, ppid, tid, ptid, self.rel(time)),
            PerfRecord::Lost { count, time, cpu } => {
                self.losses.add(cpu, count);
                let t = self.rel(time);
                self.conv.writer_mut().lost(t, count);
            }
            PerfRecord::Switch {
                out,
                preempted,
                pid,
                tid,
                time,
            } => self.switched(out, preempted, pid, tid, self.rel(time)),
            PerfRecord::CallchainDeferred {
                cookie, pid, ips, ..
            } => self.deferred_callchain(cookie, pid, ips),
            PerfRecord::Throttle => self.counts.throttles += 1,
            PerfRecord::Other => {}
        }
    }

    /// The kernel's symbol table is in: trimming can start, and the samples
    /// that waited for it are written.
    pub(crate) fn set_kallsyms(&mut self, kallsyms: Kallsyms) {
        if let Some(w) = self.kernel.set_kallsyms(kallsyms) {
            self.warnings.push(w);
        }
        let held = std::mem::take(&mut self.held);
        self.finish_raws(held);
    }
}

/// An unwinder that also knows this kernel's vDSO, read from our own
/// address space (every process maps the same image).
pub(crate) fn new_unwinder() -> StackUnwinder {
    let mut u = StackUnwinder::new();
    if let Some(image) = vdso_image() {
        u.add_image("[vdso]", &image);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use flamerec_format::Metadata;

    fn deferring_state() -> State<Vec<u8>> {
        let mut st = State::new(StateConfig {
            writer: Writer::new(Vec::new(), &Metadata::default()).unwrap(),
            dwarf: false,
            off_cpu: false,
            trim: TrimRules {
                sampled: false,
                keep_profiler_frames: false,
                extra: Vec::new(),
                off_cpu: false,
            },
            start_mono: 0,
            layout: Layout {
                sample_type: 0,
                regs_user: 0,
            },
            fp_cap: None,
            defer: true,
            selection: Selection::default(),
            warnings: Vec::new(),
            python: None,
            python_unread: None,
            python_interpreter: false,
            copy_is_largest: true,
            frequency_hz: 999,
        });
        st.set_kallsyms(Kallsyms::default());
        st
    }

    fn ips(addrs: &[u64]) -> Vec<u8> {
        addrs.iter().flat_map(|a| a.to_ne_bytes()).collect()
    }

    fn deferred_sample(st: &mut State<Vec<u8>>, cookie: u64) {
        let raw = RawSample {
            pid: 1,
            tid: 2,
            time: 10,
            ip: 0xffff_ffff_8100_0000,
            kernel: vec![0xffff_ffff_8100_0000],
            user: Vec::new(),
            user_cut: false,
            python: None,
        };
        let ready = st.deferred.as_mut().unwrap().sample(cookie, raw);
        st.finish_raws(ready);
    }

    #[test]
    fn a_pid_forked_anew_or_ended_is_identified_again() {
        // Pids are used again (pid_max wraps in a days-long agent run): a
        // new process on an old pid is not the old one, kept or left out.
        let mut st = deferring_state();
        let me = std::process::id();
        let task = |exit, time| PerfRecord::Task {
            exit,
            pid: me,
            ppid: 1,
            tid: me,
            ptid: 1,
            time,
        };
        assert!(st.identities.admit(me, 1).1.is_some());
        assert!(st.identities.admit(me, 2).1.is_none(), "once per image");
        st.handle(task(false, 3));
        assert!(st.identities.admit(me, 4).1.is_some(), "forked anew");
        st.handle(task(true, 5));
        assert!(st.identities.admit(me, 6).1.is_none(), "on its way out");
        st.handle(PerfRecord::Task {
            exit: true,
            pid: 1,
            ppid: 0,
            tid: 1,
            ptid: 0,
            time: 5 + 1_000_000_000,
        });
        assert!(st.identities.admit(me, 7).1.is_some(), "ended");
    }

    #[test]
    fn deferred_user_parts_are_joined_and_judged_against_the_cap_here() {
        let mut st = deferring_state();
        let deep: Vec<u64> = (0..crate::defer::DEFERRED_CAP as u64)
            .map(|i| 0x40_0000 + 16 * i)
            .collect();
        deferred_sample(&mut st, 1);
        st.deferred_callchain(1, 1, &ips(&deep));
        assert_eq!(
            st.writer().samples(),
            1,
            "the sample is written once joined"
        );
        // A walk round a loop of non-code addresses reaches the cap without
        // the stack being deep.
        let looping: Vec<u64> = (0..crate::defer::DEFERRED_CAP as u64)
            .map(|i| 0x40_0000 + 16 * (i % 4))
            .collect();
        deferred_sample(&mut st, 2);
        st.deferred_callchain(2, 1, &ips(&looping));
        let f = st.finish(1);
        assert_eq!(
            f.totals.truncated_stacks, 1,
            "the deep one is cut, the loop is not"
        );
        assert_eq!(f.totals.deferred_stitched, 2);
    }
}
