//! The errors of starting a detector and registering threads.

use std::io;
use std::time::Duration;

/// Why a detector could not start or a thread could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The threshold is below the 1 ms the detector can time.
    #[error("stall threshold {0:?} is too small: it must be at least 1 ms")]
    Threshold(Duration),
    /// The user stack copy size is out of range.
    #[error("user stack copy of {0} bytes is out of range: it must be 64 to 61440 bytes")]
    StackCopy(u32),
    /// The capture signal is not a real-time signal.
    #[error(
        "signal {signal} is not a real-time signal ({min}..={max}) and cannot carry stack captures"
    )]
    NotRealtime {
        /// The signal asked for.
        signal: i32,
        /// SIGRTMIN.
        min: i32,
        /// SIGRTMAX.
        max: i32,
    },
    /// The program already handles the capture signal.
    #[error(
        "signal {0} already has a handler in this program; choose another with Builder::signal"
    )]
    SignalInUse(i32),
    /// Installing the capture signal's handler failed.
    #[error("cannot install the handler of signal {signal}: {source}")]
    Sigaction {
        /// The signal.
        signal: i32,
        /// What sigaction said.
        source: io::Error,
    },
    /// A system resource the detector needs could not be had.
    #[error("cannot {what}: {source}")]
    Sys {
        /// What was attempted.
        what: &'static str,
        /// The cause.
        source: io::Error,
    },
    /// The thread is already registered with this detector.
    #[error("thread {tid} is already registered with this stall detector")]
    AlreadyRegistered {
        /// Thread id.
        tid: u32,
    },
    /// The per-thread perf event could not be opened.
    #[error("cannot open a task-clock perf event for thread {tid}: {source}")]
    PerfOpen {
        /// Thread id.
        tid: u32,
        /// What perf_event_open said.
        source: io::Error,
    },
    /// The per-thread ring buffer could not be mapped.
    #[error(
        "cannot map the perf ring buffer ({bytes} bytes) of thread {tid}: {source} \
         (unprivileged processes share kernel.perf_event_mlock_kb; use a smaller \
         Builder::user_stack_bytes or fewer threads)"
    )]
    RingMap {
        /// Thread id.
        tid: u32,
        /// Bytes asked for.
        bytes: usize,
        /// What mmap said.
        source: io::Error,
    },
    /// Every slot of the wall-clock capture table is taken.
    #[error("cannot register thread {tid}: at most {max} threads per process can be watched by wall clock")]
    TooManyThreads {
        /// Thread id.
        tid: u32,
        /// The limit.
        max: usize,
    },
    /// The detector has stopped.
    #[error("the stall detector has stopped")]
    Stopped,
}
