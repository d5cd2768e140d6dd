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
//!
//! The longest interval between two reads is kept too, split by the
//! scheduler's figures (on a CPU, waiting for one, the rest asleep or
//! blocked) and by the loop's phases, so a loss names where the time went.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use flamerec_format::{ReadGap, Totals};

/// Where the draining loop spends a round.
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    Poll,
    Drain,
    Names,
    Write,
}

/// The losses of one recording.
pub(crate) struct Losses {
    per_cpu: BTreeMap<u32, u64>,
    total: u64,
    /// Lost in rounds where the recorder mostly waited for a CPU.
    starved: u64,
    schedstat: Option<File>,
    /// Start of the current round and the thread's scheduler figures then,
    /// and the same of the two rounds before; the oldest bounds the interval
    /// a lost record read now may describe.
    rounds: [(Instant, Sched); 3],
    /// Rounds begun.
    begun: u64,
    /// Time spent in each phase since the current round began.
    phases: [Duration; 4],
    phase_mark: Instant,
    longest: Option<ReadGap>,
    /// The gaps that ended in the last two rounds: a loss read now
    /// happened in one of them.
    recent: [Option<ReadGap>; 2],
    /// The longest of those before a round that read a loss.
    before_loss: Option<ReadGap>,
}

/// A thread's scheduler figures in ns: on a CPU, and waiting for one.
#[derive(Clone, Copy, Default)]
struct Sched {
    on_cpu: u64,
    waited: u64,
}

impl Losses {
    /// Counts for a recording drained by the calling thread (whose
    /// run-queue delay is read).
    pub(crate) fn new() -> Self {
        let schedstat = File::open("/proc/thread-self/schedstat").ok();
        let now = (Instant::now(), read_sched(schedstat.as_ref()));
        Losses {
            per_cpu: BTreeMap::new(),
            total: 0,
            starved: 0,
            schedstat,
            rounds: [now; 3],
            begun: 0,
            phases: [Duration::ZERO; 4],
            phase_mark: now.0,
            longest: None,
            recent: [None; 2],
            before_loss: None,
        }
    }

    /// Marks the start of a drain round (the rings are read now).
    pub(crate) fn begin_round(&mut self) {
        let now = (Instant::now(), read_sched(self.schedstat.as_ref()));
        let (then, sched) = self.rounds[2];
        let gap = now.0.duration_since(then);
        // The first round's interval is the set-up, not a gap between reads.
        if self.begun > 0 {
            let us = |d: Duration| d.as_micros() as u64;
            let g = ReadGap {
                gap_us: us(gap),
                on_cpu_us: now.1.on_cpu.saturating_sub(sched.on_cpu) / 1000,
                waited_us: now.1.waited.saturating_sub(sched.waited) / 1000,
                poll_us: us(self.phases[Phase::Poll as usize]),
                drain_us: us(self.phases[Phase::Drain as usize]),
                names_us: us(self.phases[Phase::Names as usize]),
                write_us: us(self.phases[Phase::Write as usize]),
            };
            self.longest = Some(longer(self.longest, g));
            self.recent.rotate_left(1);
            self.recent[1] = Some(g);
        }
        self.begun += 1;
        self.phases = [Duration::ZERO; 4];
        self.phase_mark = now.0;
        self.rounds.rotate_left(1);
        self.rounds[2] = now;
    }

    /// A phase begins now; the time since the last one ended is in none.
    pub(crate) fn phase_begins(&mut self) {
        self.phase_mark = Instant::now();
    }

    /// The loop has just finished `phase` (begun when the last phase or
    /// round ended, or at `phase_begins`).
    pub(crate) fn phase_done(&mut self, phase: Phase) {
        let now = Instant::now();
        self.phases[phase as usize] += now.duration_since(self.phase_mark);
        self.phase_mark = now;
    }

    /// `count` samples lost by the ring of `cpu`, read in the current round.
    pub(crate) fn add(&mut self, cpu: u32, count: u64) {
        *self.per_cpu.entry(cpu).or_default() += count;
        self.total += count;
        for g in self.recent.into_iter().flatten() {
            self.before_loss = Some(longer(self.before_loss, g));
        }
        let [(since, then), _, (now, sched)] = self.rounds;
        let interval = now.duration_since(since).as_nanos() as u64;
        let waited = sched.waited.saturating_sub(then.waited);
        if waited.saturating_mul(2) > interval {
            self.starved += count;
        }
    }

    /// Lost by the ring of `cpu` so far.
    pub(crate) fn of_cpu(&self, cpu: u32) -> u64 {
        self.per_cpu.get(&cpu).copied().unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Stores the counts in the trailer's totals.
    pub(crate) fn fill(&self, totals: &mut Totals) {
        totals.lost_samples = self.total;
        totals.lost_per_cpu = self.per_cpu.iter().map(|(&c, &n)| (c, n)).collect();
        totals.lost_starved = self.starved;
        totals.longest_read_gap = self.longest;
        totals.read_gap_before_loss = self.before_loss;
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

/// The longer of `a` and `b`.
fn longer(a: Option<ReadGap>, b: ReadGap) -> ReadGap {
    match a {
        Some(a) if a.gap_us >= b.gap_us => a,
        _ => b,
    }
}

/// The thread's total time on a CPU and run-queue wait in ns (zeros when
/// schedstat is unavailable).
fn read_sched(f: Option<&File>) -> Sched {
    let Some(f) = f else {
        return Sched::default();
    };
    let mut buf = [0u8; 96];
    let n = f.read_at(&mut buf, 0).unwrap_or(0);
    let mut fields = std::str::from_utf8(&buf[..n])
        .unwrap_or("")
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0));
    Sched {
        on_cpu: fields.next().unwrap_or(0),
        waited: fields.next().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_gives_time_on_a_cpu_and_waiting_for_one() {
        let f = File::open("/proc/thread-self/schedstat").ok();
        let a = read_sched(f.as_ref());
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_millis(20) {}
        let b = read_sched(f.as_ref());
        assert!(f.is_none() || b.waited >= a.waited);
        // 20 ms of spinning is on a CPU or waiting for one, but for the time
        // interrupts and the host (steal) take, which is counted in neither:
        // half of it is a margin no loaded machine here came near.
        assert!(
            f.is_none() || (b.on_cpu - a.on_cpu) + (b.waited - a.waited) >= 10_000_000,
            "{} + {}",
            b.on_cpu - a.on_cpu,
            b.waited - a.waited
        );
    }

    #[test]
    fn the_longest_gap_keeps_its_phases() {
        let mut l = Losses::new();
        l.begin_round();
        std::thread::sleep(Duration::from_millis(30));
        l.phase_done(Phase::Write);
        l.phase_done(Phase::Poll);
        l.begin_round();
        l.phase_done(Phase::Drain);
        l.begin_round();
        assert!(l.before_loss.is_none());
        l.add(0, 3);
        assert_eq!(
            l.before_loss, l.longest,
            "the loss was read after the long gap"
        );
        let g = l.longest.expect("two gaps");
        assert!(g.gap_us >= 30_000, "{g:?}");
        assert!(g.write_us >= 30_000 && g.write_us <= g.gap_us, "{g:?}");
        // Asleep, not on a CPU.
        assert!(g.on_cpu_us < 25_000, "{g:?}");
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
