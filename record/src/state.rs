//! Turning perf records into `.frec` records: mappings and names tracked
//! per process, callchains trimmed and resolved to (module, offset) frames,
//! user stacks unwound in dwarf mode, off-CPU intervals measured.

use std::collections::{HashMap, HashSet};
use std::io;

use flamerec_convert::{Converter, Mmap};
use flamerec_format::{Frame, Sample, Writer};
use flamerec_unwind::StackUnwinder;

use crate::deep::LiveStacks;
use crate::defer::Deferred;
use crate::loss::Losses;
use crate::raw::RawSample;
use crate::sys;
use crate::{CallGraph, EventKind, RecordOptions};
use flamerec_perf::parse::{split, straddle, Layout, PerfRecord};
use flamerec_symbolize::kallsyms::{AddressRanges, Kallsyms};
use flamerec_symbolize::live::vdso_image;

/// One perf event of one CPU (or its ring owner).
pub(crate) struct Event {
    pub(crate) fd: std::os::fd::OwnedFd,
    pub(crate) ring: Option<sys::RingBuffer>,
    /// The CPU whose ring it writes to.
    pub(crate) cpu: u32,
    /// Opened with `count_lost` (Linux 6.0+).
    pub(crate) counts_lost: bool,
}

/// Everything the loop keeps between rounds.
pub(crate) struct State<W: io::Write> {
    /// Mappings, modules, frames, stacks and the DWARF unwinder (dwarf
    /// mode): what the perf.data importer shares.
    pub(crate) conv: Converter<W>,
    /// The kernel's symbol table, once read (samples wait for it: `sample`).
    pub(crate) kallsyms: Option<Kallsyms>,
    /// Kernel code is sampled.
    pub(crate) kernel: bool,
    pub(crate) keep_profiler_frames: bool,
    pub(crate) extra_trim: Vec<String>,
    /// Samples waiting for the symbol table.
    pub(crate) held: Vec<RawSample>,
    pub(crate) kernel_addrs: HashSet<u64>,
    pub(crate) symbols_written: HashSet<usize>,
    pub(crate) trim: AddressRanges,
    pub(crate) trim_sched: AddressRanges,
    pub(crate) off_cpu: bool,
    layout: Layout,
    start_mono: u64,
    pub(crate) losses: Losses,
    malformed: u64,
    pub(crate) pids: HashSet<u32>,
    pub(crate) tids: HashSet<u32>,
    pub(crate) warnings: Vec<String>,
    pub(crate) frames: Vec<Frame>,
    /// Dwarf mode: the live stacks that complete samples deeper than their copy.
    pub(crate) live: LiveStacks,
    /// User stacks cut short, and deeper than their copy but completed.
    pub(crate) truncated_stacks: u64,
    pub(crate) completed_stacks: u64,
    pub(crate) user_addrs: Vec<u64>,
    /// System-wide mode: flamerec's own pid, whose samples are dropped.
    pub(crate) exclude_pid: Option<u32>,
    /// Off-CPU: per thread, the stack and time it was switched out.
    pub(crate) blocked: HashMap<u32, (u32, u32, u64)>,
    /// Off-CPU: threads whose last switch-out was a preemption.
    preempted: HashSet<u32>,
    /// Throttle records seen (the kernel slowed sampling down).
    pub(crate) throttles: u64,
    /// Frame-pointer modes: the kernel's callchain cap in addresses (the
    /// `sample_max_stack` in force); `None` in dwarf mode.
    pub(crate) fp_cap: Option<usize>,
    /// Callchains that reached `fp_cap` (or the deferred unwinder's cap).
    pub(crate) cut_at_cap: u64,
    /// `-g fp,defer`: samples waiting for their user part, and the reverse.
    pub(crate) deferred: Option<Deferred>,
}

impl<W: io::Write> State<W> {
    pub(crate) fn new(
        writer: Writer<W>,
        opts: &RecordOptions,
        start_mono: u64,
        (sample_type, regs_user): (u64, u64),
        kernel: bool,
    ) -> Self {
        let unwinder = (opts.call_graph == CallGraph::Dwarf).then(new_unwinder);
        State {
            conv: Converter::new(writer, unwinder),
            kallsyms: None,
            kernel,
            keep_profiler_frames: opts.keep_profiler_frames,
            extra_trim: opts.trim.clone(),
            held: Vec::new(),
            kernel_addrs: HashSet::new(),
            symbols_written: HashSet::new(),
            trim: AddressRanges::default(),
            trim_sched: AddressRanges::default(),
            off_cpu: opts.event == EventKind::OffCpu,
            layout: Layout {
                sample_type,
                regs_user,
            },
            start_mono,
            losses: Losses::new(),
            malformed: 0,
            pids: HashSet::new(),
            tids: HashSet::new(),
            warnings: Vec::new(),
            frames: Vec::new(),
            live: LiveStacks::default(),
            truncated_stacks: 0,
            completed_stacks: 0,
            user_addrs: Vec::new(),
            exclude_pid: None,
            blocked: HashMap::new(),
            preempted: HashSet::new(),
            throttles: 0,
            fp_cap: None,
            cut_at_cap: 0,
            deferred: None,
        }
    }

