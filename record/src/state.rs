//! Turning perf records into `.frec` records: mappings and names tracked
//! per process, callchains trimmed and resolved to (module, offset) frames,
//! user stacks unwound in dwarf mode, off-CPU intervals measured.

use std::collections::{HashMap, HashSet};
use std::io;

use flamerec_format::{Frame, FrameId, Mapping, Module, ModuleId, ModuleKind, Sample, Writer};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::{StackUnwinder, UserRegs};

use crate::procs::Processes;
use crate::sys;
use crate::trim::{is_sampling_path, is_scheduler};
use crate::{CallGraph, EventKind, RecordOptions};
use flamerec_perf::parse::{split, Layout, PerfRecord, SampleRecord};
use flamerec_symbolize::kallsyms::{AddressRanges, Kallsyms};
use flamerec_symbolize::live::{module_for, vdso_image};

/// One perf event of one CPU (or its ring owner).
pub(crate) struct Event {
    pub(crate) fd: std::os::fd::OwnedFd,
    pub(crate) ring: Option<sys::RingBuffer>,
}

/// Everything the loop keeps between rounds.
pub(crate) struct State<W: io::Write> {
    pub(crate) writer: Writer<W>,
    kallsyms: Kallsyms,
    kernel_module: ModuleId,
    unknown_module: ModuleId,
    kernel_addrs: HashSet<u64>,
    symbols_written: HashSet<usize>,
    trim: AddressRanges,
    trim_sched: AddressRanges,
    off_cpu: bool,
    procs: Processes,
    layout: Layout,
    start_mono: u64,
    pub(crate) lost: u64,
    malformed: u64,
    pub(crate) pids: HashSet<u32>,
    pub(crate) tids: HashSet<u32>,
    pub(crate) warnings: Vec<String>,
    frames: Vec<Frame>,
    frame_ids: Vec<FrameId>,
    pub(crate) unwinder: Option<StackUnwinder>,
    user_addrs: Vec<u64>,
    /// System-wide mode: flamerec's own pid, whose samples are dropped.
    pub(crate) exclude_pid: Option<u32>,
    /// Off-CPU: per thread, the stack and time it was switched out.
    blocked: HashMap<u32, (u32, u32, u64)>,
    /// Off-CPU: threads whose last switch-out was a preemption.
    preempted: HashSet<u32>,
    /// Throttle records seen (the kernel slowed sampling down).
    pub(crate) throttles: u64,
}

impl<W: io::Write> State<W> {
    pub(crate) fn new(
        mut writer: Writer<W>,
        kallsyms: Kallsyms,
        opts: &RecordOptions,
        start_mono: u64,
        sample_type: u64,
        kernel: bool,
    ) -> Self {
        // Without kernel samples, hidden kernel symbols do not matter.
        let kallsyms_hidden_ok = !kernel;
        let kernel_module = writer.module(&Module {
            kind: ModuleKind::Kernel,
            path: "[kernel.kallsyms]".into(),
            build_id: Vec::new(),
        });
        let unknown_module = writer.module(&Module {
            kind: ModuleKind::Anonymous,
            path: "[unknown]".into(),
            build_id: Vec::new(),
        });
        let extra: HashSet<&str> = opts.trim.iter().map(String::as_str).collect();
        let keep = opts.keep_profiler_frames;
        let trim = kallsyms.ranges(|n| (!keep && is_sampling_path(n)) || extra.contains(n));
        let trim_sched = kallsyms.ranges(|n| !keep && is_scheduler(n));
        let mut warnings = Vec::new();
        if !kallsyms_hidden_ok && kallsyms.is_empty() {
            warnings.push(
                "kernel symbols are hidden (/proc/kallsyms shows no addresses: check kernel.kptr_restrict); kernel frames will show as addresses"
                    .into(),
            );
        }
        State {
            writer,
            kallsyms,
            kernel_module,
            unknown_module,
            kernel_addrs: HashSet::new(),
            symbols_written: HashSet::new(),
            trim,
            trim_sched,
            off_cpu: opts.event == EventKind::OffCpu,
            procs: Processes::default(),
            layout: Layout { sample_type },
            start_mono,
            lost: 0,
            malformed: 0,
            pids: HashSet::new(),
            tids: HashSet::new(),
            warnings,
            frames: Vec::new(),
            frame_ids: Vec::new(),
            unwinder: (opts.call_graph == CallGraph::Dwarf).then(new_unwinder),
            user_addrs: Vec::new(),
            exclude_pid: None,
            blocked: HashMap::new(),
            preempted: HashSet::new(),
            throttles: 0,
        }
    }

