//! How long a thread has gone without a tick, from observations the
//! watcher makes after the fact. Pure bookkeeping, no system calls.
//!
//! The watcher reads a thread's tick counter whenever it wakes (a sample
//! arrived, a timer ran out), some time after the thread did whatever it
//! did, so it never knows the counter's value at a given past moment. What it
//! does know: if two reads at `a` and `b` saw the same value, there was no
//! tick in `(a, b]`. So a window opens at the first read of a value, and the
//! stall is what the clock measured from that read to the latest one: the
//! thread's CPU time (its `task-clock` count, read with the counter) or wall
//! time. That is a lower bound: the stall began at the last tick, somewhere
//! before the window opened (at most one watcher wake-up earlier). Delays and
//! batching of the watcher only make bounds smaller; they never turn a
//! thread that ticks into a reported stall.
//!
//! A value with the low bit set means the thread said it is idle (waiting
//! for work), which ends any stall as a tick does.

/// What an observation means for the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to report.
    Quiet,
    /// Stalled for `stalled_ns` so far; another threshold has passed.
    Report {
        /// Lower bound of the stall so far.
        stalled_ns: u64,
    },
    /// A stall that was reported is over; `stalled_ns` is its last bound.
    Ended {
        /// Lower bound of the whole stall.
        stalled_ns: u64,
    },
}

/// One thread's window without a tick.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    value: u64,
    /// When the window opened (CLOCK_MONOTONIC ns).
    since: u64,
    /// The clock's reading when it opened.
    base: u64,
    /// Stall bound at the last observation.
    stalled_ns: u64,
    /// Thresholds passed so far in this window.
    reports: u64,
}

impl Window {
    /// A window opened by a first read of `value` at `now`, when the clock
    /// read `measure`.
    pub(crate) fn new(value: u64, now: u64, measure: u64) -> Self {
        Window {
            value,
            since: now,
            base: measure,
            stalled_ns: 0,
            reports: 0,
        }
    }

    /// When the window opened: samples taken after this show the stall.
    pub(crate) fn since(&self) -> u64 {
        self.since
    }

    /// Whether a stall in this window has been reported (so its end is news).
    pub(crate) fn reported(&self) -> bool {
        self.reports > 0
    }

    /// The counter read `value` at `now` (CLOCK_MONOTONIC ns), with the
    /// stall clock reading `measure` ns (CPU time of the thread, or `now`).
    pub(crate) fn observe(
        &mut self,
        value: u64,
        now: u64,
        measure: u64,
        threshold_ns: u64,
    ) -> Verdict {
        if value != self.value || value & 1 == 1 {
            let v = if self.reports > 0 {
                Verdict::Ended {
                    stalled_ns: self.stalled_ns,
                }
            } else {
                Verdict::Quiet
            };
            *self = Window::new(value, now, measure);
            return v;
        }
        let stalled_ns = measure.saturating_sub(self.base);
        self.stalled_ns = stalled_ns;
        let passed = stalled_ns / threshold_ns.max(1);
        if passed > self.reports {
            self.reports = passed;
            Verdict::Report { stalled_ns }
        } else {
            Verdict::Quiet
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn reports_once_per_threshold_then_ends() {
        // CPU clock: the measure advances only while the thread runs.
        let mut w = Window::new(2, 0, 500 * MS);
        assert_eq!(w.observe(2, 50 * MS, 560 * MS, 100 * MS), Verdict::Quiet);
        assert_eq!(
            w.observe(2, 120 * MS, 610 * MS, 100 * MS),
            Verdict::Report {
                stalled_ns: 110 * MS
            }
        );
        assert_eq!(w.observe(2, 180 * MS, 690 * MS, 100 * MS), Verdict::Quiet);
        // Two thresholds at once give one report.
        assert_eq!(
            w.observe(2, 400 * MS, 930 * MS, 100 * MS),
            Verdict::Report {
                stalled_ns: 430 * MS
            }
        );
        assert!(w.reported());
        assert_eq!(
            w.observe(4, 410 * MS, 935 * MS, 100 * MS),
            Verdict::Ended {
                stalled_ns: 430 * MS
            }
        );
        assert!(!w.reported());
        assert_eq!(w.since(), 410 * MS);
    }

    #[test]
    fn reads_that_see_ticks_never_accumulate() {
        // A thread that ticks every 10 ms, read rarely (the watcher was
        // away): each read sees a new value, so nothing adds up.
        let mut w = Window::new(0, 0, 0);
        for i in 1..50u64 {
            let v = w.observe(i * 2, i * 500 * MS, i * 500 * MS, 100 * MS);
            assert_eq!(v, Verdict::Quiet);
        }
    }

    #[test]
    fn idle_ends_a_stall_and_stays_quiet() {
        let mut w = Window::new(2, 0, 0);
        assert_eq!(
            w.observe(2, 250 * MS, 250 * MS, 100 * MS),
            Verdict::Report {
                stalled_ns: 250 * MS
            }
        );
        assert_eq!(
            w.observe(3, 300 * MS, 300 * MS, 100 * MS),
            Verdict::Ended {
                stalled_ns: 250 * MS
            }
        );
        assert_eq!(w.observe(3, 900 * MS, 900 * MS, 100 * MS), Verdict::Quiet);
        assert!(!w.reported());
    }
}
