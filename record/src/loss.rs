//! Samples the kernel dropped: counted per CPU ring, with the cause the
//! recorder can tell.
//!
//! A ring overruns when the kernel writes faster than the recorder reads.
//! Between two reads the recorder either waited for a CPU (every core busy
//! with the workload: giving it a core or lowering -F helps, a bigger ring
//! only delays the loss) or was running or sleeping and the ring was too small
//! for the interval (a bigger ring or a lower rate helps). The scheduler's
//! run-queue delay of the recorder's thread (`/proc/thread-self/schedstat`,
//! second field) tells the two apart: losses read in a round are counted as
//! starved when the recorder spent most of the time since the round before
//! the previous one waiting for a CPU. Two rounds, because the kernel writes
//! its lost record only once the reader has made room: an overrun that
//! happened while the recorder was away is read one round after its return.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use flamerec_format::Totals;

/// The losses of one recording.
pub(crate) struct Losses {
    per_cpu: BTreeMap<u32, u64>,
    total: u64,
    /// Lost in rounds where the recorder mostly waited for a CPU.
    starved: u64,
    schedstat: Option<File>,
    /// Start of the current round and the run-queue delay then, and the
    /// same of the two rounds before; the oldest bounds the interval a lost
    /// record read now may describe.
    rounds: [(Instant, u64); 3],
}

impl Losses {
    /// Counts for a recording drained by the calling thread (whose
    /// run-queue delay is read).
    pub(crate) fn new() -> Self {
        let schedstat = File::open("/proc/thread-self/schedstat").ok();
        let now = (Instant::now(), read_delay(schedstat.as_ref()));
        Losses {
            per_cpu: BTreeMap::new(),
            total: 0,
            starved: 0,
            schedstat,
            rounds: [now; 3],
        }
    }

    /// Marks the start of a drain round.
    pub(crate) fn begin_round(&mut self) {
        self.rounds.rotate_left(1);
        self.rounds[2] = (Instant::now(), read_delay(self.schedstat.as_ref()));
    }

    /// `count` samples lost by the ring of `cpu`, read in the current round.
    pub(crate) fn add(&mut self, cpu: u32, count: u64) {
        *self.per_cpu.entry(cpu).or_default() += count;
        self.total += count;
        let [(since, delay_then), _, (now, delay_now)] = self.rounds;
        let interval = now.duration_since(since).as_nanos() as u64;
        let waited = delay_now.saturating_sub(delay_then);
        if waited.saturating_mul(2) > interval {
            self.starved += count;
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Stores the counts in the trailer's totals.
    pub(crate) fn fill(&self, totals: &mut Totals) {
        totals.lost_samples = self.total;
        totals.lost_per_cpu = self.per_cpu.iter().map(|(&c, &n)| (c, n)).collect();
        totals.lost_starved = self.starved;
    }

    /// The end-of-recording warning when more than 1% was lost.
    pub(crate) fn warning(&self, samples: u64) -> Option<String> {
        let lost = self.total;
        if lost == 0 || lost * 100 <= samples + lost {
            return None;
        }
        let share = lost as f64 * 100.0 / (samples + lost) as f64;
        let cpus = self
            .per_cpu
            .iter()
            .map(|(c, n)| format!("CPU {c}: {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let advice = if self.starved * 2 > lost {
            "the recorder was waiting for a CPU while the rings filled (every core busy): \
             lower -F, or leave a core free for flamerec"
        } else {
            "the rings filled between reads: raise --mmap-pages or lower -F"
        };
        Some(format!(
            "{lost} samples were lost ({share:.1}%; {cpus}): {advice}"
        ))
    }
}

/// The thread's total run-queue wait in ns (0 when schedstat is unavailable).
fn read_delay(f: Option<&File>) -> u64 {
    let Some(f) = f else { return 0 };
    let mut buf = [0u8; 96];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|s| s.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_a_delay_that_does_not_go_back() {
        let f = File::open("/proc/thread-self/schedstat").ok();
        let a = read_delay(f.as_ref());
        let b = read_delay(f.as_ref());
        assert!(f.is_none() || b >= a);
    }

    #[test]
    fn the_warning_names_cpus_and_a_cause() {
        let mut l = Losses::new();
        l.add(1, 30);
        l.add(0, 5);
        assert_eq!(l.total(), 35);
        let w = l.warning(1000).expect("over 1%");
        assert!(w.contains("CPU 0: 5, CPU 1: 30"), "{w}");
        assert!(w.contains("lower -F"), "{w}");
        assert!(l.warning(1_000_000).is_none());
    }
}
