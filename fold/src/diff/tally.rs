//! One run's numbers for the comparison: per function self and total
//! weight, the program's weight, and the weight of samples the machine took
//! (interrupt context); and a side's runs tallied together with what turns
//! their weights into samples and time ([`Tallied`]). It owns the rule that tells the machine's samples
//! from the program's and does no I/O.
//!
//! # The machine's samples
//!
//! A CPU-clock sample that lands while an interrupt is handled on the
//! program's thread — the timer tick, a reschedule or call-function IPI, a
//! device interrupt — and the preemption on the way out of it (`schedule`
//! under `irqentry_exit_to_user_mode`) shows what the machine was doing to
//! the program, not what the program did: their number grows with the
//! machine's load. Such a sample is recognised by an interrupt-entry frame
//! anywhere in its stack ([`is_interrupt_entry`], in `interrupts`) and counted apart: it
//! belongs to no function and to neither the program's time nor its
//! shares. `diff --keep-interrupts` counts them as ordinary samples.

use rustc_hash::FxHashMap as HashMap;

use super::interrupts::is_interrupt_entry;
use super::paths::{PathTree, MAX_PATH_FRAMES};
use super::stats::{Counts, SideRuns};
use super::Side;

/// Self and total weight of one function in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Weights {
    pub self_w: u64,
    pub total_w: u64,
}

/// One run, tallied.
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    /// Weight of the program's samples.
    pub program: u64,
    /// Weight of samples in interrupt context.
    pub machine: u64,
    /// Per function name, over the program's samples.
    pub functions: HashMap<String, Weights>,
}

/// Tallies folded stacks (`root;frame;...;leaf`, the root not a function).
/// With `keep_interrupts`, samples in interrupt context count as the
/// program's.
pub(super) fn tally(stacks: &[(String, u64)], keep_interrupts: bool) -> Tally {
    let mut out = Tally::default();
    let mut frames: Vec<&str> = Vec::new();
    for (line, weight) in stacks {
        frames.clear();
        frames.extend(line.split(';').skip(1));
        if !keep_interrupts && frames.iter().any(|f| is_interrupt_entry(f)) {
            out.machine = out.machine.saturating_add(*weight);
            continue;
        }
        out.program = out.program.saturating_add(*weight);
        let Some(&leaf) = frames.last() else {
            continue;
        };
        entry(&mut out.functions, leaf).self_w = entry(&mut out.functions, leaf)
            .self_w
            .saturating_add(*weight);
        // Each sample counts once per function, however often it recurs.
        frames.sort_unstable();
        frames.dedup();
        for f in &frames {
            let e = entry(&mut out.functions, f);
            e.total_w = e.total_w.saturating_add(*weight);
        }
    }
    out
}

fn entry<'a>(map: &'a mut HashMap<String, Weights>, name: &str) -> &'a mut Weights {
    if !map.contains_key(name) {
        map.insert(name.to_string(), Weights::default());
    }
    map.get_mut(name).expect("inserted above")
}

/// One side, tallied per run.
pub(super) struct Tallied {
    pub runs: Vec<Tally>,
    /// The program's weight in each run.
    pub program: Vec<u64>,
    /// Effective samples per unit of weight, per run.
    pub samples_per_weight: Vec<f64>,
    /// Nanoseconds per unit of weight, per run (`None`: no time).
    pub ns_per_weight: Option<Vec<f64>>,
}

impl Tallied {
    pub fn new(side: &Side, keep_interrupts: bool) -> Tallied {
        let runs: Vec<Tally> = side
            .runs
            .iter()
            .map(|r| tally(&r.stacks, keep_interrupts))
            .collect();
        let samples_per_weight = side
            .runs
            .iter()
            .map(|r| {
                let w = r.weight();
                if w == 0 {
                    1.0
                } else {
                    r.samples.max(1) as f64 / w as f64
                }
            })
            .collect();
        let ns_per_weight = side.runs.iter().map(|r| r.ns_per_weight).collect();
        Tallied {
            program: runs.iter().map(|t| t.program).collect(),
            runs,
            samples_per_weight,
            ns_per_weight,
        }
    }

