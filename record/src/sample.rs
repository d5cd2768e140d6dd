//! One sample, from its perf record to the file: the user part first (its
//! callchain's user frames, or its stack copy unwound — past the copy where
//! the thread's live stack shows the callers, see `deep`), then the kernel
//! part (profiler frames trimmed, symbols written), then the stack interned
//! and the sample written.
//!
//! The user part is done as records arrive, in order with the mappings it
//! resolves against. The kernel part needs the kernel's symbol table, which
//! takes a while to read at start: until it is in, samples wait here with
//! their kernel addresses raw, so the recorder drains its rings from the
//! start and loses nothing meanwhile.

use std::io;

use flamerec_format::{Frame, Sample};
use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_unwind::callchain;
use flamerec_unwind::{Outcome, UserRegs};

use crate::deep::{Pending, Settled, Unwound, UserStack};
use crate::raw::RawSample;
use crate::state::State;
use crate::trim::{is_sampling_path, is_scheduler};
use flamerec_perf::parse::SampleRecord;

impl<W: io::Write> State<W> {
    /// The kernel's symbol table is in: trimming can start, and the samples
    /// that waited for it are written.
    pub(crate) fn set_kallsyms(&mut self, kallsyms: Kallsyms) {
        if self.kernel && kallsyms.is_empty() {
            self.warnings.push(
                "kernel symbols are hidden (/proc/kallsyms shows no addresses: check kernel.kptr_restrict); kernel frames will show as addresses"
                    .into(),
            );
        }
        let keep = self.keep_profiler_frames;
        let extra = &self.extra_trim;
        self.trim =
            kallsyms.ranges(|n| (!keep && is_sampling_path(n)) || extra.iter().any(|e| e == n));
        self.trim_sched = kallsyms.ranges(|n| !keep && is_scheduler(n));
        self.kallsyms = Some(kallsyms);
        for raw in std::mem::take(&mut self.held) {
            self.finish_raw(raw);
        }
    }

    pub(crate) fn sample(&mut self, s: &SampleRecord<'_>) {
        if self.exclude_pid == Some(s.pid) {
            return;
        }
        self.seen(s.pid, s.tid);
        let mut raw = RawSample {
            pid: s.pid,
            tid: s.tid,
            time: s.time,
            ip: s.ip,
            kernel: Vec::new(),
            user: Vec::new(),
        };
        let looped =
            self.conv
                .split_callchain(s.pid, s.callchain(), None, &mut raw.kernel, &mut raw.user);
        // A walk that looped reaches the cap without the stack being deep.
        if !looped {
            self.count_cut(s);
        }
        if self.deferred.is_some() {
            if let Some(cookie) = s.deferred_cookie() {
                self.defer_sample(cookie, raw);
                return;
            }
        }
        let (Some(u), Some([bp, sp, ip])) = (self.conv.unwinder_mut(), s.user_regs) else {
            self.finish_raw(raw);
            return;
        };
        let stack = UserStack {
            pid: s.pid,
            tid: s.tid,
            time: s.time,
            regs: UserRegs {
                ip,
                sp,
                bp,
                bx: s.user_bx,
            },
            copy: s.user_stack,
        };
        let mut addrs = std::mem::take(&mut self.user_addrs);
        addrs.clear();
        let unwound = self.live.unwind(u, &stack, &mut addrs);
        // Earlier samples of this thread that this one shows whole (or cut).
        let settled = self.live.settle(u, &stack, unwound.as_ref().ok());
        if let Err(boundary) = &unwound {
            if !self.off_cpu {
                let boundary = *boundary;
                self.user_addrs = addrs;
                let pending = Pending {
                    regs: stack.regs,
                    copy: s.user_stack.to_vec(),
                    raw,
                    boundary,
                    round: 0,
                };
                self.live.wait(pending, boundary);
                self.write_settled(settled);
                return;
            }
            // Off-CPU samples are weighed when the thread runs again: no waiting.
            u.unwind(s.pid, stack.regs, s.user_stack, &mut addrs);
        }
        self.write_settled(settled);
        match unwound {
            Ok(unwound) => self.count(&unwound),
            Err(_) => self.truncated_stacks += 1,
        }
        self.conv.unwound_frames(raw.pid, &addrs, &mut raw.user);
        self.user_addrs = addrs;
        self.finish_raw(raw);
    }