    pub(crate) fn seen(&mut self, pid: u32, tid: u32) {
        self.pids.insert(pid);
        self.tids.insert(tid);
    }

    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.start_mono)
    }

    /// Copies every ring out, then handles the records of all CPUs in time
    /// order, so an exec or mmap on one CPU precedes samples on another.
    pub(crate) fn drain(&mut self, events: &mut [Event], bufs: &mut [Vec<u8>]) {
        for (e, buf) in events.iter_mut().zip(bufs.iter_mut()) {
            buf.clear();
            if let Some(ring) = &mut e.ring {
                ring.drain(buf);
            }
        }
        let mut recs = Vec::new();
        for buf in bufs.iter() {
            for (ty, misc, body) in split(buf, &mut self.malformed) {
                match self.layout.decode(ty, misc, body) {
                    Some(r) => recs.push(r),
                    None => self.malformed += 1,
                }
            }
        }
        recs.sort_by_key(record_time);
        for r in recs {
            self.handle(r);
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
                let module = module_for(filename, build_id.unwrap_or(&[]));
                let kind = module.kind;
                if let Some(u) = &mut self.unwinder {
                    let end = addr.saturating_add(len);
                    u.add_mapping(pid, addr, end, pgoff, filename, &module.build_id);
                }
                let id = self.writer.module(&module);
                self.procs.map(pid, addr, len, pgoff, id, kind);
                let time_ns = self.rel(time);
                self.writer.mapping(&Mapping {
                    time_ns,
                    pid,
                    start: addr,
                    end: addr.saturating_add(len),
                    pgoff,
                    module: id,
                });
            }
            PerfRecord::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            } => {
                if exec {
                    self.procs.exec(pid);
                    if let Some(u) = &mut self.unwinder {
                        u.exec(pid);
                    }
                }
                self.seen(pid, tid);
                let t = self.rel(time);
                self.writer.comm(t, pid, tid, name, exec);
            }
            PerfRecord::Task {
                exit,
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                let t = self.rel(time);
                if exit {
                    self.blocked.remove(&tid);
                    self.writer.exit(t, pid, tid);
                } else {
                    self.procs.fork(ppid, pid);
                    if let Some(u) = &mut self.unwinder {
                        u.fork(ppid, pid);
                    }
                    self.seen(pid, tid);
                    self.writer.fork(t, pid, ppid, tid, ptid);
                }
            }
            PerfRecord::Lost { count, time } => {
                self.lost += count;
                let t = self.rel(time);
                self.writer.lost(t, count);
            }
            PerfRecord::Switch {
                out: true,
                preempted,
                tid,
                ..
            } => {
                if preempted {
                    self.preempted.insert(tid);
                } else {
                    self.preempted.remove(&tid);
                }
            }
            PerfRecord::Switch {
                out: false,
                pid,
                tid,
                time,
                ..
            } => {
                // Back on a CPU: the interval since it blocked is off-CPU
                // time. A preempted thread was runnable, not blocked: skip it.
                if let Some((spid, stack, out_ns)) = self.blocked.remove(&tid) {
                    if !self.preempted.remove(&tid) {
                        let in_ns = self.rel(time);
                        self.write_off_cpu(spid.max(pid), tid, stack, out_ns, in_ns);
                    }
                }
            }
            PerfRecord::Throttle => self.throttles += 1,
            PerfRecord::Other => {}
        }
    }

    fn write_off_cpu(&mut self, pid: u32, tid: u32, stack: u32, out_ns: u64, in_ns: u64) {
        if in_ns > out_ns {
            self.writer.sample(Sample {
                time_ns: out_ns,
                pid,
                tid,
                stack,
                weight: in_ns - out_ns,
            });
        }
    }

    /// Off-CPU: threads still blocked when recording stops count until `end_ns`.
    pub(crate) fn finish_blocked(&mut self, end_ns: u64) {
        let preempted = std::mem::take(&mut self.preempted);
        let mut left: Vec<_> = self
            .blocked
            .drain()
            .filter(|(tid, _)| !preempted.contains(tid))
            .collect();
        left.sort_unstable_by_key(|&(tid, (_, _, out))| (out, tid));
        for (tid, (pid, stack, out_ns)) in left {
            self.write_off_cpu(pid, tid, stack, out_ns, end_ns);
        }
    }

    /// A thread name learned from /proc (attached or system-wide targets).
    pub(crate) fn synth_comm(&mut self, pid: u32, tid: u32, name: &str) {
        self.seen(pid, tid);
        self.writer.comm(0, pid, tid, name, false);
    }

    /// An executable mapping learned from /proc/PID/maps.
    pub(crate) fn synth_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        let module = module_for(path, &[]);
        let kind = module.kind;
        if let Some(u) = &mut self.unwinder {
            u.add_mapping(pid, start, end, pgoff, path, &[]);
        }
        let id = self.writer.module(&module);
        self.procs.map(pid, start, end - start, pgoff, id, kind);
        self.writer.mapping(&Mapping {
            time_ns: 0,
            pid,
            start,
            end,
            pgoff,
            module: id,
        });
    }

    /// Whether a leading kernel frame belongs to the profiler, not the workload.
    fn trimmed(&self, addr: u64) -> bool {
        self.trim.contains(addr) || (self.off_cpu && self.trim_sched.contains(addr))
    }

    /// A user frame: (module, offset) through the process's mappings, or the
    /// bare address in the `[unknown]` module.
    fn user_frame(&self, pid: u32, addr: u64) -> Frame {
        self.procs.resolve(pid, addr).unwrap_or(Frame {
            module: self.unknown_module,
            address: addr,
        })
    }

    /// A kernel frame; the first time an address is seen, the symbol it
    /// falls in is written too.
    fn kernel_frame(&mut self, addr: u64) -> Frame {
        if self.kernel_addrs.insert(addr) {
            if let Some(i) = self.kallsyms.lookup(addr) {
                if self.symbols_written.insert(i) {
                    let sym = self.kallsyms.symbol(i);
                    self.writer.kernel_symbol(&sym);
                }
            }
        }
        Frame {
            module: self.kernel_module,
            address: addr,
        }
    }

    fn sample(&mut self, s: &SampleRecord<'_>) {
        if self.exclude_pid == Some(s.pid) {
            return;
        }
        self.seen(s.pid, s.tid);
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut trimming = true;
        for (side, addr) in callchain::frames(s.callchain(), None) {
            match side {
                Side::Kernel => {
                    if trimming && self.trimmed(addr) {
                        continue;
                    }
                    trimming = false;
                    let f = self.kernel_frame(addr);
                    frames.push(f);
                }
                Side::User => {
                    trimming = false;
                    let frame = self.user_frame(s.pid, addr);
                    frames.push(frame);
                }
            }
        }
        if let (Some(u), Some([bp, sp, ip])) = (&mut self.unwinder, s.user_regs) {
            let mut addrs = std::mem::take(&mut self.user_addrs);
            addrs.clear();
            u.unwind(s.pid, UserRegs { ip, sp, bp }, s.user_stack, &mut addrs);
            for (i, &a) in addrs.iter().enumerate() {
                // Return addresses step back into the call instruction.
                let addr = if i == 0 { a } else { a.wrapping_sub(1) };
                let frame = self.user_frame(s.pid, addr);
                frames.push(frame);
            }
            self.user_addrs = addrs;
        }
        if frames.is_empty() && s.ip != 0 {
            let f = if s.ip >= 1 << 63 {
                self.kernel_frame(s.ip)
            } else {
                self.user_frame(s.pid, s.ip)
            };
            frames.push(f);
        }
        // Intern root first, the order stack nodes are made in: frames new
        // to the file then get consecutive ids along the new nodes, which
        // the nodes' frame column stores as small deltas.
        let mut ids = std::mem::take(&mut self.frame_ids);
        ids.clear();
        ids.extend(frames.iter().rev().map(|&f| self.writer.frame(f)));
        let stack = self.writer.stack(&ids);
        self.frames = frames;
        self.frame_ids = ids;
        let time_ns = self.rel(s.time);
        if self.off_cpu {
            // Weighed when the thread runs again (see the Switch record).
            self.blocked.insert(s.tid, (s.pid, stack, time_ns));
            return;
        }
        self.writer.sample(Sample {
            time_ns,
            pid: s.pid,
            tid: s.tid,
            stack,
            weight: 1,
        });
    }
}

fn record_time(r: &PerfRecord<'_>) -> u64 {
    match r {
        PerfRecord::Sample(s) => s.time,
        PerfRecord::Mmap { time, .. }
        | PerfRecord::Comm { time, .. }
        | PerfRecord::Task { time, .. }
        | PerfRecord::Lost { time, .. }
        | PerfRecord::Switch { time, .. } => *time,
        PerfRecord::Throttle | PerfRecord::Other => 0,
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
