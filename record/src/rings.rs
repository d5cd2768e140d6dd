//! The ring buffers: how big they are, when the loop wakes for them, the
//! events that own them, and reading one round of records out of them.
//!
//! Without root, mapped rings are locked memory the kernel charges to the
//! user: up to `kernel.perf_event_mlock_kb` times the number of online CPUs,
//! then to the process's locked-memory limit (`ulimit -l`) — unless the
//! user may lock memory anyway. Rings are sized within that budget, and
//! when it makes them smaller than a mode wants, the recorder says so.

use crate::sys;
use flamerec_perf::parse::{split, straddle, Layout, PerfRecord};

/// One perf event of one CPU: its fd and, for the first event of its CPU,
/// the ring buffer the others write into too.
pub(crate) struct Event {
    pub(crate) fd: std::os::fd::OwnedFd,
    pub(crate) ring: Option<sys::RingBuffer>,
    /// The CPU whose ring it writes to.
    pub(crate) cpu: u32,
    /// Opened with `count_lost` (Linux 6.0+).
    pub(crate) counts_lost: bool,
}

/// Data pages per CPU ring for `dwarf` or fp mode, and the smallest that
/// holds a few whole samples.
pub(crate) fn wanted_pages(dwarf: bool, stack_size: u32, asked: Option<usize>) -> (usize, usize) {
    // Dwarf samples carry a stack copy each: 4 MiB per 16 KiB of copy, room
    // for ≈ 250 ms of samples at 999 Hz whatever the copy's size.
    let default = if dwarf {
        1024 * (stack_size as usize).div_ceil(16384).max(1)
    } else {
        128
    };
    let min = if dwarf {
        (4 * (stack_size as usize + 2048)).div_ceil(sys::page_size())
    } else {
        1
    };
    (
        asked.unwrap_or(default).max(min).next_power_of_two(),
        default,
    )
}

/// The stack copy and ring pages per CPU to record with: what `wanted_pages`
/// and `fit_pages` give, except that the default copy
/// ([`crate::DEFAULT_STACK_SIZE`]) drops to 16 KiB when the locked-memory
/// budget of an unprivileged user cuts the rings below their default — a
/// ring of that budget holds four times more 16 KiB samples, and losing
/// samples is worse than cutting a few deep stacks. Not a warning of its
/// own (every unprivileged recording would print it): DESIGN.md says so,
/// and the warning about cut stacks, when there are many, points to
/// `--stack-size`.
pub(crate) fn fit(
    dwarf: bool,
    stack_size: u32,
    asked: Option<usize>,
    cpus: usize,
) -> (u32, usize, Option<String>) {
    /// The copy unprivileged recordings fall back to.
    const SMALL: u32 = 16384;
    let (wanted, default) = wanted_pages(dwarf, stack_size, asked);
    let (pages, warning) = fit_pages(wanted, default, cpus);
    if !dwarf || stack_size != crate::DEFAULT_STACK_SIZE || pages >= default {
        return (stack_size, pages, warning);
    }
    let (wanted, default) = wanted_pages(dwarf, SMALL, asked);
    let (pages, warning) = fit_pages(wanted, default, cpus);
    (SMALL, pages, warning)
}

/// `pages` per CPU, halved until `cpus` rings fit the locked-memory budget
/// of an unprivileged user; and a warning when that left fewer than
/// `default` pages.
pub(crate) fn fit_pages(pages: usize, default: usize, cpus: usize) -> (usize, Option<String>) {
    if sys::is_root() {
        return (pages, None);
    }
    let page = sys::page_size() as u64;
    let mlock_kb: u64 = read_trimmed("/proc/sys/kernel/perf_event_mlock_kb")
        .parse()
        .unwrap_or(516);
    let cpus = cpus.max(1) as u64;
    let rlimit = memlock_limit().unwrap_or(0);
    let budget = (mlock_kb * 1024 * cpus).saturating_add(rlimit) / page;
    // Each ring also maps one metadata page.
    let per_cpu = (budget / cpus).saturating_sub(1) as usize;
    let mut p = pages;
    while p > 1 && p > per_cpu {
        p /= 2;
    }
    let warning = (p < pages && p < default).then(|| {
        format!(
            "ring buffers limited to {} KiB per CPU by the locked-memory budget of an unprivileged user (kernel.perf_event_mlock_kb {mlock_kb} KiB per CPU, ulimit -l {} KiB): at high rates samples may be lost; raise either, or record as root",
            p as u64 * page / 1024,
            rlimit / 1024
        )
    });
    (p, warning)
}

