//! Ring readers: threads that empty the ring buffers into memory when the
//! loop that turns samples into records cannot read them in time.
//!
//! The loop reads the rings in place (no copy) as long as it keeps up. A
//! loop that waits for a CPU (every core busy, or its core taken by a
//! higher-priority task) lets the rings fill, and a full ring loses samples.
//! Readers own the rings from then on, in groups of neighbouring CPUs, one
//! thread per group, each free to run on any CPU: it copies what its rings
//! hold into a queue the loop takes from, so a ring empties as long as some
//! CPU runs its reader. The queue is bounded (a few times the rings' own
//! size): past that, a reader leaves
//! its rings to fill and the kernel counts what it drops, as without
//! readers.
//!
//! The loop handles the records of a round in time order, so that an exec
//! or mapping on one CPU comes before the samples that follow it on
//! another. Reading in place, it sees every ring as of one moment. With
//! readers, each round begins by asking every reader for a pass and waiting
//! (at most [`SYNC_WAIT`]) until each has handed over what its rings held
//! when asked: the rings are then in as of that moment too. A reader kept
//! from every CPU past the wait leaves its records for a later round; the
//! process state they carry is applied by time (`flamerec_convert`'s maps),
//! so an old exec handed over late does not erase the mappings newer
//! records made.
//! Holding newer records back across rounds until every reader had copied
//! past them was tried and dropped: the loop's
//! proof that a deep stack is live (see `deep`) needs samples handled
//! before the next snapshot of their thread is read, and held samples cut
//! three in four deep stacks of the deep-stack sample.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::rings::Event;
use crate::sys::{self, RingBuffer};

/// How long an idle reader sleeps at most (the loop asks for passes
/// itself; this only notices hang-ups and the stop).
const IDLE_POLL_MS: i32 = 50;
/// How long a round waits for the readers' passes.
const SYNC_WAIT: Duration = Duration::from_millis(2);
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
    /// One per reader: a byte written here asks it for a pass now.
    kicks: Vec<UnixStream>,
}

struct Shared {
    chunks: Mutex<Vec<Vec<u8>>>,
    /// Bytes in `chunks`.
    queued: AtomicUsize,
    cap: usize,
    stop: AtomicBool,
    /// Passes the loop asked for, counted.
    asked: AtomicU64,
    /// Per reader: the last request whose pass it has handed over.
    done: Vec<AtomicU64>,
}

