//! What the detector's threads and the registered threads share: the
//! settings, the per-thread tick slot, the queue of registrations the
//! watcher picks up, counters and warnings.
//!
//! Registered threads touch only their own [`Slot`] on the hot path (one
//! relaxed store); everything here behind a lock is for registration,
//! deregistration and the detector's own threads.

use std::collections::HashSet;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::report::Clock;
use crate::sys::signal::WallSlot;
use crate::sys::{self, RingBuffer};

/// A registered thread's tick counter, on a cache line of its own so
/// threads ticking side by side do not slow each other down.
#[repr(align(64))]
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Even: busy, odd: idle; changes with every tick.
    pub(crate) ticks: AtomicU64,
    /// Cleared when the guard is dropped: no report is decided after.
    pub(crate) active: AtomicBool,
}

/// How stalls are timed and stacks taken, decided at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// task-clock perf events.
    Perf {
        /// Kernel samples allowed.
        kernel: bool,
        /// Without kernel samples, a stall spent in the kernel leaves no
        /// sample: its user stack is then taken with this signal.
        signal: Option<i32>,
    },
    /// A wall-clock timer and the capture signal.
    Wall {
        /// The capture signal.
        signal: i32,
        /// /proc/self/task/TID/stack is readable: kernel stacks of blocked threads.
        proc_stacks: bool,
    },
}

/// Settings fixed at start.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) threshold: Duration,
    pub(crate) per_minute: u32,
    pub(crate) stack_bytes: u32,
    pub(crate) mode: Mode,
}

impl Config {
    pub(crate) fn threshold_ns(&self) -> u64 {
        u64::try_from(self.threshold.as_nanos()).unwrap_or(u64::MAX)
    }

    /// How often the watcher looks when it must: a quarter threshold.
    pub(crate) fn period_ns(&self) -> u64 {
        (self.threshold_ns() / 4).max(1)
    }

    /// The capture signal, where stacks may be taken with it.
    pub(crate) fn signal(&self) -> Option<i32> {
        match self.mode {
            Mode::Perf { signal, .. } => signal,
            Mode::Wall { signal, .. } => Some(signal),
        }
    }

    pub(crate) fn clock(&self) -> Clock {
        match self.mode {
            Mode::Perf { .. } => Clock::Cpu,
            Mode::Wall { .. } => Clock::Wall,
        }
    }
}

/// A registered thread's task-clock event and its ring.
pub(crate) struct PerfEvent {
    pub(crate) fd: OwnedFd,
    pub(crate) ring: RingBuffer,
}

/// A thread handed to the watcher.
pub(crate) struct Thread {
    pub(crate) tid: u32,
    pub(crate) name: String,
    pub(crate) slot: Arc<Slot>,
    /// Its stack mapping (start, end), if found.
    pub(crate) stack: Option<(u64, u64)>,
    /// Start time from /proc, to tell it from a later thread with its id.
    pub(crate) start_time: Option<u64>,
    /// CPU clock: its event.
    pub(crate) perf: Option<PerfEvent>,
    /// Where the capture signal's handler leaves its stack, if used.
    pub(crate) capture: Option<WallSlot>,
}

/// What registered threads ask of the watcher.
pub(crate) enum Command {
    Add(Box<Thread>),
    /// The thread of this slot deregistered.
    Remove(Arc<Slot>),
}

/// Running totals.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) stalls: AtomicU64,
    pub(crate) reports: AtomicU64,
    pub(crate) suppressed: AtomicU64,
    pub(crate) lost: AtomicU64,
}

type WarnFn = Box<dyn FnMut(&str) + Send>;

/// Everything shared.
pub(crate) struct Shared {
    pub(crate) config: Config,
    /// Write end of the watcher's wake-up pipe.
    pub(crate) wake: OwnedFd,
    /// Its read end, kept as long as anything may write (a guard that
    /// outlives the detector), so a write never meets a closed pipe.
    pub(crate) wake_rx: OwnedFd,
    pub(crate) commands: Mutex<Vec<Command>>,
    /// Thread ids registered now.
    pub(crate) registered: Mutex<HashSet<u32>>,
    pub(crate) counters: Counters,
    pub(crate) stopped: AtomicBool,
    warnings: Mutex<(Vec<String>, WarnFn)>,
}

/// Locks, recovering from a poisoned lock: the data behind these locks
/// stays consistent whatever a panicking callback left half done.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn new(
        config: Config,
        (wake_rx, wake): (OwnedFd, OwnedFd),
        on_warning: WarnFn,
    ) -> Self {
        Shared {
            config,
            wake,
            wake_rx,
            commands: Mutex::new(Vec::new()),
            registered: Mutex::new(HashSet::new()),
            counters: Counters::default(),
            stopped: AtomicBool::new(false),
            warnings: Mutex::new((Vec::new(), on_warning)),
        }
    }

    /// Queues a command and wakes the watcher.
    pub(crate) fn send(&self, c: Command) {
        lock(&self.commands).push(c);
        sys::wake(self.wake.as_fd());
    }

    /// Says something once: kept for [`crate::Detector::warnings`] and
    /// handed to the warning callback.
    pub(crate) fn warn(&self, msg: String) {
        let mut w = lock(&self.warnings);
        if w.0.contains(&msg) {
            return;
        }
        (w.1)(&msg);
        w.0.push(msg);
    }

    pub(crate) fn warnings(&self) -> Vec<String> {
        lock(&self.warnings).0.clone()
    }

    pub(crate) fn count(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}
