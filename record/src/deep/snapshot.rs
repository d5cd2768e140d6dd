//! Reading a thread's stack from the live process: snapshots taken with
//! `process_vm_readv`, bounded by the mapping that holds them, stamped with
//! the time they were read, and the outer frames remembered against them.

use std::collections::HashMap;
use std::io;

use flamerec_perf::procfs::Mappings;
use flamerec_unwind::{FrameState, OuterFrames};

use crate::sys;

/// A snapshot reads at most this much of one thread's stack.
const MAX_SNAPSHOT: u64 = 16 << 20;
/// Read in pieces this big (a short read ends at unmapped memory).
const PIECE: usize = 256 << 10;

/// One thread's stack from `base` to the end of its mapping, as read
/// between `read_from` and `read_until` (CLOCK_MONOTONIC ns).
pub(super) struct Snapshot {
    pub(super) read_from: u64,
    pub(super) read_until: u64,
    pub(super) base: u64,
    pub(super) bytes: Vec<u8>,
    /// Outer frames by the state they were unwound from; valid while the
    /// memory above that state's stack pointer is what the snapshot holds.
    pub(super) memo: HashMap<FrameState, OuterFrames>,
}

impl Snapshot {
    fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// The bytes from `start` to `end`, if the snapshot holds all of them.
    pub(super) fn slice(&self, start: u64, end: u64) -> Option<&[u8]> {
        let a = usize::try_from(start.checked_sub(self.base)?).ok()?;
        let b = usize::try_from(end.checked_sub(self.base)?).ok()?;
        self.bytes.get(a..b)
    }

    /// Reads `tid`'s stack from `low` (page-aligned down) to `top` into
    /// `buf` (a buffer of an earlier snapshot, reused).
    pub(super) fn read(tid: u32, low: u64, top: u64, buf: Vec<u8>) -> io::Result<Snapshot> {
        let low = low & !4095;
        let top = top.min(low.saturating_add(MAX_SNAPSHOT));
        let read_from = sys::monotonic_ns();
        let bytes = read_range(tid, low, top, buf)?;
        Ok(Snapshot {
            read_from,
            read_until: sys::monotonic_ns(),
            base: low,
            bytes,
            memo: HashMap::new(),
        })
    }

    /// Takes over the memo entries of `old` still valid here: those whose
    /// stack pointer lies above every byte that differs between the two.
    /// Returns `old`'s buffer for the next read.
    pub(super) fn inherit(&mut self, old: Snapshot) -> Vec<u8> {
        if old.end() != self.end() {
            return old.bytes;
        }
        let start = old.base.max(self.base);
        let (Some(a), Some(b)) = (old.slice(start, old.end()), self.slice(start, self.end()))
        else {
            return old.bytes;
        };
        // The highest differing byte, scanning down from the top.
        let differs_below = last_difference(a, b).map_or(start, |i| start + i as u64 + 1);
        let mut memo = old.memo;
        memo.retain(|state, _| state.sp >= differs_below);
        self.memo = memo;
        old.bytes
    }
}

/// The highest index where `a` and `b` differ (over their common length).
/// Compared a page at a time (a `memcmp`), from the top: byte by byte, it
/// was a tenth of an always-on recorder's CPU on 200 KiB stacks.
fn last_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    const PAGE: usize = 4096;
    let mut end = a.len().min(b.len());
    while end > 0 {
        let start = end.saturating_sub(PAGE);
        if a[start..end] != b[start..end] {
            return (start..end).rev().find(|&i| a[i] != b[i]);
        }
        end = start;
    }
    None
}

