//! The per-function comparison of two sides: shares and CPU times per run,
//! their changes with intervals, verdicts, the gate, ordering, filtering;
//! and the call paths whose time grew (found by `paths`, judged here).
//! It owns what a function's self and total weight are for folded stacks
//! (the same definition as `crate::profile` uses for recordings, over the
//! program's samples: see `tally`) and does no I/O.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};

use super::paths::PathTree;
use super::stats::{Interval, Noise};
use super::tally::{Tallied, Tally, Weights};
use super::{Side, SideKind};

/// A function's shares of one side's program samples, in percent (0–100).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Shares {
    /// Weight of samples whose leaf is the function.
    pub self_pct: f64,
    /// Weight of samples with the function anywhere in the stack, each counted once.
    pub total_pct: f64,
}

/// A function's CPU time on one side: the mean over the side's runs, in
/// nanoseconds (blocked nanoseconds for off-CPU recordings).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Times {
    /// Time in samples whose leaf is the function.
    pub self_ns: f64,
    /// Time in samples with the function anywhere in the stack.
    pub total_ns: f64,
}

/// What the comparison concluded for one function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its total time (its total share when the sides have no time) grew by
    /// more than noise explains.
    Grew,
    /// It shrank by more than noise explains.
    Shrank,
    /// Within the interval noise alone gives.
    Noise,
}

impl Verdict {
    /// The word used in the JSON and the Markdown report.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Grew => "grew",
            Verdict::Shrank => "shrank",
            Verdict::Noise => "noise",
        }
    }
}

/// How one function changed from BASE to NEW.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDiff {
    /// Function name as in folded text.
    pub name: String,
    /// Module basename, or empty when unknown (folded text).
    pub module: String,
    /// Shares in BASE (of all its runs' program samples).
    pub base: Shares,
    /// Shares in NEW.
    pub new: Shares,
    /// `new.self_pct - base.self_pct`, in percentage points.
    pub self_delta_pct: f64,
    /// `new.total_pct - base.total_pct`, in percentage points.
    pub total_delta_pct: f64,
    /// Mean time per run in BASE, when both sides have time.
    pub base_time: Option<Times>,
    /// Mean time per run in NEW, when both sides have time.
    pub new_time: Option<Times>,
    /// Change of the total time in percent, with its 99% interval.
    pub time_change: Option<Interval>,
    /// Change of the total share in points, with its 99% interval.
    pub share_change: Interval,
    /// Grew, shrank or noise: by time when both sides have it, else by share.
    pub verdict: Verdict,
    /// The smallest total-time growth (percent) the gate catches four times
    /// in five for this function, given the time threshold (0 without one).
    pub detectable_time_pct: Option<f64>,
    /// The same for total share, in points.
    pub detectable_share_pts: f64,
    /// Which gate this function trips, if any.
    pub trips: Option<Trip>,
}

/// Which threshold a function crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trip {
    /// Its total time grew beyond noise and above `--fail-time-above`.
    Time,
    /// Its total share grew beyond noise and above `--fail-above`.
    Share,
}

impl FunctionDiff {
    /// In NEW but not in BASE.
    pub fn is_new(&self) -> bool {
        self.base.total_pct == 0.0 && self.new.total_pct > 0.0
    }

    /// In BASE but not in NEW.
    pub fn vanished(&self) -> bool {
        self.new.total_pct == 0.0 && self.base.total_pct > 0.0
    }

    /// What makes functions indistinguishable in a report: the same self
    /// and total weight on both sides (a chain of callers such as `_start`,
    /// `main`, … that every sample passes through together).
    fn same_samples_key(&self) -> [u64; 4] {
        [
            self.base.self_pct.to_bits(),
            self.base.total_pct.to_bits(),
            self.new.self_pct.to_bits(),
            self.new.total_pct.to_bits(),
        ]
    }

    /// Added total time per run in nanoseconds (NEW − BASE), when known.
    pub fn added_ns(&self) -> Option<f64> {
        Some(self.new_time?.total_ns - self.base_time?.total_ns)
    }

    /// Self time per run NEW minus BASE, when both sides have time.
    pub fn added_self_ns(&self) -> Option<f64> {
        Some(self.new_time?.self_ns - self.base_time?.self_ns)
    }
}

/// The gate's thresholds. A function trips it when its change is outside
/// its interval *and* above the threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gate {
    /// `--fail-above`: growth of total share, in points.
    pub share_pts: Option<f64>,
    /// `--fail-time-above`: growth of total time, in percent.
    pub time_pct: Option<f64>,
}

