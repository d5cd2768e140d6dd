//! Ring readers: threads that empty the ring buffers into memory when the
//! loop that turns samples into records cannot read them in time.
//!
//! The loop reads the rings in place (no copy) as long as it keeps up. A
//! loop that waits for a CPU (every core busy, or its core taken by a
//! higher-priority task) lets the rings fill, and a full ring loses samples.
//! Readers own the rings from then on, in per-CPU groups, one thread per
//! group: each copies what its rings hold into a queue the loop takes from,
//! so a ring empties as long as any CPU runs one of them. The queue is
//! bounded (a few times the rings' own size): past that, a reader leaves
//! its rings to fill and the kernel counts what it drops, as without
//! readers.
//!
//! The loop sorts the records it takes in a round by time, as it does
//! those it reads in place. A ring's records reach it up to a reader's pass
//! ([`IDLE_POLL_MS`]) late, so across CPUs the order holds within that: a
//! mapping made on one CPU that little before a sample on another may come
//! after it. Holding records back until every reader has copied past them
//! was tried: the loop's proof that a deep stack is live (see `deep`) needs
//! samples handled before the next snapshot of their thread is read, and
//! held samples cut three in four deep stacks of the deep-stack sample.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::state::Event;
use crate::sys::{self, RingBuffer};

/// How often a reader copies its rings when none passed its wake-up mark:
/// how late the records of a quiet ring may reach the loop.
const IDLE_POLL_MS: i32 = 5;
/// The queue holds at most this many times the readers' rings' bytes, and
/// at least [`QUEUE_MIN`] (small frame-pointer rings), at most
/// [`QUEUE_MAX`] (many CPUs).
const QUEUE_RINGS: usize = 8;
const QUEUE_MIN: usize = 64 << 20;
const QUEUE_MAX: usize = 1 << 30;

/// Reader threads and the queue they fill.
pub(crate) struct Readers {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// Readers write a byte here when they queued records; the loop polls it.
    wake: UnixStream,
}

struct Shared {
    chunks: Mutex<Vec<Vec<u8>>>,
    /// Bytes in `chunks`.
    queued: AtomicUsize,
    cap: usize,
    stop: AtomicBool,
}

impl Readers {
    /// Moves the rings of `events` to `threads` readers (at most one per
    /// ring), in groups of neighbouring CPUs. Each reader runs on its
    /// group's CPUs among `allowed` (those the recording started with):
    /// it reads ring memory where the kernel just wrote it, and a loop
    /// thread later confined to one CPU does not confine the readers.
    pub(crate) fn start(
        events: &mut [Event],
        threads: usize,
        allowed: &[usize],
    ) -> io::Result<Readers> {
        // Every descriptor is duplicated before any ring moves, so a
        // failure leaves the loop reading all of them as before.
        let fds = events
            .iter()
            .filter(|e| e.ring.is_some())
            .map(|e| Ok((e.cpu, e.fd.try_clone()?)))
            .collect::<io::Result<Vec<(i32, OwnedFd)>>>()?;
        let rings = events.iter_mut().filter_map(|e| e.ring.take());
        let owned: Vec<(i32, OwnedFd, RingBuffer)> = fds
            .into_iter()
            .zip(rings)
            .map(|((cpu, fd), r)| (cpu, fd, r))
            .collect();
        let ring_bytes: usize = owned.iter().map(|(_, _, r)| r.data_size()).sum();
        let n = threads.clamp(1, owned.len().max(1));
        let (wake, wake_tx) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            chunks: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            cap: ring_bytes
                .saturating_mul(QUEUE_RINGS)
                .clamp(QUEUE_MIN, QUEUE_MAX),
            stop: AtomicBool::new(false),
        });
        let per = owned.len().div_ceil(n).max(1);
        let mut groups: Vec<Vec<(i32, OwnedFd, RingBuffer)>> = Vec::new();
        let mut rest = owned.into_iter();
        loop {
            let g: Vec<_> = rest.by_ref().take(per).collect();
            if g.is_empty() {
                break;
            }
            groups.push(g);
        }
        let mut handles = Vec::new();
        for (k, group) in groups.into_iter().enumerate() {
            let mut cpus: Vec<usize> = group
                .iter()
                .filter_map(|(cpu, _, _)| usize::try_from(*cpu).ok())
                .filter(|c| allowed.contains(c))
                .collect();
            // Not on its CPUs (outside what the recording may use): wherever
            // the loop could run when it started.
            if cpus.is_empty() {
                cpus = allowed.to_vec();
            }
            let rings = group.into_iter().map(|(_, fd, r)| (fd, r)).collect();
            let shared = Arc::clone(&shared);
            let tx = wake_tx.try_clone()?;
            let h = std::thread::Builder::new()
                .name(format!("flamerec-read{k}"))
                .spawn(move || {
                    // Refused: the reader runs where the loop does.
                    if !cpus.is_empty() {
                        let _ = sys::run_on(&cpus);
                    }
                    read_loop(rings, &shared, tx)
                })?;
            handles.push(h);
        }
        Ok(Readers {
            shared,
            threads: handles,
            wake,
        })
    }

    /// Reader threads running.
    pub(crate) fn count(&self) -> usize {
        self.threads.len()
    }

    /// What the loop polls to learn that records were queued.
    pub(crate) fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Empties the wake-up socket (after a poll).
    pub(crate) fn clear_wake(&self) {
        let mut sink = [0u8; 64];
        while matches!(io::Read::read(&mut &self.wake, &mut sink), Ok(n) if n > 0) {}
    }

    /// Takes what the readers queued: whole records.
    pub(crate) fn take(&self) -> Vec<Vec<u8>> {
        let chunks = std::mem::take(&mut *lock(&self.shared.chunks));
        let bytes: usize = chunks.iter().map(Vec::len).sum();
        self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
        chunks
    }

    /// Stops the readers after a last pass over their rings (the events are
    /// disabled by then) and returns everything left.
    pub(crate) fn stop(mut self) -> Vec<Vec<u8>> {
        self.shared.stop.store(true, Ordering::Release);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        self.take()
    }
}