    /// A frame-pointer callchain as long as the kernel's cap was cut there.
    fn count_cut(&mut self, s: &SampleRecord<'_>) {
        let Some(cap) = self.fp_cap else { return };
        let addresses = s
            .callchain()
            .filter(|&e| e < callchain::PERF_CONTEXT_MAX)
            .count();
        // A deferred chain's cookie is not an address: the user part is
        // judged when it comes.
        let addresses = addresses - usize::from(s.deferred_cookie().is_some());
        if addresses >= cap {
            self.cut_at_cap += 1;
        }
    }

    /// Recording ends: samples still waiting to be shown whole are written cut.
    pub(crate) fn finish_waiting(&mut self) {
        if let Some(u) = self.conv.unwinder_mut() {
            let done = self.live.finish_all(u);
            self.write_settled(done);
        }
    }

    pub(crate) fn write_settled(&mut self, done: Vec<Settled>) {
        for d in done {
            self.count(&d.unwound);
            let mut raw = d.sample.raw;
            self.conv.unwound_frames(raw.pid, &d.addrs, &mut raw.user);
            self.finish_raw(raw);
        }
    }

    fn count(&mut self, u: &Unwound) {
        match u.outcome {
            Outcome::Complete if u.beyond => self.completed_stacks += 1,
            Outcome::Complete => {}
            Outcome::Truncated(_) => self.truncated_stacks += 1,
        }
    }

    /// The kernel part, once the symbol table is in (else the sample waits).
    pub(crate) fn finish_raw(&mut self, raw: RawSample) {
        if self.kallsyms.is_none() {
            self.held.push(raw);
            return;
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut trimming = true;
        for &addr in &raw.kernel {
            if trimming && self.trimmed(addr) {
                continue;
            }
            trimming = false;
            frames.push(self.kernel_frame(addr));
        }
        frames.extend_from_slice(&raw.user);
        if frames.is_empty() && raw.ip != 0 {
            let f = if raw.ip >= 1 << 63 {
                self.kernel_frame(raw.ip)
            } else {
                self.conv.user_frame(raw.pid, raw.ip)
            };
            frames.push(f);
        }
        self.finish_sample(raw.pid, raw.tid, raw.time, frames);
    }

    /// Interns a sample's frames (leaf first) and writes it (off-CPU: keeps
    /// it until the thread runs again). `time` is CLOCK_MONOTONIC ns.
    fn finish_sample(&mut self, pid: u32, tid: u32, time: u64, frames: Vec<Frame>) {
        let stack = self.conv.stack(&frames);
        self.frames = frames;
        let time_ns = self.rel(time);
        if self.off_cpu {
            // Weighed when the thread runs again (see the Switch record).
            self.blocked.insert(tid, (pid, stack, time_ns));
            return;
        }
        self.conv.writer_mut().sample(Sample {
            time_ns,
            pid,
            tid,
            stack,
            weight: 1,
        });
    }

    /// Whether a leading kernel frame belongs to the profiler, not the workload.
    fn trimmed(&self, addr: u64) -> bool {
        self.trim.contains(addr) || (self.off_cpu && self.trim_sched.contains(addr))
    }

    /// A kernel frame; the first time an address is seen, the symbol it
    /// falls in is written too.
    fn kernel_frame(&mut self, addr: u64) -> Frame {
        if self.kernel_addrs.insert(addr) {
            if let Some(k) = &self.kallsyms {
                if let Some(i) = k.lookup(addr) {
                    if self.symbols_written.insert(i) {
                        let sym = k.symbol(i);
                        self.conv.writer_mut().kernel_symbol(&sym);
                    }
                }
            }
        }
        self.conv.kernel_frame(addr)
    }
}
