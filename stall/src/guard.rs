//! Registering a thread: its perf event or capture buffer is made on the
//! thread itself (so errors come back to it), then handed to the watcher.
//! The [`ThreadGuard`] it returns is how the thread says it made progress,
//! and dropping it deregisters.

use std::cell::Cell;
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Error;
use crate::proc;
use crate::state::{lock, Command, Mode, PerfEvent, Shared, Slot, Thread};
use crate::sys::signal::{Capture, WallSlot, MAX_THREADS};
use crate::sys::{self, Counter, EventConfig, RingBuffer};

/// A registered thread's handle. Call [`ThreadGuard::tick`] each time the
/// loop makes progress (between tasks); drop it to stop watching the thread.
///
/// It belongs to the thread that registered (it is neither `Send` nor
/// `Sync`): only that thread ticks, so a tick is a plain store.
pub struct ThreadGuard {
    shared: Arc<Shared>,
    slot: Arc<Slot>,
    count: Cell<u64>,
    tid: u32,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for ThreadGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadGuard")
            .field("tid", &self.tid)
            .finish()
    }
}

impl ThreadGuard {
    /// Marks progress: the thread's time without a tick starts again.
    /// One relaxed atomic store, no system call.
    #[inline]
    pub fn tick(&self) {
        let n = self.count.get().wrapping_add(2);
        self.count.set(n);
        self.slot.ticks.store(n, Ordering::Relaxed);
    }

    /// Marks the thread idle, waiting for work (call it before blocking in
    /// `epoll_wait` or a channel receive): the wall clock does not count
    /// until the next [`ThreadGuard::tick`]. Under the CPU clock a waiting
    /// thread uses no CPU, so this only ends the current stall.
    #[inline]
    pub fn idle(&self) {
        let n = self.count.get().wrapping_add(2);
        self.count.set(n);
        self.slot.ticks.store(n | 1, Ordering::Relaxed);
    }

    /// The registered thread's id.
    pub fn tid(&self) -> u32 {
        self.tid
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.slot.active.store(false, Ordering::Release);
        lock(&self.shared.registered).remove(&self.tid);
        self.shared.send(Command::Remove(Arc::clone(&self.slot)));
    }
}

/// The event every registered thread gets under the CPU clock.
pub(crate) fn event_config(period_ns: u64, stack_bytes: u32, kernel: bool) -> EventConfig {
    EventConfig::thread_stack(Counter::TaskClock, period_ns, stack_bytes, kernel)
}

/// Data pages of a thread's ring: room for about six samples, so a watcher
/// busy for a few sampling periods loses none.
pub(crate) fn ring_pages(stack_bytes: u32) -> usize {
    let sample = stack_bytes as usize + 2048;
    (6 * sample).div_ceil(sys::page_size()).next_power_of_two()
}

/// Opens, maps and enables the perf event of thread `tid` (any thread of ours).
pub(crate) fn open_perf(
    tid: u32,
    period_ns: u64,
    stack_bytes: u32,
    kernel: bool,
) -> Result<PerfEvent, Error> {
    let cfg = event_config(period_ns, stack_bytes, kernel);
    let fd = sys::perf_event_open(&cfg, tid as i32, -1)
        .map_err(|source| Error::PerfOpen { tid, source })?;
    let pages = ring_pages(stack_bytes);
    let ring = RingBuffer::map(&fd, pages).map_err(|source| Error::RingMap {
        tid,
        bytes: (pages + 1) * sys::page_size(),
        source,
    })?;
    sys::enable(&fd).map_err(|source| Error::PerfOpen { tid, source })?;
    Ok(PerfEvent { fd, ring })
}

/// Registers the calling thread with the detector behind `shared`.
pub(crate) fn register(shared: &Arc<Shared>) -> Result<ThreadGuard, Error> {
    if shared.stopped.load(Ordering::Acquire) {
        return Err(Error::Stopped);
    }
    let tid = sys::gettid();
    if !lock(&shared.registered).insert(tid) {
        return Err(Error::AlreadyRegistered { tid });
    }
    let made = make_thread(shared, tid);
    let thread = match made {
        Ok(t) => t,
        Err(e) => {
            lock(&shared.registered).remove(&tid);
            return Err(e);
        }
    };
    let slot = Arc::clone(&thread.slot);
    shared.send(Command::Add(Box::new(thread)));
    Ok(ThreadGuard {
        shared: Arc::clone(shared),
        slot,
        count: Cell::new(0),
        tid,
        _not_send: PhantomData,
    })
}

fn make_thread(shared: &Shared, tid: u32) -> Result<Thread, Error> {
    let local = 0u8;
    let stack = proc::mapping_of(std::hint::black_box(&local) as *const u8 as u64);
    let slot = Arc::new(Slot::default());
    slot.active.store(true, Ordering::Release);
    let cfg = &shared.config;
    let perf = match cfg.mode {
        Mode::Perf { kernel, .. } => {
            Some(open_perf(tid, cfg.period_ns(), cfg.stack_bytes, kernel)?)
        }
        Mode::Wall { .. } => None,
    };
    let capture = match cfg.signal() {
        Some(_) => {
            let wake = shared
                .wake
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| Error::Sys {
                    what: "duplicate the stall detector's wake-up pipe",
                    source,
                })?;
            let (lo, hi) = stack.unwrap_or((0, 0));
            let capture = Capture::new(wake, lo, hi);
            Some(
                WallSlot::publish(tid, capture).ok_or(Error::TooManyThreads {
                    tid,
                    max: MAX_THREADS,
                })?,
            )
        }
        None => None,
    };
    Ok(Thread {
        tid,
        name: proc::thread_name(tid).unwrap_or_default(),
        slot,
        stack,
        start_time: proc::start_time(tid),
        perf,
        capture,
    })
}