/// Reads `tid`'s memory from `start` to `end` into `out` (cleared first),
/// stopping early at memory that is not mapped.
fn read_range(tid: u32, start: u64, end: u64, mut out: Vec<u8>) -> io::Result<Vec<u8>> {
    let len = usize::try_from(end.saturating_sub(start)).unwrap_or(0);
    out.clear();
    while out.len() < len {
        let n = (len - out.len()).min(PIECE);
        match sys::read_remote_append(tid, start + out.len() as u64, &mut out, n) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if out.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    Ok(out)
}

/// The mappings of the recorded processes, to bound a stack read by the
/// end of the mapping that holds it.
#[derive(Default)]
pub(super) struct Maps {
    /// Per process: the round they were read in, and the mappings.
    by_pid: HashMap<u32, (u64, Mappings)>,
}

impl Maps {
    /// The mapping of `pid` holding `addr` (start, end); the maps are read
    /// again (at most once per `round`) when no known mapping holds it.
    pub(super) fn holding(&mut self, pid: u32, addr: u64, round: u64) -> Option<(u64, u64)> {
        if let Some((read_in, maps)) = self.by_pid.get(&pid) {
            if let Some(m) = maps.holding(addr) {
                return Some(m);
            }
            if *read_in == round {
                return None;
            }
        }
        let maps = Mappings::of(pid).ok()?;
        let m = maps.holding(addr);
        self.by_pid.insert(pid, (round, maps));
        m
    }

    /// `pid` exec'd or exited.
    pub(super) fn forget(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
    }
}

/// Where a thread blocked in the kernel stopped: its user stack pointer and
/// program counter, from `/proc/PID/task/TID/syscall` (`NR ARGS… SP PC`, or
/// `-1 SP PC`); `None` for a runnable thread (`running`) or when unreadable.
pub(super) fn blocked_at(pid: u32, tid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?;
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    Some((
        hex(fields[fields.len() - 2])?,
        hex(fields[fields.len() - 1])?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(base: u64, bytes: Vec<u8>, sps: &[u64]) -> Snapshot {
        let memo = sps
            .iter()
            .map(|&sp| {
                (
                    FrameState { ip: 1, sp, bp: 0 },
                    OuterFrames {
                        frames: vec![1].into(),
                        from: 0,
                        complete: true,
                    },
                )
            })
            .collect();
        Snapshot {
            read_from: 0,
            read_until: 0,
            base,
            bytes,
            memo,
        }
    }

    #[test]
    fn memo_entries_above_the_highest_change_survive_a_new_snapshot() {
        let old = snap(0x1000, vec![7u8; 0x1000], &[0x1100, 0x1800, 0x1f00]);
        let mut bytes = vec![7u8; 0x1400];
        bytes[0x400 + 0x900] = 9; // address 0x1900 changed
        let mut fresh = snap(0xc00, bytes, &[]);
        fresh.inherit(old);
        let sps: Vec<u64> = fresh.memo.keys().map(|s| s.sp).collect();
        assert_eq!(sps, vec![0x1f00]);
    }

    #[test]
    fn the_last_difference_is_found_across_pages() {
        let a = vec![3u8; 3 * 4096 + 100];
        assert_eq!(last_difference(&a, &a), None);
        for at in [0, 1, 4095, 4096, 8191, 3 * 4096 + 99] {
            let mut b = a.clone();
            b[at] = 4;
            assert_eq!(last_difference(&a, &b), Some(at), "{at}");
            // A lower difference too: the highest one counts.
            if at > 0 {
                b[0] = 9;
                assert_eq!(last_difference(&a, &b), Some(at), "{at} with 0");
            }
        }
        assert_eq!(last_difference(&a[..10], &a), None, "common length only");
        assert_eq!(last_difference(&[], &a), None);
    }

    #[test]
    fn a_snapshot_of_another_extent_keeps_nothing() {
        let old = snap(0x1000, vec![7u8; 0x1000], &[0x1f00]);
        let mut fresh = snap(0x1000, vec![7u8; 0x800], &[]);
        fresh.inherit(old);
        assert!(fresh.memo.is_empty());
    }

    #[test]
    fn this_threads_stack_reads_back_within_its_mapping() {
        let live_value = [0x5au8; 64];
        let addr = live_value.as_ptr() as u64;
        let me = std::process::id();
        let mut maps = Maps::default();
        let (_, top) = maps
            .holding(me, addr, 1)
            .expect("a mapping holds the stack");
        let s = Snapshot::read(me, addr, top, Vec::new()).expect("own memory");
        assert_eq!(s.slice(addr, addr + 64), Some(&live_value[..]));
        assert!(s.read_from <= s.read_until);
        // A reused buffer, longer and full of other bytes, reads the same.
        let again = Snapshot::read(me, addr, top, vec![0xee; 1 << 20]).expect("own memory");
        assert_eq!(again.slice(addr, addr + 64), Some(&live_value[..]));
        assert_eq!(again.bytes.len(), s.bytes.len());
    }

    fn own_tid() -> u32 {
        std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .expect("tid")
    }

    #[test]
    fn a_blocked_thread_shows_its_stack_pointer_and_a_runnable_one_does_not() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{mpsc, Arc};
        use std::time::{Duration, Instant};
        let me = std::process::id();
        let (go, wait) = mpsc::channel::<()>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let blocked = std::thread::spawn(move || {
            let _ = tid_tx.send(own_tid());
            let _ = wait.recv();
        });
        let tid = tid_rx.recv().expect("tid");
        let deadline = Instant::now() + Duration::from_secs(10);
        let (sp, pc) = loop {
            if let Some(at) = blocked_at(me, tid) {
                break at;
            }
            assert!(Instant::now() < deadline, "never blocked");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(sp > 0x1000 && pc > 0x1000);
        let _ = go.send(());
        let _ = blocked.join();
        // A spinning thread is runnable (on a CPU or waiting for one).
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (tid_tx, tid_rx) = mpsc::channel();
        let spinner = std::thread::spawn(move || {
            let _ = tid_tx.send(own_tid());
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let tid = tid_rx.recv().expect("tid");
        assert_eq!(blocked_at(me, tid), None);
        stop.store(true, Ordering::Relaxed);
        let _ = spinner.join();
    }
}