fn lock<T>(m: &Mutex<Vec<T>>) -> std::sync::MutexGuard<'_, Vec<T>> {
    // A thread that panicked left whole chunks only: go on with them.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One reader: copies its rings out whenever they pass the wake-up mark,
/// and at least every [`IDLE_POLL_MS`].
fn read_loop(mut rings: Vec<(OwnedFd, RingBuffer)>, shared: &Shared, mut tx: UnixStream) {
    // Copies not yet handed to the loop: the queue's lock is only tried,
    // never waited for, since the loop may have been preempted holding it
    // (by the very task that keeps it from its CPU).
    let mut pending: Vec<Vec<u8>> = Vec::new();
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        let mut full = false;
        for (_, ring) in rings.iter_mut() {
            let (a, b) = ring.peek();
            let n = a.len() + b.len();
            if n == 0 {
                continue;
            }
            if !stopping && shared.queued.load(Ordering::Acquire) + n > shared.cap {
                // The loop is this far behind: the ring keeps its records,
                // and the kernel counts what does not fit.
                full = true;
                continue;
            }
            let mut chunk = Vec::with_capacity(n);
            let got = ring.drain(&mut chunk);
            shared.queued.fetch_add(got, Ordering::AcqRel);
            pending.push(chunk);
        }
        let handed = !pending.is_empty()
            && if stopping {
                lock(&shared.chunks).append(&mut pending);
                true
            } else if let Ok(mut q) = shared.chunks.try_lock() {
                q.append(&mut pending);
                true
            } else {
                false
            };
        if handed {
            let _ = tx.write(&[1]);
        }
        if stopping {
            return;
        }
        if full || !pending.is_empty() {
            // A ring holds more than the queue takes, or the queue is
            // locked: wait for the loop instead of polling descriptors that
            // stay readable.
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        let fds: Vec<_> = rings.iter().map(|(fd, _)| fd.as_fd()).collect();
        let polled = std::time::Instant::now();
        let _ = sys::poll_readable(&fds, IDLE_POLL_MS);
        if polled.elapsed() < std::time::Duration::from_micros(100)
            && rings.iter().all(|(_, r)| r.peek().0.is_empty())
        {
            // Readable at once with nothing to read: the monitored tasks are
            // gone (a hang-up stays readable). Do not spin until the stop.
            std::thread::sleep(std::time::Duration::from_millis(IDLE_POLL_MS as u64));
        }
    }
}
