//! The watcher thread: wakes on samples, a timer and registrations, reads
//! every thread's tick counter and stall clock, decides when a stall is
//! reported (and whether the rate limit lets it through), gathers its raw
//! stack and passes it to the reporter thread.
//!
//! It must stay quick: it never symbolizes, unwinds or calls user code, so
//! a slow report never delays the timing of the next stall. CPU clock:
//! stacks come from the thread's newest perf sample inside the stall (where
//! kernel samples are refused, a stall spent in the kernel has none: then
//! from the capture signal). Wall clock: from the capture signal. The
//! signal is sent only for a report that the rate limit let through.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use flamerec_perf::parse::{split, Layout, PerfRecord, SampleRecord};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::UserRegs;

use crate::limit::RateLimit;
use crate::namer::{KernelStack, RawReport, RawStack};
use crate::proc;
use crate::state::{lock, Command, Mode, Shared, Thread};
use crate::sys::{self, Ready};
use crate::window::{Verdict, Window};

/// Most stack bytes read per report, copy and live memory together.
const MAX_STACK: usize = 512 * 1024;

/// A thread as the watcher follows it.
struct Watched {
    t: Thread,
    window: Window,
    /// The newest stack taken inside the current window.
    last: Option<RawStack>,
    /// Stall time already carried by delivered reports of this window.
    accounted_ns: u64,
    /// A report of this window was let through (its end is news).
    admitted: bool,
    /// Wall clock: a report waiting for its capture.
    pending: Option<Pending>,
    /// Wall clock: the thread once left the capture signal unanswered (it
    /// blocks it): no more signals, reports without a user stack.
    deaf: bool,
}

struct Pending {
    asked_ns: u64,
    report: RawReport,
}

struct Watcher {
    shared: Arc<Shared>,
    tx: Sender<RawReport>,
    limit: RateLimit,
    threads: Vec<Watched>,
    buf: Vec<u8>,
    layout: Layout,
    pid: u32,
}