impl Gate {
    /// Whether any threshold is set.
    pub fn is_set(&self) -> bool {
        self.share_pts.is_some() || self.time_pct.is_some()
    }
}

/// How to compare.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffOptions {
    /// Count samples in interrupt context as the program's.
    pub keep_interrupts: bool,
    /// The run-to-run spread of the program's time assumed when no side has
    /// two runs, as a fraction (0.05 = 5%).
    pub assumed_run_spread: f64,
    /// The gate.
    pub gate: Gate,
}

/// The default assumed run-to-run spread of a CPU-bound program's time: 5%.
pub const DEFAULT_RUN_SPREAD: f64 = 0.05;

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            keep_interrupts: false,
            assumed_run_spread: DEFAULT_RUN_SPREAD,
            gate: Gate::default(),
        }
    }
}

/// The whole program's time on both sides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProgramTime {
    /// Mean CPU time per run of BASE's program samples, ns.
    pub base_ns: f64,
    /// The same for NEW.
    pub new_ns: f64,
    /// Its change in percent, with its 99% interval.
    pub change: Interval,
}

/// Two profiles compared function by function, and by call path.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Total weight of BASE, all runs, in `weight_unit` (samples, or
    /// blocked nanoseconds for off-CPU recordings): not a count of samples
    /// unless the unit says so.
    pub base_weight: u64,
    /// Total weight of NEW, in `weight_unit`.
    pub new_weight: u64,
    /// What a unit of weight is: `samples`, or `ns` (time blocked, off-CPU).
    pub weight_unit: String,
    /// Runs compared on each side.
    pub base_runs: usize,
    /// Runs of NEW.
    pub new_runs: usize,
    /// Share of each side's weight taken in interrupt context (percent),
    /// left out of the functions (0 with `keep_interrupts`).
    pub base_interrupt_pct: f64,
    /// The same for NEW.
    pub new_interrupt_pct: f64,
    /// The program's time, when both sides have time.
    pub time: Option<ProgramTime>,
    /// The noise this comparison measured or assumed.
    pub noise: Noise,
    /// The gate it was judged by.
    pub gate: Gate,
    /// What the reader should know about the method's inputs (one run per
    /// side, no time, different frequencies), one sentence each.
    pub notes: Vec<String>,
    /// Every function of either side, largest total change first (then
    /// largest self change, name, module).
    pub functions: Vec<FunctionDiff>,
    /// The call paths whose time (share, without time) grew beyond noise,
    /// each the shortest that carries its change, largest growth first.
    pub paths: Vec<PathDiff>,
}

/// A call path whose time grew beyond noise: the samples whose stack ends
/// with `frames`, compared like a function's total.
#[derive(Debug, Clone, PartialEq)]
pub struct PathDiff {
    /// Outermost caller first, the frame where the time went last.
    pub frames: Vec<String>,
    /// Share of BASE's program samples, percent.
    pub base_pct: f64,
    /// Share of NEW's program samples, percent.
    pub new_pct: f64,
    /// Mean time per run in BASE, ns, when both sides have time.
    pub base_ns: Option<f64>,
    /// Mean time per run in NEW, ns.
    pub new_ns: Option<f64>,
    /// Change of its time in percent, with its 99% interval.
    pub time_change: Option<Interval>,
    /// Change of its share in points, with its 99% interval.
    pub share_change: Interval,
}

impl PathDiff {
    /// `caller → … → leaf`.
    pub fn name(&self) -> String {
        self.frames.join(" → ")
    }

    /// Whether `function` is one of its frames.
    pub fn contains(&self, function: &str) -> bool {
        self.frames.iter().any(|f| f == function)
    }

    /// Added time per run in ns (NEW − BASE), when known.
    pub fn added_ns(&self) -> Option<f64> {
        Some(self.new_ns? - self.base_ns?)
    }

    fn growth(&self) -> f64 {
        self.added_ns().unwrap_or(self.share_change.estimate)
    }
}

/// One thing the gate names: a tripped function, or the call path that
/// carries its growth.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding<'a> {
    /// The first function of the tripped group.
    pub function: &'a FunctionDiff,
    /// Its name.
    pub name: String,
    /// How many more functions have the same samples.
    pub more: usize,
    /// The grown call path through it, named instead when there is one.
    pub path: Option<&'a PathDiff>,
}

impl Diff {
    /// Compares `new` against `base` with the default options and no gate.
    pub fn new(base: &Side, new: &Side) -> Diff {
        Diff::compare(base, new, &DiffOptions::default())
    }

