//! The agent's own figures: windows dropped before a sink took them, and
//! its CPU time and memory as /proc says.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::window::WindowFile;

static DROPPED: AtomicU64 = AtomicU64::new(0);

/// A window the shipper had no room for.
pub(crate) fn dropped_window(w: &WindowFile) {
    DROPPED.fetch_add(1, Ordering::Relaxed);
    eprintln!(
        "flamerec: warning: window {} dropped ({} samples): the backends' payloads are made slower than windows come",
        w.window.index, w.samples
    );
}

/// Windows dropped so far.
pub(crate) fn dropped_windows() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// This process's CPU time (every thread) so far; `None` when /proc
/// cannot say. /proc counts in ticks of 10 ms (USER_HZ is 100 on Linux).
pub(crate) fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14 and stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// Resident memory now and at its peak, in bytes.
pub(crate) fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kib("VmRSS:")? * 1024, kib("VmHWM:")? * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_figures() {
        let t0 = cpu_time().unwrap();
        let until = std::time::Instant::now() + Duration::from_millis(60);
        let mut x = 0u64;
        while std::time::Instant::now() < until {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        assert!(cpu_time().unwrap() >= t0 + Duration::from_millis(30));
        let (rss, peak) = memory().unwrap();
        assert!(rss > 1 << 20 && peak >= rss, "{rss} {peak}");
    }
}