    /// `f` of each run.
    pub fn per_run(&self, f: &dyn Fn(&Tally) -> u64) -> Vec<u64> {
        self.runs.iter().map(f).collect()
    }

    /// Effective samples of per-run weights `w`, summed over the runs.
    pub fn samples_of(&self, w: &[u64]) -> f64 {
        w.iter()
            .zip(&self.samples_per_weight)
            .map(|(w, s)| *w as f64 * s)
            .sum()
    }

    /// Mean time per run of per-run weights `w`, in ns.
    pub fn time_of(&self, w: &[u64]) -> Option<f64> {
        let ns = self.ns_per_weight.as_ref()?;
        let sum: f64 = w.iter().zip(ns).map(|(w, n)| *w as f64 * n).sum();
        Some(sum / self.runs.len().max(1) as f64)
    }

    pub fn counts(&self, w: &[u64]) -> Counts {
        let program = self.samples_of(&self.program);
        let ns_per_sample = match self.time_of(&self.program) {
            Some(t) if program > 0.0 => t * self.runs.len() as f64 / program,
            _ => 1.0,
        };
        Counts {
            function: self.samples_of(w),
            program,
            runs: self.runs.len() as f64,
            ns_per_sample,
        }
    }

    /// The per-run numbers [`Noise::measure`] needs: the program's totals,
    /// and the samples split by leaf, then by call paths of 2, 3, … frames
    /// (runs `range` of `tree`).
    pub fn side_runs(&self, tree: &PathTree, range: std::ops::Range<usize>) -> SideRuns {
        let totals = self
            .program
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let samples = w as f64 * self.samples_per_weight[i];
                let time = match &self.ns_per_weight {
                    Some(ns) => w as f64 * ns[i],
                    None => samples,
                };
                (time, samples)
            })
            .collect();
        let partitions = (1..=MAX_PATH_FRAMES)
            .map(|depth| {
                tree.partition(depth, range.clone())
                    .iter()
                    .map(|runs| {
                        runs.iter()
                            .zip(&self.samples_per_weight)
                            .map(|(w, s)| *w as f64 * s)
                            .collect()
                    })
                    .collect()
            })
            .collect();
        SideRuns { totals, partitions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::folded::test_stacks as stacks;

    #[test]
    fn samples_in_interrupt_context_are_the_machines() {
        let s = stacks(
            "p;main;work 90\n\
             p;main;work;asm_sysvec_reschedule_ipi;irqentry_exit_to_user_mode;schedule 6\n\
             p;main;read;entry_SYSCALL_64;asm_common_interrupt;handle_irq 2\n\
             p;main;work;asm_exc_page_fault;handle_mm_fault 2",
        );
        let t = tally(&s, false);
        assert_eq!((t.program, t.machine), (92, 8));
        assert_eq!(
            t.functions["work"],
            Weights {
                self_w: 90,
                total_w: 92
            }
        );
        assert_eq!(t.functions["main"].total_w, 92);
        assert!(!t.functions.contains_key("schedule"));
        assert!(!t.functions.contains_key("read"));
        assert_eq!(t.functions["handle_mm_fault"].self_w, 2);

        let kept = tally(&s, true);
        assert_eq!((kept.program, kept.machine), (100, 0));
        assert_eq!(kept.functions["schedule"].self_w, 6);
        assert_eq!(kept.functions["work"].total_w, 98);
    }

    #[test]
    fn recursion_counts_each_sample_once_and_the_root_is_no_function() {
        let t = tally(&stacks("p;f;f;g;f 3\np 1"), false);
        assert_eq!(t.program, 4);
        assert_eq!(
            t.functions["f"],
            Weights {
                self_w: 3,
                total_w: 3
            }
        );
        assert_eq!(
            t.functions["g"],
            Weights {
                self_w: 0,
                total_w: 3
            }
        );
        assert!(!t.functions.contains_key("p"));
    }
}