/// Runs until the detector stops.
pub(crate) fn run(shared: Arc<Shared>, tx: Sender<RawReport>) {
    let wake_rx = Arc::clone(&shared);
    let wake_rx = wake_rx.wake_rx.as_fd();
    let mut w = Watcher {
        limit: RateLimit::new(shared.config.per_minute, sys::monotonic_ns()),
        layout: Layout {
            sample_type: crate::guard::event_config(1, 8, false).sample_type,
            regs_user: crate::guard::event_config(1, 8, false).sample_regs_user,
        },
        shared,
        tx,
        threads: Vec::new(),
        buf: Vec::new(),
        pid: std::process::id(),
    };
    let mut ready: Vec<Ready> = Vec::new();
    while !w.shared.stopped.load(Ordering::Acquire) {
        let timeout = w.timeout_ms();
        let polled = {
            let mut fds: Vec<BorrowedFd<'_>> = vec![wake_rx];
            // Under the CPU clock every thread has an event, so the
            // readiness of thread i is at i + 1.
            fds.extend(
                w.threads
                    .iter()
                    .filter_map(|t| t.t.perf.as_ref().map(|p| p.fd.as_fd())),
            );
            sys::poll(&fds, timeout, &mut ready)
        };
        if let Err(e) = polled {
            w.shared
                .warn(format!("stall detector: poll failed ({e}); retrying"));
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        let hangups: Vec<bool> = ready.iter().skip(1).map(|r| r.hangup).collect();
        w.observe_all(&hangups);
        sys::drain_pipe(wake_rx);
        w.apply_commands();
    }
}

impl Watcher {
    fn timeout_ms(&self) -> i32 {
        let period_ms =
            (self.shared.config.period_ns() / 1_000_000).clamp(1, i32::MAX as u64) as i32;
        let busy = match self.shared.config.mode {
            // Samples wake us while a thread runs; the timer only sees
            // stalls end (a thread that ticked and went to sleep).
            Mode::Perf { kernel: true, .. } => self
                .threads
                .iter()
                .any(|t| t.window.reported() || t.pending.is_some()),
            // Kernel samples are dropped: time kernel stalls by the count.
            Mode::Perf { kernel: false, .. } | Mode::Wall { .. } => !self.threads.is_empty(),
        };
        if busy {
            period_ms
        } else {
            -1
        }
    }

    fn apply_commands(&mut self) {
        let commands = std::mem::take(&mut *lock(&self.shared.commands));
        for c in commands {
            match c {
                Command::Add(t) => {
                    let now = sys::monotonic_ns();
                    let measure = self.measure(&t, now).unwrap_or(now);
                    let value = t.slot.ticks.load(Ordering::Relaxed);
                    self.threads.push(Watched {
                        window: Window::new(value, now, measure),
                        t: *t,
                        last: None,
                        accounted_ns: 0,
                        admitted: false,
                        pending: None,
                        deaf: false,
                    });
                }
                Command::Remove(slot) => self.threads.retain(|w| !Arc::ptr_eq(&w.t.slot, &slot)),
            }
        }
    }

    /// The stall clock of a thread: its CPU time, or `now`.
    fn measure(&self, t: &Thread, now: u64) -> Option<u64> {
        match &t.perf {
            Some(p) => sys::read_count(p.fd.as_fd()).ok(),
            None => Some(now),
        }
    }

    fn observe_all(&mut self, hangups: &[bool]) {
        let mut gone = Vec::new();
        for i in 0..self.threads.len() {
            let now = sys::monotonic_ns();
            self.collect_capture(i, now);
            let alive = if self.threads[i].t.perf.is_some() {
                self.observe_perf(i) && !hangups.get(i).copied().unwrap_or(false)
            } else {
                self.observe_wall(i)
            };
            if !alive {
                gone.push(i);
            }
        }
        // The thread exited while registered: close its event now.
        for i in gone.into_iter().rev() {
            let w = self.threads.remove(i);
            lock(&self.shared.registered).remove(&w.t.tid);
        }
    }

    /// CPU clock. Returns false when the thread is gone.
    fn observe_perf(&mut self, i: usize) -> bool {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let w = &mut self.threads[i];
        let Some(perf) = &mut w.t.perf else {
            return true;
        };
        perf.ring.drain(&mut buf);
        let Ok(measure) = sys::read_count(perf.fd.as_fd()) else {
            self.buf = buf;
            return true;
        };
        let value = w.t.slot.ticks.load(Ordering::Relaxed);
        let now = sys::monotonic_ns();
        let (newest, lost) = newest_sample(&self.layout, &buf);
        self.shared.count(&self.shared.counters.lost, lost);
        let verdict = self.step(i, value, now, measure);
        let w = &mut self.threads[i];
        if let Some(s) = newest.filter(|s| s.time > w.window.since()) {
            w.last = Some(raw_stack(&s));
        }
        self.buf = buf;
        let Verdict::Report { stalled_ns } = verdict else {
            return true;
        };
        if self.threads[i].pending.is_some() {
            return true;
        }
        let Some(mut report) = self.admit(i, stalled_ns, false, now) else {
            return true;
        };
        let w = &mut self.threads[i];
        match w.last.take() {
            Some(mut stack) => {
                complete(&mut stack, w.t.stack, self.pid);
                w.last = Some(stack.clone());
                report.stack = stack;
                let _ = self.tx.send(report);
                true
            }
            // No sample inside the stall: it is in the kernel, whose samples
            // are not allowed here. The signal takes its user stack.
            None => self.request_capture(i, report, now),
        }
    }

    /// Wall clock. Returns false when the thread is gone.
    fn observe_wall(&mut self, i: usize) -> bool {
        let now = sys::monotonic_ns();
        let value = self.threads[i].t.slot.ticks.load(Ordering::Relaxed);
        let verdict = self.step(i, value, now, now);
        let Verdict::Report { stalled_ns } = verdict else {
            return true;
        };
        if self.threads[i].pending.is_some() {
            // The previous capture is still on its way; this one folds into the next.
            return true;
        }
        let w = &self.threads[i];
        let tid = w.t.tid;
        if w.t.start_time.is_some() && proc::start_time(tid) != w.t.start_time {
            return false;
        }
        let Some(mut report) = self.admit(i, stalled_ns, false, now) else {
            return true;
        };
        // Read before the signal disturbs it: where a blocked thread waits.
        if let Mode::Wall {
            proc_stacks: true, ..
        } = self.shared.config.mode
        {
            if proc::is_blocked(tid) {
                if let Some(names) = proc::kernel_stack(tid) {
                    report.stack.kernel = KernelStack::Named(names);
                }
            }
        }
        self.request_capture(i, report, now)
    }

    /// Sends the capture signal for `report`, which waits until the stack
    /// arrives; without a signal, sends it as it is. Returns false when the
    /// thread is gone.
    fn request_capture(&mut self, i: usize, report: RawReport, now: u64) -> bool {
        let signal = self.shared.config.signal();
        let w = &mut self.threads[i];
        let tid = w.t.tid;
        let (Some(signal), Some(slot), false) = (signal, &w.t.capture, w.deaf) else {
            let _ = self.tx.send(report);
            return true;
        };
        slot.capture().request();
        match sys::tgkill(tid, signal) {
            Ok(()) => {
                w.pending = Some(Pending {
                    asked_ns: now,
                    report,
                });
                true
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => false,
            Err(e) => {
                self.shared.warn(format!(
                    "stall detector: cannot signal thread {tid} for its stack ({e}); reporting without it"
                ));
                let _ = self.tx.send(report);
                true
            }
        }
    }

    /// Hands over a report whose capture arrived, or gives up on one the
    /// thread did not answer.
    fn collect_capture(&mut self, i: usize, now: u64) {
        let timeout_ns = self.shared.config.threshold_ns().max(1_000_000_000);
        let w = &mut self.threads[i];
        let (Some(p), Some(slot)) = (&w.pending, &w.t.capture) else {
            return;
        };
        if let Some(([bp, sp, ip], stack)) = slot.capture().take() {
            let mut raw = RawStack {
                regs: Some(UserRegs {
                    ip,
                    sp,
                    bp,
                    bx: None,
                }),
                stack,
                kernel: p.report.stack.kernel.clone(),
            };
            complete(&mut raw, w.t.stack, self.pid);
            w.last = Some(raw.clone());
            if let Some(mut p) = w.pending.take() {
                p.report.stack = raw;
                let _ = self.tx.send(p.report);
            }
        } else if now.saturating_sub(p.asked_ns) > timeout_ns {
            let tid = w.t.tid;
            w.deaf = true;
            if let Some(p) = w.pending.take() {
                let _ = self.tx.send(p.report);
            }
            self.shared.warn(format!(
                "stall detector: thread {tid} did not take the stack-capture signal \
                 within {} ms (does it block the signal?); its reports have no user stack",
                timeout_ns / 1_000_000
            ));
        }
    }

    /// Advances thread `i`'s window; handles a stall's end and the
    /// window's bookkeeping. Returns the verdict.
    fn step(&mut self, i: usize, value: u64, now: u64, measure: u64) -> Verdict {
        let threshold = self.shared.config.threshold_ns();
        let w = &mut self.threads[i];
        let opened = w.window.since();
        let was_reported = w.window.reported();
        let verdict = w.window.observe(value, now, measure, threshold);
        if w.window.reported() && !was_reported {
            self.shared.count(&self.shared.counters.stalls, 1);
        }
        if let Verdict::Ended { stalled_ns } = verdict {
            let w = &self.threads[i];
            if w.admitted && w.pending.is_none() {
                let last = w.last.clone();
                if let Some(mut report) = self.admit(i, stalled_ns, true, now) {
                    report.stack = last.unwrap_or_default();
                    let _ = self.tx.send(report);
                }
            }
        }
        let w = &mut self.threads[i];
        if w.window.since() != opened {
            w.last = None;
            w.accounted_ns = 0;
            w.admitted = false;
        }
        verdict
    }

    /// Asks the rate limit; a report (without its stack yet) if it agrees.
    fn admit(&mut self, i: usize, stalled_ns: u64, ended: bool, now: u64) -> Option<RawReport> {
        // A dropped guard: nothing more is decided for its thread (what was
        // decided before is still delivered).
        if !self.threads[i].t.slot.active.load(Ordering::Acquire) {
            return None;
        }
        let Some(suppressed) = self.limit.admit(now) else {
            self.shared.count(&self.shared.counters.suppressed, 1);
            return None;
        };
        let clock = self.shared.config.clock();
        let w = &mut self.threads[i];
        let new_ns = stalled_ns.saturating_sub(w.accounted_ns);
        w.accounted_ns = w.accounted_ns.max(stalled_ns);
        w.admitted = true;
        Some(RawReport {
            tid: w.t.tid,
            name: w.t.name.clone(),
            stalled_ns,
            new_ns,
            ended,
            clock,
            suppressed,
            stack: RawStack::default(),
        })
    }
}

/// The newest sample of a drained buffer, and the count of lost samples.
fn newest_sample<'a>(layout: &Layout, buf: &'a [u8]) -> (Option<SampleRecord<'a>>, u64) {
    let mut malformed = 0;
    let mut newest: Option<SampleRecord<'a>> = None;
    let mut lost = 0;
    for (ty, misc, body) in split(buf, &mut malformed) {
        match layout.decode(ty, misc, body) {
            Some(PerfRecord::Sample(s)) if newest.as_ref().is_none_or(|n| s.time >= n.time) => {
                newest = Some(s);
            }
            Some(PerfRecord::Lost { count, .. }) => lost += count,
            _ => {}
        }
    }
    (newest, lost)
}

/// The stack of a perf sample, copied out of the drained buffer.
fn raw_stack(s: &SampleRecord<'_>) -> RawStack {
    let kernel: Vec<u64> = callchain::frames(s.callchain(), None)
        .filter(|(side, _)| *side == Side::Kernel)
        .map(|(_, a)| a)
        .collect();
    RawStack {
        regs: s.user_regs.map(|[bp, sp, ip]| UserRegs {
            ip,
            sp,
            bp,
            bx: None,
        }),
        stack: s.user_stack.to_vec(),
        kernel: if kernel.is_empty() {
            KernelStack::None
        } else {
            KernelStack::Addrs(kernel)
        },
    }
}

/// Extends a stack copy with the rest of the thread's stack, read from
/// live memory. Taken while the thread is still stalled, its outer frames
/// are the ones the copy's inner frames return to; process_vm_readv
/// cannot fault, whatever the thread did meanwhile.
fn complete(raw: &mut RawStack, range: Option<(u64, u64)>, pid: u32) {
    let (Some(regs), Some((lo, hi))) = (raw.regs, range) else {
        return;
    };
    if regs.sp < lo || regs.sp >= hi {
        return;
    }
    let want = usize::try_from(hi - regs.sp)
        .unwrap_or(MAX_STACK)
        .min(MAX_STACK);
    let have = raw.stack.len();
    if have >= want {
        return;
    }
    raw.stack.resize(want, 0);
    let got = sys::read_remote(pid, regs.sp + have as u64, &mut raw.stack[have..]).unwrap_or(0);
    raw.stack.truncate(have + got);
}