    /// Compares `new` against `base`.
    pub fn compare(base: &Side, new: &Side, opts: &DiffOptions) -> Diff {
        let b = Tallied::new(base, opts.keep_interrupts);
        let n = Tallied::new(new, opts.keep_interrupts);
        let timed = b.ns_per_weight.is_some() && n.ns_per_weight.is_some();

        let names: BTreeSet<&String> = b
            .runs
            .iter()
            .chain(&n.runs)
            .flat_map(|t| t.functions.keys())
            .collect();
        let names: Vec<&String> = names.into_iter().collect();
        let all_runs: Vec<&[(String, u64)]> = base
            .runs
            .iter()
            .chain(&new.runs)
            .map(|r| r.stacks.as_slice())
            .collect();
        let tree = PathTree::new(&all_runs, opts.keep_interrupts);
        let (b_runs, n_runs) = (0..b.runs.len(), b.runs.len()..all_runs.len());
        let noise = Noise::measure(
            [
                &b.side_runs(&tree, b_runs.clone()),
                &n.side_runs(&tree, n_runs.clone()),
            ],
            opts.assumed_run_spread,
        );
        let labels = module_labels([base, new]);

        let sum = |w: &[u64]| w.iter().fold(0u64, |a, x| a.saturating_add(*x));
        let (bp, np) = (sum(&b.program), sum(&n.program));
        let time = timed.then(|| ProgramTime {
            base_ns: b.time_of(&b.program).unwrap_or(0.0),
            new_ns: n.time_of(&n.program).unwrap_or(0.0),
            change: noise.time_change(&b.counts(&b.program), &n.counts(&n.program)),
        });

        let mut functions: Vec<FunctionDiff> = names
            .iter()
            .map(|name| {
                let self_w = |t: &Tally| weights(t, name).self_w;
                let total_w = |t: &Tally| weights(t, name).total_w;
                let (b_self, b_total) = (b.per_run(&self_w), b.per_run(&total_w));
                let (n_self, n_total) = (n.per_run(&self_w), n.per_run(&total_w));
                let b_shares = shares(sum(&b_self), sum(&b_total), bp);
                let n_shares = shares(sum(&n_self), sum(&n_total), np);
                let (bc, nc) = (b.counts(&b_total), n.counts(&n_total));
                let times = |s: &Tallied, own: &[u64], total: &[u64]| -> Option<Times> {
                    Some(Times {
                        self_ns: s.time_of(own)?,
                        total_ns: s.time_of(total)?,
                    })
                };
                let time_change = timed.then(|| noise.time_change(&bc, &nc));
                let share_change = noise.share_change(&bc, &nc);
                let decisive = time_change.unwrap_or(share_change);
                let verdict = if decisive.grew() {
                    Verdict::Grew
                } else if decisive.shrank() {
                    Verdict::Shrank
                } else {
                    Verdict::Noise
                };
                let trips = trip(&opts.gate, time_change.as_ref(), &share_change);
                FunctionDiff {
                    name: (*name).clone(),
                    module: labels.get(name.as_str()).cloned().unwrap_or_default(),
                    base: b_shares,
                    new: n_shares,
                    self_delta_pct: n_shares.self_pct - b_shares.self_pct,
                    total_delta_pct: n_shares.total_pct - b_shares.total_pct,
                    base_time: if timed {
                        times(&b, &b_self, &b_total)
                    } else {
                        None
                    },
                    new_time: if timed {
                        times(&n, &n_self, &n_total)
                    } else {
                        None
                    },
                    time_change,
                    share_change,
                    verdict,
                    detectable_time_pct: timed
                        .then(|| noise.detectable_time(&bc, opts.gate.time_pct.unwrap_or(0.0))),
                    detectable_share_pts: noise.detectable_share(
                        &bc,
                        nc.program,
                        opts.gate.share_pts.unwrap_or(0.0),
                    ),
                    trips,
                }
            })
            .collect();
        functions.sort_by(|a, b| {
            desc(a.total_delta_pct.abs(), b.total_delta_pct.abs())
                .then_with(|| desc(a.self_delta_pct.abs(), b.self_delta_pct.abs()))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.module.cmp(&b.module))
        });