impl Readers {
    /// Moves the rings of `events` to `threads` readers (at most one per
    /// ring), in groups of neighbouring CPUs. Readers may run on any CPU of
    /// `allowed` (those the recording started with): a loop thread later
    /// confined to one CPU does not confine them, and a reader runs
    /// wherever the scheduler finds room first.
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
            .map(|e| e.fd.try_clone())
            .collect::<io::Result<Vec<OwnedFd>>>()?;
        let rings = events.iter_mut().filter_map(|e| e.ring.take());
        let owned: Vec<(OwnedFd, RingBuffer)> = fds.into_iter().zip(rings).collect();
        let ring_bytes: usize = owned.iter().map(|(_, r)| r.data_size()).sum();
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
            asked: AtomicU64::new(0),
            done: (0..n).map(|_| AtomicU64::new(0)).collect(),
        });
        let per = owned.len().div_ceil(n).max(1);
        let mut groups: Vec<Vec<(OwnedFd, RingBuffer)>> = Vec::new();
        let mut rest = owned.into_iter();
        loop {
            let g: Vec<_> = rest.by_ref().take(per).collect();
            if g.is_empty() {
                break;
            }
            groups.push(g);
        }
        let mut handles = Vec::new();
        let mut kicks = Vec::new();
        for (k, group) in groups.into_iter().enumerate() {
            let (fds, rings): (Vec<OwnedFd>, Vec<RingBuffer>) = group.into_iter().unzip();
            let (kick, kick_rx) = UnixStream::pair()?;
            kick.set_nonblocking(true)?;
            kick_rx.set_nonblocking(true)?;
            kicks.push(kick);
            let shared = Arc::clone(&shared);
            let tx = wake_tx.try_clone()?;
            let cpus = allowed.to_vec();
            let h = std::thread::Builder::new()
                .name(format!("flamerec-read{k}"))
                .spawn(move || {
                    // Refused: the reader runs where the loop does.
                    if !cpus.is_empty() {
                        let _ = sys::run_on(&cpus);
                    }
                    read_loop(k, &fds, rings, &shared, tx, kick_rx)
                })?;
            handles.push(h);
        }
        Ok(Readers {
            shared,
            threads: handles,
            wake,
            kicks,
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
        drain_socket(&self.wake);
    }

    /// Asks every reader for a pass, waits for them (at most
    /// [`SYNC_WAIT`]), and takes what they queued: whole records.
    pub(crate) fn take(&self) -> Vec<Vec<u8>> {
        let want = self.shared.asked.fetch_add(1, Ordering::AcqRel) + 1;
        for k in &self.kicks {
            let _ = (&*k).write(&[1]);
        }
        let until = Instant::now() + SYNC_WAIT;
        loop {
            let answered = self
                .shared
                .done
                .iter()
                .all(|d| d.load(Ordering::Acquire) >= want);
            if answered {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = left.as_millis().clamp(1, 1000) as i32;
            let _ = sys::poll_readable(&[self.wake.as_fd()], ms);
            self.clear_wake();
        }
        self.collect()
    }

    /// What the readers queued, without asking for a pass.
    fn collect(&self) -> Vec<Vec<u8>> {
        let chunks = std::mem::take(&mut *lock(&self.shared.chunks));
        let bytes: usize = chunks.iter().map(Vec::len).sum();
        self.shared.queued.fetch_sub(bytes, Ordering::AcqRel);
        chunks
    }

    /// Stops the readers after a last pass over their rings (the events are
    /// disabled by then) and returns everything left.
    pub(crate) fn stop(mut self) -> Vec<Vec<u8>> {
        self.shared.stop.store(true, Ordering::Release);
        for k in &self.kicks {
            let _ = (&*k).write(&[1]);
        }
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
        self.collect()
    }
}

/// Reads and drops every byte waiting on a non-blocking wake-up socket.
pub(crate) fn drain_socket(s: &UnixStream) {
    let mut sink = [0u8; 64];
    while matches!(io::Read::read(&mut &*s, &mut sink), Ok(n) if n > 0) {}
}

fn lock<T>(m: &Mutex<Vec<T>>) -> std::sync::MutexGuard<'_, Vec<T>> {
    // A thread that panicked left whole chunks only: go on with them.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One reader: copies its rings out whenever they pass the wake-up mark,
/// and at least every [`IDLE_POLL_MS`].
fn read_loop(
    k: usize,
    fds: &[OwnedFd],
    mut rings: Vec<RingBuffer>,
    shared: &Shared,
    mut tx: UnixStream,
    kick: UnixStream,
) {
    // What a reader sleeps on: its rings' descriptors and the loop's asks.
    let mut polled_fds: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
    polled_fds.push(kick.as_fd());
    // Copies not yet handed to the loop: the queue's lock is only tried,
    // never waited for, since the loop may have been preempted holding it
    // (by the very task that keeps it from its CPU).
    let mut pending: Vec<Vec<u8>> = Vec::new();
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        drain_socket(&kick);
        // Read before the pass: what the rings hold now is in it.
        let asked = shared.asked.load(Ordering::Acquire);
        let mut full = false;
        for ring in rings.iter_mut() {
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
        let answered =
            pending.is_empty() && !full && shared.done[k].swap(asked, Ordering::AcqRel) < asked;
        if handed || answered {
            let _ = tx.write(&[1]);
        }
        if stopping {
            return;
        }
        if full || !pending.is_empty() {
            // A ring holds more than the queue takes, or the queue is
            // locked: wait for the loop instead of polling descriptors that
            // stay readable.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let polled = Instant::now();
        let _ = sys::poll_readable(&polled_fds, IDLE_POLL_MS);
        if polled.elapsed() < Duration::from_micros(100)
            && shared.asked.load(Ordering::Acquire) == asked
            && rings.iter().all(|r| r.peek().0.is_empty())
        {
            // Readable at once with nothing to read and nothing asked: the
            // monitored tasks are gone (a hang-up stays readable), or a
            // wake-up came for records already copied. Do not spin until
            // the stop, but do not sleep longer than a ring lasts either:
            // 50 ms here was 250 samples at 4999 Hz, and a ring of 16 KiB
            // holds 70 (hundreds lost beside busy loops).
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
