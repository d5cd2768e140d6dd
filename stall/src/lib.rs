//! Stall reports from inside a program, with kernel stacks.
//!
//! An event loop (an async runtime's worker, a game loop, a storage
//! engine's reactor) must not block: a task that runs 200 ms without
//! yielding stalls everything queued behind it. This crate watches the
//! loop threads you register. Each loop calls [`ThreadGuard::tick`] between
//! tasks (one relaxed atomic store); when a thread goes a threshold without
//! a tick, you get a [`Report`]: how long, the thread's name, and its kernel
//! and user stack, symbolized with inlined functions expanded — again at
//! every further threshold while the stall lasts, and once more when it
//! ends, with the final duration.
//!
//! ```no_run
//! use std::time::Duration;
//! use flamerec_stall::{Detector, Report};
//!
//! # fn run_one_task() {}
//! # fn main() -> Result<(), flamerec_stall::Error> {
//! let detector = Detector::builder()
//!     .threshold(Duration::from_millis(100))
//!     .max_reports_per_minute(6)
//!     .on_report(|r: &Report| eprintln!("{r}")) // the default: stderr
//!     .start()?;
//! let guard = detector.register_current_thread()?;
//! loop {
//!     guard.tick();
//!     run_one_task();
//! }
//! # }
//! ```
//!
//! # How stalls are timed and stacks taken
//!
//! [`Clock::Cpu`] (the default), as Seastar's stall detector: each
//! registered thread gets a `task-clock` perf event that samples it every
//! quarter threshold of *its own* CPU time, with its kernel callchain and a
//! copy of its user stack. A watcher thread reads each thread's tick
//! counter and CPU time as samples arrive; the newest sample inside a stall
//! is the report's stack. Time blocked does not count, time in the kernel
//! on the thread's behalf (page faults, `mmap`, copying) does, and kernel
//! frames show where it went. Where kernel sampling is refused
//! (`kernel.perf_event_paranoid` ≥ 2 without privileges) stacks are user
//! frames only (a stall spent in the kernel leaves no sample then; its user
//! stack is taken with the capture signal described below); where perf
//! events are refused altogether (seccomp, paranoid 3) the detector falls
//! back to the wall clock. Either is said once through
//! [`Builder::on_warning`] and [`Detector::warnings`].
//!
//! [`Clock::Wall`]: any time without a tick counts, blocked included (call
//! [`ThreadGuard::idle`] before waiting for work). A timer checks the
//! counters; a stalled thread's user stack is taken by a real-time signal
//! ([`Builder::signal`]) whose handler only copies registers and a slice of
//! stack into a buffer made at registration. Its system call, if any, is
//! restarted (`SA_RESTART`); calls that are never restarted (`poll`,
//! `epoll_wait`, `nanosleep`…) return `EINTR`, as for any signal. As
//! root, reports of a thread blocked in the kernel also carry its kernel
//! stack from `/proc/self/task/TID/stack`.
//!
//! Durations are lower bounds: the stall began at the last tick, which
//! the watcher sees at most one of its wake-ups (about a quarter threshold)
//! late. Unwinding and symbolization run on a reporter thread, never on the
//! stalled thread and never in a signal handler. Reports are rate-limited
//! ([`Builder::max_reports_per_minute`]); [`Report::suppressed`] counts
//! those dropped since the last one, and [`Report::folded`] renders a report
//! as a folded line, so a file of them feeds `inferno-flamegraph` or
//! `flamerec diff`.
//!
//! All `unsafe` code (the signal handler, a few system calls) lives in the
//! private `sys` module; perf events and ring buffers come from
//! `flamerec-perf`. x86-64 Linux only, like the rest of flamerec.

#![deny(unsafe_code)]

mod detector;
mod error;
mod guard;
mod limit;
mod namer;
mod proc;
mod report;
mod state;
#[allow(unsafe_code)]
mod sys;
mod watch;
mod window;

pub use detector::{
    Builder, Detector, Stats, DEFAULT_REPORTS_PER_MINUTE, DEFAULT_THRESHOLD,
    DEFAULT_USER_STACK_BYTES,
};
pub use error::Error;
pub use guard::ThreadGuard;
pub use report::{Clock, Frame, Report};