/// When the loop wakes for a ring: a quarter full; in dwarf mode after
/// about 8 ms of samples already (8 samples at 999 Hz, 40 at 4999 Hz), so a
/// sample deeper than its copy meets its thread's live stack within
/// milliseconds (see `deep`), while its frames still are. Counted in time,
/// not samples: at 4999 Hz a wake-up every 8 samples spent a fifth of the
/// recorder's CPU switching to it.
pub(crate) fn wakeup_bytes(pages: usize, dwarf_stack: Option<u32>, frequency_hz: u64) -> u32 {
    /// Milliseconds of samples per wake-up in dwarf mode.
    const DWARF_WAKE_MS: u64 = 8;
    let quarter = pages * sys::page_size() / 4;
    let samples = (frequency_hz.saturating_mul(DWARF_WAKE_MS) / 1000).max(8) as usize;
    let bytes = match dwarf_stack {
        Some(stack) => quarter.min(samples.saturating_mul(stack as usize + 2048)),
        None => quarter,
    };
    bytes.try_into().unwrap_or(u32::MAX)
}

/// The soft locked-memory limit of this process in bytes, from
/// /proc/self/limits (`None` when unreadable; `u64::MAX` when unlimited).
fn memlock_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

pub(crate) fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Reads every ring the loop still owns in place, and the records ring
/// readers queued (`taken`, whole), and hands the records of all CPUs to
/// `handle` in time order, so an exec or mmap on one CPU precedes samples
/// on another; then frees what was read. Records that cannot be decoded
/// are counted in `malformed`. `after_peek` runs once every ring's records
/// of the round are fixed, before any is handled (what it reads from
/// elsewhere then holds everything written before them), and what it
/// returns goes to each `handle` call. Returns whether a ring the loop
/// reads was over half full (the loop is late), and that value.
pub(crate) fn read_round<T>(
    events: &mut [Event],
    scratch: &mut [Vec<u8>],
    taken: &[Vec<u8>],
    layout: &Layout,
    malformed: &mut u64,
    after_peek: impl FnOnce() -> T,
    mut handle: impl FnMut(&mut T, PerfRecord<'_>),
) -> (bool, T) {
    // Records are read in place in the rings (a dwarf sample carries a
    // whole stack copy; copying them out was a fifth of the recorder's
    // CPU); only the one record a ring's wrap cuts in two is copied.
    let mut published = Vec::with_capacity(events.len());
    let mut late = false;
    let extra_out;
    {
        let mut views: Vec<(&[u8], &[u8])> = Vec::with_capacity(events.len());
        for (e, sc) in events.iter().zip(scratch.iter_mut()) {
            let (a, b) = e.ring.as_ref().map_or((&[][..], &[][..]), |r| r.peek());
            if let Some(r) = &e.ring {
                late |= (a.len() + b.len()) * 2 > r.data_size();
            }
            let (end, start) = straddle(a, b, sc);
            published.push(a.len() + b.len());
            views.push((&a[..end], &b[start..]));
        }
        let mut extra = after_peek();
        let mut recs = Vec::new();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(3 * views.len() + taken.len());
        for ((a, b), sc) in views.into_iter().zip(scratch.iter()) {
            parts.extend([a, &sc[..], b]);
        }
        parts.extend(taken.iter().map(Vec::as_slice));
        for part in parts {
            for (ty, misc, body) in split(part, malformed) {
                match layout.decode(ty, misc, body) {
                    Some(r) => recs.push(r),
                    None => *malformed += 1,
                }
            }
        }
        recs.sort_by_key(record_time);
        for r in recs {
            handle(&mut extra, r);
        }
        extra_out = extra;
    }
    for (e, n) in events.iter_mut().zip(published) {
        if let Some(ring) = &mut e.ring {
            ring.consume(n);
        }
    }
    (late, extra_out)
}

fn record_time(r: &PerfRecord<'_>) -> u64 {
    match r {
        PerfRecord::Sample(s) => s.time,
        PerfRecord::Mmap { time, .. }
        | PerfRecord::Comm { time, .. }
        | PerfRecord::Task { time, .. }
        | PerfRecord::Lost { time, .. }
        | PerfRecord::Switch { time, .. }
        | PerfRecord::CallchainDeferred { time, .. } => *time,
        PerfRecord::Throttle | PerfRecord::Other => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_locked_memory_limit() {
        assert!(memlock_limit().is_some());
    }

    #[test]
    fn dwarf_rings_hold_a_few_samples_whatever_is_asked() {
        let (pages, default) = wanted_pages(true, 16384, Some(2));
        assert_eq!(default, 1024);
        // The default copy gets rings four times larger.
        assert_eq!(wanted_pages(true, crate::DEFAULT_STACK_SIZE, None).1, 4096);
        assert!(pages * sys::page_size() >= 4 * 16384);
        assert!(pages.is_power_of_two());
        assert_eq!(wanted_pages(false, 16384, None), (128, 128));
    }
}
