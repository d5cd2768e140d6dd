//! A sample's way from its record to the writer: admitted or left out
//! with its process, its user part (callchain, deferred part or unwound
//! stack copy), its JIT and Python frames, its kernel part once the
//! symbol table is in, then written (or, off-CPU, weighed later).

use std::io;

use flamerec_format::Sample;
use flamerec_perf::parse::{words, SampleRecord};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::{Cut, Outcome, UserRegs};

use super::State;
use crate::deep::{Pending, Settled, Unwound, UserStack};
use crate::defer;
use crate::raw::RawSample;
use crate::sys;

impl<W: io::Write> State<W> {
    /// A sample: left out (with its Python walk) when its process is,
    /// else its callchain split into kernel and user parts, then its user
    /// part joined with the deferred one, unwound from its stack copy, or
    /// taken as the callchain has it.
    pub(super) fn sample(&mut self, s: &SampleRecord<'_>) {
        let Some(raw) = self.admit(s) else { return };
        if let (Some(d), Some(cookie)) = (&mut self.deferred, s.deferred_cookie()) {
            let ready = d.sample(cookie, raw);
            self.finish_raws(ready);
            return;
        }
        match s.user_regs {
            Some(regs) if self.conv.unwinder_mut().is_some() => self.unwind_user(s, raw, regs),
            _ => self.finish_raw(raw),
        }
    }

    /// A sample of a process the recording keeps, with its callchain split
    /// and its Python walk taken; `None` for one left out.
    fn admit(&mut self, s: &SampleRecord<'_>) -> Option<RawSample> {
        let (kept, id) = self.identities.admit(s.pid, self.rel(s.time));
        if !kept {
            // Its Python walk, if one ran, goes with it.
            if let Some(p) = &mut self.python {
                p.walk_of(s.pid, s.tid, s.time, s.ip);
            }
            return None;
        }
        self.seen(s.pid, s.tid);
        if let Some(id) = id {
            self.conv.writer_mut().identity(&id);
        }
        self.jit
            .sampled(s.pid, sys::monotonic_ns(), self.conv.unwinder_mut());
        let mut raw = RawSample {
            pid: s.pid,
            tid: s.tid,
            time: s.time,
            ip: s.ip,
            kernel: Vec::new(),
            user: Vec::new(),
            user_cut: false,
            python: self
                .python
                .as_mut()
                .and_then(|p| p.walk_of(s.pid, s.tid, s.time, s.ip)),
        };
        let looped =
            self.conv
                .split_callchain(s.pid, s.callchain(), None, &mut raw.kernel, &mut raw.user);
        // A walk that looped reaches the cap without the stack being deep.
        if !looped {
            self.count_cut(s);
        }
        Some(raw)
    }

    /// Dwarf mode: the user part unwound from the sample's stack copy (and
    /// past it, from the thread's live stack), or the sample left to wait
    /// for a later sample of its thread to show its callers.
    fn unwind_user(&mut self, s: &SampleRecord<'_>, mut raw: RawSample, [bp, sp, ip]: [u64; 3]) {
        let Some(u) = self.conv.unwinder_mut() else {
            return self.finish_raw(raw);
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
            if self.off_cpu.is_none() {
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
        let whole = self.conv.unwound_frames(raw.pid, &addrs, &mut raw.user);
        match unwound {
            Ok(mut unwound) => {
                if !whole {
                    unwound.outcome = Outcome::Truncated(Cut::NoRule);
                }
                raw.user_cut = matches!(unwound.outcome, Outcome::Truncated(_));
                self.count(&unwound);
            }
            Err(_) => {
                raw.user_cut = true;
                self.counts.truncated += 1;
            }
        }
        self.user_addrs = addrs;
        self.finish_raw(raw);
    }

    /// A CALLCHAIN_DEFERRED record: the user part of `cookie`'s samples.
    pub(super) fn deferred_callchain(&mut self, cookie: u64, pid: u32, ips: &[u8]) {
        if self.deferred.is_none() {
            return;
        }
        // A deferred part holds user addresses only.
        let (mut kernel, mut user) = (Vec::new(), Vec::new());
        let looped =
            self.conv
                .split_callchain(pid, words(ips), Some(Side::User), &mut kernel, &mut user);
        let cut = defer::cut_at_cap(ips, looped);
        if let Some(d) = &mut self.deferred {
            let ready = d.user_part(cookie, user, cut);
            self.finish_raws(ready);
        }
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
            self.counts.cut_at_cap += 1;
        }
    }

    pub(super) fn write_settled(&mut self, done: Vec<Settled>) {
        for mut d in done {
            let mut raw = d.sample.raw;
            if !self.conv.unwound_frames(raw.pid, &d.addrs, &mut raw.user) {
                d.unwound.outcome = Outcome::Truncated(Cut::NoRule);
            }
            self.count(&d.unwound);
            raw.user_cut = matches!(d.unwound.outcome, Outcome::Truncated(_));
            self.finish_raw(raw);
        }
    }

    fn count(&mut self, u: &Unwound) {
        match u.outcome {
            Outcome::Complete if u.beyond => self.counts.completed += 1,
            Outcome::Complete => {}
            Outcome::Truncated(_) => self.counts.truncated += 1,
        }
    }

    pub(super) fn finish_raws(&mut self, raws: Vec<RawSample>) {
        for raw in raws {
            self.finish_raw(raw);
        }
    }

    /// The kernel part, once the symbol table is in (else the sample waits).
    fn finish_raw(&mut self, mut raw: RawSample) {
        if !self.kernel.is_ready() {
            self.held.push(raw);
            return;
        }
        self.jit
            .name_frames(self.conv.writer_mut(), raw.pid, raw.time, &mut raw.user);
        let spliced = match (&mut self.python, raw.python.take()) {
            (Some(p), Some(walk)) => {
                let jit = &self.jit;
                p.splice(
                    &mut self.conv,
                    raw.pid,
                    &walk,
                    &mut raw.user,
                    raw.user_cut,
                    |m| jit.name_of(m),
                )
            }
            _ => false,
        };
        if !spliced && !self.python_interpreter {
            self.jit.leave_out_interpreter(raw.pid, &mut raw.user);
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        self.kernel.frames(&mut self.conv, &raw.kernel, &mut frames);
        frames.extend_from_slice(&raw.user);
        if frames.is_empty() && raw.ip != 0 {
            let f = if raw.ip >= 1 << 63 {
                self.kernel.frame(&mut self.conv, raw.ip)
            } else {
                self.conv.user_frame(raw.pid, raw.ip)
            };
            frames.push(f);
        }
        let stack = self.conv.stack(&frames);
        self.frames = frames;
        let time_ns = self.rel(raw.time);
        match &mut self.off_cpu {
            // Weighed when the thread runs again (see the Switch record).
            Some(b) => b.switched_out(raw.pid, raw.tid, stack, time_ns),
            None => self.conv.writer_mut().sample(Sample {
                time_ns,
                pid: raw.pid,
                tid: raw.tid,
                stack,
                weight: 1,
            }),
        }
    }
}