    pub(crate) fn seen(&mut self, pid: u32, tid: u32) {
        self.pids.insert(pid);
        self.tids.insert(tid);
    }

    pub(crate) fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.start_mono)
    }

    /// Reads every ring the loop still owns in place, and the records ring
    /// readers queued (`taken`, whole), then handles the records of all
    /// CPUs in time order, so an exec or mmap on one CPU precedes samples on
    /// another. Returns whether a ring the loop reads was over half full:
    /// the loop is late.
    pub(crate) fn drain(
        &mut self,
        events: &mut [Event],
        scratch: &mut [Vec<u8>],
        taken: Vec<Vec<u8>>,
    ) -> bool {
        self.losses.begin_round();
        // Records are read in place in the rings (a dwarf sample carries a
        // whole stack copy; copying them out was a fifth of the recorder's
        // CPU); only the one record a ring's wrap cuts in two is copied.
        let mut published = Vec::with_capacity(events.len());
        let mut late = false;
        {
            let mut views: Vec<(&[u8], &[u8])> = Vec::with_capacity(events.len());
            for (e, sc) in events.iter().zip(scratch.iter_mut()) {
                let (a, b) = e.ring.as_ref().map_or((&[][..], &[][..]), |r| r.peek());
                if let Some(r) = &e.ring {
                    late |= (a.len() + b.len()) * 2 > r.data_size();
                }
                let (end, start) = straddle(a, b, sc);
                published.push(a.len() + b.len());
                views.push((&a[..end], &b[start..]));
            }
            let mut recs = Vec::new();
            let mut parts: Vec<&[u8]> = Vec::with_capacity(3 * views.len() + taken.len());
            for ((a, b), sc) in views.into_iter().zip(scratch.iter()) {
                parts.extend([a, &sc[..], b]);
            }
            parts.extend(taken.iter().map(Vec::as_slice));
            for part in parts {
                for (ty, misc, body) in split(part, &mut self.malformed) {
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
        for (e, n) in events.iter_mut().zip(published) {
            if let Some(ring) = &mut e.ring {
                ring.consume(n);
            }
        }
        if let Some(u) = self.conv.unwinder_mut() {
            let done = self.live.end_round(u);
            self.write_settled(done);
        }
        self.end_deferred_round();
        late
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
                self.conv.mmap(&Mmap {
                    pid,
                    start: addr,
                    len,
                    pgoff,
                    path: filename,
                    build_id: build_id.unwrap_or(&[]),
                    exec: true,
                    time_ns,
                });
            }
            PerfRecord::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            } => {
                let t = self.rel(time);
                // An exec that came late (from a ring read after others)
                // is followed by newer records of the process already
                // applied: it changes nothing.
                if exec && !self.conv.is_late(pid, t) {
                    // Samples still waiting are of the old image: they are
                    // written against its mappings, before they go.
                    if let Some(u) = self.conv.unwinder_mut() {
                        let done = self.live.forget_process(u, pid);
                        self.write_settled(done);
                    }
                    self.conv.exec(pid, t);
                }
                self.seen(pid, tid);
                self.conv.comm(t, pid, tid, name, exec);
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
                    self.deferred_exit(tid);
                    if let Some(u) = self.conv.unwinder_mut() {
                        let done = if pid == tid {
                            self.live.forget_process(u, pid)
                        } else {
                            self.live.exit(u, tid)
                        };
                        self.write_settled(done);
                    }
                    if pid == tid {
                        self.conv.exit(pid);
                    }
                    self.conv.writer_mut().exit(t, pid, tid);
                } else {
                    self.conv.fork(ppid, pid, t);
                    self.seen(pid, tid);
                    self.conv.writer_mut().fork(t, pid, ppid, tid, ptid);
                }
            }
            PerfRecord::Lost { count, time, cpu } => {
                self.losses.add(cpu, count);
                let t = self.rel(time);
                self.conv.writer_mut().lost(t, count);
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
            PerfRecord::CallchainDeferred {
                cookie, pid, ips, ..
            } => {
                self.deferred_callchain(cookie, pid, ips);
            }
            PerfRecord::Throttle => self.throttles += 1,
            PerfRecord::Other => {}
        }
    }

    fn write_off_cpu(&mut self, pid: u32, tid: u32, stack: u32, out_ns: u64, in_ns: u64) {
        if in_ns > out_ns {
            self.conv.writer_mut().sample(Sample {
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

    /// A thread name learned from /proc (attached or system-wide targets).
    pub(crate) fn synth_comm(&mut self, pid: u32, tid: u32, name: &str) {
        self.seen(pid, tid);
        self.conv.writer_mut().comm(0, pid, tid, name, false);
    }

    /// An executable mapping learned from /proc/PID/maps.
    pub(crate) fn synth_mapping(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, path: &str) {
        self.conv.mmap(&Mmap {
            pid,
            start,
            len: end.saturating_sub(start),
            pgoff,
            path,
            build_id: &[],
            exec: true,
            time_ns: 0,
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
        | PerfRecord::Switch { time, .. }
        | PerfRecord::CallchainDeferred { time, .. } => *time,
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