        // A path grew as a function does: by time when both sides have it.
        let judge = |bw: &[u64], nw: &[u64]| {
            let (bc, nc) = (b.counts(bw), n.counts(nw));
            let time_change = timed.then(|| noise.time_change(&bc, &nc));
            (time_change, noise.share_change(&bc, &nc))
        };
        let grew = |bw: &[u64], nw: &[u64]| {
            let (time, share) = judge(bw, nw);
            time.unwrap_or(share).grew()
        };
        let mut paths: Vec<PathDiff> = tree
            .grown(b_runs.clone(), n_runs.clone(), &grew)
            .into_iter()
            .map(|node| {
                let (bw, nw) = (
                    tree.weights(node, b_runs.clone()),
                    tree.weights(node, n_runs.clone()),
                );
                let (time_change, share_change) = judge(&bw, &nw);
                PathDiff {
                    frames: tree.frames(node),
                    base_pct: pct(sum(&bw), bp),
                    new_pct: pct(sum(&nw), np),
                    base_ns: if timed { b.time_of(&bw) } else { None },
                    new_ns: if timed { n.time_of(&nw) } else { None },
                    time_change,
                    share_change,
                }
            })
            .collect();
        paths.sort_by(|a, b| desc(a.growth(), b.growth()).then_with(|| a.frames.cmp(&b.frames)));

        let (bt, nt) = (base.total(), new.total());
        let machine = |s: &Tallied| sum(&s.per_run(&|t| t.machine));
        Diff {
            base_weight: bt,
            new_weight: nt,
            weight_unit: base.weight_unit.clone(),
            base_runs: base.runs.len(),
            new_runs: new.runs.len(),
            base_interrupt_pct: pct(machine(&b), bt),
            new_interrupt_pct: pct(machine(&n), nt),
            time,
            noise,
            gate: opts.gate,
            notes: notes(base, new, timed, &noise, opts),
            functions,
            paths,
        }
    }

    /// The call path that names `function` best in a finding: the largest
    /// grown path through it, if any.
    pub fn path_of(&self, function: &str) -> Option<&PathDiff> {
        self.paths.iter().find(|p| p.contains(function))
    }

    /// What the gate names, in the order of [`Diff::tripped`]: each group of
    /// tripped functions with the same samples (a chain of callers is one),
    /// by the grown call path through it when there is one (`compute_hash →
    /// work` rather than `compute_hash`), a path that carries several
    /// groups named once.
    pub fn findings(&self) -> Vec<Finding<'_>> {
        let tripped = self.tripped();
        let mut out: Vec<Finding> = Vec::new();
        for group in same_samples_groups(&tripped) {
            let path = group.iter().find_map(|f| self.path_of(&f.name));
            if path.is_some() && out.iter().any(|f| f.path == path) {
                continue;
            }
            let (name, more) = group_name(&group);
            out.push(Finding {
                function: group[0],
                name,
                more,
                path,
            });
        }
        out
    }

    /// Leaves out functions and call paths whose total share is below `pct`
    /// on both sides.
    pub fn retain_min_share(&mut self, pct: f64) {
        self.functions
            .retain(|f| f.base.total_pct >= pct || f.new.total_pct >= pct);
        self.paths.retain(|p| p.base_pct >= pct || p.new_pct >= pct);
    }

    /// Functions that trip the gate, where the time went first (see
    /// [`by_growth`]).
    pub fn tripped(&self) -> Vec<&FunctionDiff> {
        let mut out: Vec<&FunctionDiff> = self
            .functions
            .iter()
            .filter(|f| f.trips.is_some())
            .collect();
        out.sort_by(|a, b| by_growth(b, a));
        out
    }

    /// Functions whose total share grew by more than `pct` points, largest
    /// first, whether or not the growth is beyond noise.
    pub fn grew_more_than(&self, pct: f64) -> Vec<&FunctionDiff> {
        let mut grew: Vec<&FunctionDiff> = self
            .functions
            .iter()
            .filter(|f| f.total_delta_pct > pct)
            .collect();
        grew.sort_by(|a, b| desc(a.total_delta_pct, b.total_delta_pct));
        grew
    }
}

/// `fs` in groups of functions with the same samples on both sides, in
/// the order each group first appears, each group in name order (shortest
/// first): a report shows a group as one row.
pub fn same_samples_groups<'a>(fs: &[&'a FunctionDiff]) -> Vec<Vec<&'a FunctionDiff>> {
    let mut index: HashMap<[u64; 4], usize> = HashMap::new();
    let mut groups: Vec<Vec<&FunctionDiff>> = Vec::new();
    for f in fs {
        let i = *index.entry(f.same_samples_key()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[i].push(f);
    }
    for g in &mut groups {
        g.sort_by(|a, b| (a.name.len(), &a.name).cmp(&(b.name.len(), &b.name)));
    }
    groups
}

/// A group's name: its first function, and how many more share its samples.
pub fn group_name(group: &[&FunctionDiff]) -> (String, usize) {
    (
        group.first().map(|f| f.name.clone()).unwrap_or_default(),
        group.len().saturating_sub(1),
    )
}

/// Ascending by added time when known, else by total share change.
/// Orders by growth, the function a change happened in before the callers
/// that only contain it: added self time (self share points without time),
/// then added total time (total share), total share, name. A caller's total
/// grows with its callee's and, when the machine also slowed the rest of
/// the program a little, by more: by total alone `main` would head every
/// list a slower leaf trips.
pub(super) fn by_growth(a: &FunctionDiff, b: &FunctionDiff) -> Ordering {
    let own = |f: &FunctionDiff| f.added_self_ns().unwrap_or(f.self_delta_pct);
    let key = |f: &FunctionDiff| f.added_ns().unwrap_or(f.total_delta_pct);
    own(a)
        .partial_cmp(&own(b))
        .unwrap_or(Ordering::Equal)
        .then_with(|| key(a).partial_cmp(&key(b)).unwrap_or(Ordering::Equal))
        .then_with(|| {
            a.total_delta_pct
                .partial_cmp(&b.total_delta_pct)
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| b.name.cmp(&a.name))
}

fn trip(gate: &Gate, time: Option<&Interval>, share: &Interval) -> Option<Trip> {
    if let (Some(limit), Some(t)) = (gate.time_pct, time) {
        if t.grew() && t.estimate > limit {
            return Some(Trip::Time);
        }
    }
    match gate.share_pts {
        Some(limit) if share.grew() && share.estimate > limit => Some(Trip::Share),
        _ => None,
    }
}

fn weights(t: &Tally, name: &str) -> Weights {
    t.functions.get(name).copied().unwrap_or_default()
}

fn notes(base: &Side, new: &Side, timed: bool, noise: &Noise, opts: &DiffOptions) -> Vec<String> {
    let mut notes = Vec::new();
    if !timed {
        let why = |s: &Side| {
            s.runs
                .iter()
                .find(|r| r.ns_per_weight.is_none())
                .map(|r| match &r.event {
                    None => format!("{} is folded text", r.label),
                    Some(e) => format!("{} records {e}, which has no fixed period", r.label),
                })
        };
        let reason = why(base).or_else(|| why(new)).unwrap_or_default();
        let gate = if opts.gate.time_pct.is_some() {
            " --fail-time-above cannot apply."
        } else {
            ""
        };
        notes.push(format!(
            "{reason}: no CPU time, so shares are compared (changes in time that move every \
             function alike are invisible).{gate}"
        ));
    } else if noise.run_spread_df.is_none() {
        notes.push(format!(
            "One run per side: the spread of the program's time between runs cannot be \
             measured, so {:.1}% is assumed (--run-spread); record 3 or more runs per side \
             to measure it.",
            noise.run_spread * 100.0
        ));
    }
    let freqs: BTreeSet<u64> = base
        .runs
        .iter()
        .chain(&new.runs)
        .filter(|r| r.event.is_some())
        .map(|r| r.frequency_hz)
        .collect();
    if timed && freqs.len() > 1 {
        let list: Vec<String> = freqs.iter().map(|f| format!("{f} Hz")).collect();
        notes.push(format!(
            "The recordings sample at different frequencies ({}): times are compared in \
             nanoseconds, and the sparser ones resolve less.",
            list.join(", ")
        ));
    }
    notes
}

/// Descending order of two finite numbers.
fn desc(a: f64, b: f64) -> Ordering {
    b.partial_cmp(&a).unwrap_or(Ordering::Equal)
}

fn shares(self_w: u64, total_w: u64, total: u64) -> Shares {
    Shares {
        self_pct: pct(self_w, total),
        total_pct: pct(total_w, total),
    }
}

/// `part` in percent of `whole`, 0 when `whole` is.
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// For names that recordings among `sides` place in exactly one module, that module.
fn module_labels(sides: [&Side; 2]) -> HashMap<&str, String> {
    let mut modules: HashMap<&str, Option<&str>> = HashMap::new();
    for side in sides {
        if side.kind != SideKind::Recording {
            continue;
        }
        for f in side.functions.iter().flatten() {
            modules
                .entry(f.name.as_str())
                .and_modify(|m| {
                    if *m != Some(f.module.as_str()) {
                        *m = None;
                    }
                })
                .or_insert(Some(f.module.as_str()));
        }
    }
    modules
        .into_iter()
        .filter_map(|(name, m)| m.map(|m| (name, m.to_string())))
        .collect()
}

#[cfg(test)]
#[path = "compare_tests.rs"]
mod tests;
