//! The statistics of the gate: how far a function's CPU time and share can
//! move between BASE and NEW by noise alone. The method is described in
//! docs/DESIGN.md (`flamerec diff`, "How the gate tells change from noise");
//! this module holds its arithmetic and nothing else: no names, no I/O.
//!
//! A function's time on a side is its share of the program's samples times
//! the program's time. The two parts carry different noise:
//!
//! - **the share** is binomial: which of the program's samples land in the
//!   function is a draw per sample. Several runs per side show whether the
//!   runs' shares spread more than binomial draws would: Pearson's χ² of
//!   each side's runs × categories table (each sample falls in exactly one
//!   category, so they split the samples as a multinomial draw; categories
//!   with fewer than 30 samples a run are one column), over its degrees of
//!   freedom, pooled over the sides, is the *dispersion* φ ≥ 1 that scales
//!   every share's variance. The categories are the leaf functions; when
//!   they give fewer than two columns (one leaf holds the samples), the
//!   call paths ending in the leaf, one caller longer at each try
//!   ([`Partition`]). With one run per side, or one category at every
//!   depth, φ cannot be measured and [`ASSUMED_DISPERSION`] is used.
//! - **the program's time** moves with the machine (other tenants, cache and
//!   frequency effects): the same work takes a little more or less CPU from
//!   one run to the next, uniformly across functions. Its variance between
//!   runs, c², is measured from the spread of the runs' total times within
//!   each side (pooled, with `Σ (runs − 1)` degrees of freedom); with one run
//!   per side it cannot be measured and an assumed spread is used instead.
//!
//! The log of a function's time ratio then has variance
//! `φ·[(1−p_b)/n_b + (1−p_n)/n_n] + c²·(1/k_b + 1/k_n) + 1/N_b + 1/N_n`
//! (n: the function's samples, N: the program's, k: runs, p: shares), and its
//! interval uses Student's t with Welch–Satterthwaite degrees of freedom
//! (c² and φ are estimated from few values). Share changes use the binomial
//! variance times φ, with Student's t on φ's degrees of freedom when φ was
//! measured above 1 and the normal quantile otherwise. Every interval is
//! two-sided 99%.

/// Two-sided confidence of every interval, in percent.
pub const CONFIDENCE_PCT: f64 = 99.0;

/// Normal quantile for [`CONFIDENCE_PCT`] (0.995 one-sided).
const Z: f64 = 2.575_829_303_549;

/// One-sided normal quantile of 80% power: a change this many standard errors
/// beyond the detection limit is caught four times in five.
const Z_POWER: f64 = 0.841_621_233_573;

/// Student's t quantiles at 0.995 for 1 to 30 degrees of freedom.
const T_995: [f64; 30] = [
    63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055, 3.012,
    2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797, 2.787, 2.779,
    2.771, 2.763, 2.756, 2.750,
];

/// Degrees of freedom the assumed run spread (`--run-spread`) counts for
/// when the runs measure it: one run's worth.
pub const SPREAD_PRIOR_DF: f64 = 1.0;

/// The dispersion assumed when it cannot be measured (no side has two runs,
/// or one call path holds nearly every sample): identical
/// runs of cpu-mix beside two busy loops measured 1.1–1.7, and with φ = 1 an
/// A/A comparison of single runs tripped on a leaf's share in 2 of 66 pairs.
pub const ASSUMED_DISPERSION: f64 = 2.0;

/// Samples a function needs on a side, per run, before its runs' shares count
/// toward the dispersion: fewer are dominated by the rounding of whole samples.
const DISPERSION_MIN_SAMPLES: f64 = 30.0;

/// The quantile of Student's t at 0.995 for `df` degrees of freedom: the
/// table up to 30 (linear in 1/df between entries), a Cornish–Fisher
/// expansion above, the normal quantile for infinity.
pub fn t_quantile(df: f64) -> f64 {
    if !df.is_finite() || df > 1e6 {
        return Z;
    }
    let df = df.max(1.0);
    if df <= 30.0 {
        let lo = df.floor();
        let hi = df.ceil();
        let q_lo = T_995[lo as usize - 1];
        if lo == hi {
            return q_lo;
        }
        let q_hi = T_995[hi as usize - 1];
        let w = (1.0 / lo - 1.0 / df) / (1.0 / lo - 1.0 / hi);
        return q_lo + w * (q_hi - q_lo);
    }
    let z = Z;
    let (z3, z5) = (z.powi(3), z.powi(5));
    z + (z3 + z) / (4.0 * df) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
}

/// An estimate with its two-sided 99% interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// The point estimate.
    pub estimate: f64,
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

impl Interval {
    /// The whole interval is above zero: a growth noise does not explain.
    pub fn grew(&self) -> bool {
        self.low > 0.0
    }

    /// The whole interval is below zero.
    pub fn shrank(&self) -> bool {
        self.high < 0.0
    }
}

/// What the dispersion was measured over, or why it could not be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispersionBasis {
    /// The leaf functions: each sample counted in the function it was in.
    Leaves,
    /// The call paths of this many frames ending in the leaf (2: caller →
    /// leaf), because the leaves gave fewer than two categories.
    CallPaths(usize),
    /// Not measured: no side has two runs.
    OneRun,
    /// Not measured: every depth of call path puts (nearly) all samples in
    /// one category, so the runs have nothing to split.
    OneCategory,
}

/// The noise of one comparison, measured (or assumed) once for all functions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Noise {
    /// Over-dispersion φ ≥ 1 of the shares between runs ([`ASSUMED_DISPERSION`]
    /// when it cannot be measured: see `basis`).
    pub dispersion: f64,
    /// Degrees of freedom of `dispersion`, or `None` when it was not
    /// measured.
    pub dispersion_df: Option<f64>,
    /// What `dispersion` was measured over, or why it was assumed.
    pub basis: DispersionBasis,
    /// The program's time spread between runs of a side, as a coefficient of
    /// variation (0.02 = 2%).
    pub run_spread: f64,
    /// Degrees of freedom of `run_spread`, or `None` when it was assumed
    /// (one run per side).
    pub run_spread_df: Option<f64>,
}

/// What one side knows of one function: its samples summed over the side's
/// runs, and the program's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counts {
    /// The function's samples (effective: weight over mean sample weight).
    pub function: f64,
    /// The program's samples.
    pub program: f64,
    /// Runs on the side.
    pub runs: f64,
    /// CPU time one sample stands for, in nanoseconds (1 when the side has
    /// no time: then "time" is samples).
    pub ns_per_sample: f64,
}

impl Counts {
    /// Mean time per run, half a sample when absent.
    fn time_per_run(&self) -> f64 {
        self.function.max(0.5) * self.ns_per_sample / self.runs.max(1.0)
    }

    fn share(&self) -> f64 {
        if self.program > 0.0 {
            self.function / self.program
        } else {
            0.0
        }
    }
}

/// A variance and its parts estimated from few runs: (part, its degrees of
/// freedom, `None` when known).
struct Variance {
    total: f64,
    parts: [(f64, Option<f64>); 2],
}

/// One way to split a side's samples into categories, each sample in at
/// most one: `categories[c][run]` are category c's samples in each run
/// (any order, the same category across runs). Samples in no category
/// count in one more column, the rest.
pub type Partition = Vec<Vec<f64>>;

/// The measured parts of a side's runs, for [`Noise::measure`].
#[derive(Debug, Clone, Default)]
pub struct SideRuns {
    /// Each run's program time (any unit proportional to CPU time) and
    /// samples.
    pub totals: Vec<(f64, f64)>,
    /// Splits of the samples to measure the dispersion over, in order of
    /// preference: first the leaf functions (each sample's *self* function),
    /// then call paths of 2, 3, … frames ending in the leaf. The first that
    /// gives two columns with enough samples on some side is used, the same
    /// on both sides.
    pub partitions: Vec<Partition>,
}

impl Noise {
    /// Measures the dispersion and the run spread from both sides' runs;
    /// `assumed_spread` is the coefficient of variation used when no side has
    /// two runs.
    pub fn measure(sides: [&SideRuns; 2], assumed_spread: f64) -> Noise {
        // Run spread: pooled within-side variance of ln(program time), less
        // what the program's own sampling explains (1/N per run).
        let (mut ss, mut df, mut poisson) = (0.0, 0.0, 0.0);
        for side in sides {
            let logs: Vec<f64> = side
                .totals
                .iter()
                .filter(|(t, _)| *t > 0.0)
                .map(|(t, _)| t.ln())
                .collect();
            if logs.len() < 2 {
                continue;
            }
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            ss += logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
            df += (logs.len() - 1) as f64;
            poisson += side
                .totals
                .iter()
                .filter(|(_, n)| *n > 0.0)
                .map(|(_, n)| (logs.len() - 1) as f64 / logs.len() as f64 / n)
                .sum::<f64>();
        }
        let (run_spread, run_spread_df) = if df > 0.0 {
            // Few runs say little about a small spread: four degrees of
            // freedom once measured 0 where the machine's spread was ≈ 2%, and
            // an A/A comparison tripped. The assumed spread counts as
            // `SPREAD_PRIOR_DF` more degrees of freedom, so the estimate starts
            // there and moves to what the runs show as runs are added.
            let measured = (ss - poisson).max(0.0);
            let c2 = (measured + SPREAD_PRIOR_DF * assumed_spread.powi(2)) / (df + SPREAD_PRIOR_DF);
            (c2.sqrt(), Some(df + SPREAD_PRIOR_DF))
        } else {
            (assumed_spread, None)
        };

        // Dispersion: Pearson's χ² of the runs × categories table of each
        // side (categories with enough samples, the rest as one more
        // column), over its degrees of freedom (k − 1)(C − 1), pooled over
        // the sides. Categories partition the samples, so no sample counts
        // twice: pooled over totals instead, the dozen callers that hold
        // every sample at ≈ 100% diluted one load-sensitive leaf's spread to
        // φ = 1. Leaves first; a program whose samples all end in one leaf
        // (a shared helper) is split by the callers above it instead.
        let several_runs = sides.iter().any(|s| s.totals.len() >= 2);
        let depths = sides.iter().map(|s| s.partitions.len()).max().unwrap_or(0);
        let mut measured = None;
        if several_runs {
            for depth in 0..depths {
                let (mut chi2, mut chi_df) = (0.0, 0.0);
                for side in sides {
                    if let Some((c, df)) =
                        side.partitions.get(depth).and_then(|p| chi_square(side, p))
                    {
                        chi2 += c;
                        chi_df += df;
                    }
                }
                if chi_df > 0.0 {
                    let basis = match depth {
                        0 => DispersionBasis::Leaves,
                        d => DispersionBasis::CallPaths(d + 1),
                    };
                    measured = Some(((chi2 / chi_df).max(1.0), chi_df, basis));
                    break;
                }
            }
        }
        let (dispersion, dispersion_df, basis) = match measured {
            Some((phi, df, basis)) => (phi, Some(df), basis),
            None if several_runs => (ASSUMED_DISPERSION, None, DispersionBasis::OneCategory),
            None => (ASSUMED_DISPERSION, None, DispersionBasis::OneRun),
        };
        Noise {
            dispersion,
            dispersion_df,
            basis,
            run_spread,
            run_spread_df,
        }
    }

    /// Variance of ln(time ratio) for a function, with the parts of it
    /// that were estimated from few runs (for the degrees of freedom).
    fn time_variance(&self, base: &Counts, new: &Counts) -> Variance {
        // Half a sample keeps a function absent from one side finite.
        let binomial = |c: &Counts| (1.0 - c.share()).max(0.0) / c.function.max(0.5);
        let shares = self.dispersion * (binomial(base) + binomial(new));
        let programs = 1.0 / base.program.max(1.0) + 1.0 / new.program.max(1.0);
        let runs = self.run_spread.powi(2) * (1.0 / base.runs + 1.0 / new.runs);
        Variance {
            total: shares + programs + runs,
            parts: [
                (runs, self.run_spread_df),
                (shares, self.dispersion_df.filter(|_| self.dispersion > 1.0)),
            ],
        }
    }

    /// The two-sided 99% quantile for `v`: Student's t with the
    /// Welch–Satterthwaite degrees of freedom of its estimated parts, the
    /// normal quantile when every part is known.
    fn quantile(&self, v: &Variance) -> f64 {
        let spread: f64 = v
            .parts
            .iter()
            .filter_map(|&(part, df)| Some(part.powi(2) / df?))
            .filter(|x| *x > 0.0)
            .sum();
        if spread > 0.0 {
            t_quantile(v.total.powi(2) / spread)
        } else {
            Z
        }
    }

    /// The change of a function's time, in percent. A function absent
    /// from a side counts half a sample there, so the interval stays finite;
    /// its estimate is then that bound, not a measured ratio.
    pub fn time_change(&self, base: &Counts, new: &Counts) -> Interval {
        let var = self.time_variance(base, new);
        let q = self.quantile(&var);
        let v = var.total;
        let log_ratio = (new.time_per_run() / base.time_per_run()).ln();
        let pct = |x: f64| (x.exp() - 1.0) * 100.0;
        Interval {
            estimate: pct(log_ratio),
            low: pct(log_ratio - q * v.sqrt()),
            high: pct(log_ratio + q * v.sqrt()),
        }
    }

    /// The quantile for a share change: Student's t when the dispersion
    /// was measured (and above 1), the normal quantile otherwise.
    fn share_quantile(&self) -> f64 {
        match self.dispersion_df {
            Some(df) if self.dispersion > 1.0 => t_quantile(df),
            _ => Z,
        }
    }

    /// Standard error of a share change, in points.
    fn share_se(&self, base: &Counts, new: &Counts) -> f64 {
        let (pb, pn) = (base.share(), new.share());
        let (nb, nn) = (base.program.max(1.0), new.program.max(1.0));
        let unpooled = pb * (1.0 - pb) / nb + pn * (1.0 - pn) / nn;
        // Under "no change" both sides share one p: never narrower than that.
        let p = (base.function + new.function) / (nb + nn);
        let pooled = p * (1.0 - p) * (1.0 / nb + 1.0 / nn);
        100.0 * (self.dispersion * unpooled.max(pooled)).sqrt()
    }

    /// The change of a function's share of the program, in points.
    pub fn share_change(&self, base: &Counts, new: &Counts) -> Interval {
        let d = 100.0 * (new.share() - base.share());
        let h = self.share_quantile() * self.share_se(base, new);
        Interval {
            estimate: d,
            low: d - h,
            high: d + h,
        }
    }

    /// The smallest growth of this function's time, in percent, that the
    /// gate catches four times in five with threshold `threshold_pct`.
    pub fn detectable_time(&self, base: &Counts, threshold_pct: f64) -> f64 {
        // As if NEW were like BASE: the resolution this comparison has.
        let var = self.time_variance(base, base);
        let se = var.total.sqrt();
        let limit = (self.quantile(&var) * se).max((1.0 + threshold_pct / 100.0).ln());
        ((limit + Z_POWER * se).exp() - 1.0) * 100.0
    }

    /// The smallest growth of this function's share, in points, that the
    /// gate catches four times in five with threshold `threshold_pts`.
    pub fn detectable_share(&self, base: &Counts, new_program: f64, threshold_pts: f64) -> f64 {
        let new = Counts {
            function: base.share() * new_program,
            program: new_program,
            ..*base
        };
        let se = self.share_se(base, &new);
        (self.share_quantile() * se).max(threshold_pts) + Z_POWER * se
    }
}

/// Pearson's χ² of one side's runs × categories table and its degrees of
/// freedom, or `None` when the side has fewer than two runs or two columns
/// with enough samples.
fn chi_square(side: &SideRuns, partition: &Partition) -> Option<(f64, f64)> {
    let k = side.totals.len();
    if k < 2 {
        return None;
    }
    let mut columns: Vec<Vec<f64>> = partition
        .iter()
        .filter(|runs| {
            runs.len() == k && runs.iter().sum::<f64>() / k as f64 >= DISPERSION_MIN_SAMPLES
        })
        .cloned()
        .collect();
    let rest: Vec<f64> = (0..k)
        .map(|r| {
            let listed: f64 = columns.iter().map(|c| c[r]).sum();
            (side.totals[r].1 - listed).max(0.0)
        })
        .collect();
    if rest.iter().sum::<f64>() / k as f64 >= DISPERSION_MIN_SAMPLES {
        columns.push(rest);
    }
    if columns.len() < 2 {
        return None;
    }
    let rows: Vec<f64> = (0..k).map(|r| columns.iter().map(|c| c[r]).sum()).collect();
    let all: f64 = rows.iter().sum();
    if all <= 0.0 {
        return None;
    }
    let mut chi2 = 0.0;
    for column in &columns {
        let p = column.iter().sum::<f64>() / all;
        for (n, row) in column.iter().zip(&rows) {
            let expected = row * p;
            if expected > 0.0 {
                chi2 += (n - expected).powi(2) / expected;
            }
        }
    }
    Some((chi2, ((k - 1) * (columns.len() - 1)) as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_the_table_and_approach_the_normal() {
        assert_eq!(t_quantile(4.0), 4.604);
        assert_eq!(t_quantile(0.3), 63.657);
        assert!(
            (t_quantile(40.0) - 2.704).abs() < 0.002,
            "{}",
            t_quantile(40.0)
        );
        assert!(
            (t_quantile(120.0) - 2.617).abs() < 0.002,
            "{}",
            t_quantile(120.0)
        );
        assert_eq!(t_quantile(f64::INFINITY), Z);
        let q = t_quantile(4.5);
        assert!(q < 4.604 && q > 4.032, "{q}");
        // Monotone in df.
        let mut last = f64::MAX;
        for df in 1..200 {
            let q = t_quantile(df as f64 * 0.7);
            assert!(q <= last, "df {df}");
            last = q;
        }
    }

    fn runs(totals: &[f64], per_function: &[&[f64]]) -> SideRuns {
        SideRuns {
            totals: totals.iter().map(|&t| (t, t)).collect(),
            partitions: vec![per_function.iter().map(|r| r.to_vec()).collect()],
        }
    }

    #[test]
    fn one_run_per_side_assumes_the_spread_and_the_dispersion() {
        let a = runs(&[1000.0], &[&[300.0]]);
        let n = Noise::measure([&a, &a], 0.05);
        assert_eq!(n.run_spread, 0.05);
        assert_eq!(n.run_spread_df, None);
        assert_eq!((n.dispersion, n.dispersion_df), (ASSUMED_DISPERSION, None));
        assert_eq!(n.basis, DispersionBasis::OneRun);
    }

    /// Several runs of a program whose samples all end in one leaf: the
    /// leaves give one column, so the dispersion is measured over the call
    /// paths into it, and says so.
    #[test]
    fn one_leaf_is_measured_over_its_callers() {
        // Three runs of 1,000 samples, all in `work`; its callers split them
        // 50/30/20, 3 points apart between runs (binomial SD ≈ 1.5 points).
        let side = SideRuns {
            totals: vec![(1000.0, 1000.0); 3],
            partitions: vec![
                vec![vec![1000.0; 3]],
                vec![
                    vec![500.0, 530.0, 470.0],
                    vec![300.0, 290.0, 310.0],
                    vec![200.0, 180.0, 220.0],
                ],
            ],
        };
        let n = Noise::measure([&side, &side], 0.05);
        assert_eq!(n.basis, DispersionBasis::CallPaths(2), "{n:?}");
        assert_eq!(n.dispersion_df, Some(8.0), "{n:?}");
        assert!(n.dispersion > 1.5, "{n:?}");
        // Nothing splits them at any depth: assumed, for that reason.
        let one = SideRuns {
            partitions: vec![vec![vec![1000.0; 3]]; 2],
            ..side
        };
        let n = Noise::measure([&one, &one], 0.05);
        assert_eq!(n.basis, DispersionBasis::OneCategory);
        assert_eq!((n.dispersion, n.dispersion_df), (ASSUMED_DISPERSION, None));
    }

    #[test]
    fn run_spread_is_measured_within_sides_not_between_them() {
        // Each side steady (±1%), the sides 30% apart: the 30% is the change,
        // not noise. Four degrees of freedom measure 1%; with the assumed 5%
        // as one more: sqrt((4 × 0.01² + 0.05²) / 5) = 2.4%.
        let base = runs(&[1_000_000.0, 1_010_000.0, 990_000.0], &[]);
        let new = runs(&[1_300_000.0, 1_313_000.0, 1_287_000.0], &[]);
        let n = Noise::measure([&base, &new], 0.05);
        assert_eq!(n.run_spread_df, Some(5.0));
        assert!((n.run_spread - 0.0241).abs() < 0.001, "{}", n.run_spread);
        // Many steady runs: the measurement wins.
        let steady: Vec<f64> = (0..40)
            .map(|i| 1_000_000.0 * (1.0 + if i % 2 == 0 { 0.01 } else { -0.01 }))
            .collect();
        let many = runs(&steady, &[]);
        let n = Noise::measure([&many, &many], 0.05);
        assert!(n.run_spread < 0.0125, "{}", n.run_spread);
    }

    #[test]
    fn dispersion_is_one_for_binomial_runs_and_more_for_wider_ones() {
        // 10,000 samples a run, one leaf at 30% and the rest: binomial SD 0.46
        // points. Runs 0.1 points apart are within it (φ floored at 1); 3
        // points apart are not.
        let steady = runs(&[10_000.0; 3], &[&[3000.0, 3010.0, 2990.0]]);
        let n = Noise::measure([&steady, &steady], 0.05);
        assert_eq!((n.dispersion, n.dispersion_df), (1.0, Some(4.0)));
        let wide = runs(&[10_000.0; 3], &[&[3000.0, 3300.0, 2700.0]]);
        let phi = Noise::measure([&wide, &wide], 0.05).dispersion;
        // χ² per side: 2 × (300² / 3000 + 300² / 7000) = 85.7 on 2 df: 42.9.
        assert!((phi - 42.9).abs() < 0.5, "{phi}");
    }

    #[test]
    fn callers_holding_every_sample_do_not_dilute_the_dispersion() {
        // A leaf spread 3 points between runs, and ten callers at 100%:
        // leaves are what is measured, so the callers change nothing.
        let leaf: &[f64] = &[3000.0, 3300.0, 2700.0];
        let caller: &[f64] = &[0.0, 0.0, 0.0];
        let alone = runs(&[10_000.0; 3], &[leaf]);
        let with_callers = runs(
            &[10_000.0; 3],
            &[leaf, caller, caller, caller, caller, caller],
        );
        let a = Noise::measure([&alone, &alone], 0.05);
        let b = Noise::measure([&with_callers, &with_callers], 0.05);
        assert_eq!(a, b);
        assert!(a.dispersion > 40.0, "{a:?}");
    }

    #[test]
    fn a_measured_dispersion_widens_share_intervals_by_t() {
        let measured = Noise {
            dispersion: 2.0,
            dispersion_df: Some(8.0),
            basis: DispersionBasis::Leaves,
            run_spread: 0.0,
            run_spread_df: None,
        };
        let assumed = Noise {
            dispersion_df: None,
            ..measured
        };
        let base = counts(4500.0, 15_000.0, 3.0);
        let new = counts(4800.0, 15_000.0, 3.0);
        let t = measured.share_change(&base, &new);
        let z = assumed.share_change(&base, &new);
        // t(8) at 99.5% is 3.355 against 2.576.
        let ratio = (t.high - t.estimate) / (z.high - z.estimate);
        assert!((ratio - 3.355 / Z).abs() < 0.01, "{ratio}");
    }

    fn counts(function: f64, program: f64, runs: f64) -> Counts {
        Counts {
            function,
            program,
            runs,
            ns_per_sample: 1e6,
        }
    }

    #[test]
    fn a_time_change_is_told_from_sampling_noise() {
        let noise = Noise {
            dispersion: 1.0,
            dispersion_df: None,
            basis: DispersionBasis::OneRun,
            run_spread: 0.01,
            run_spread_df: Some(4.0),
        };
        // 3 runs of 4,000 samples; the function 30% of them.
        let base = counts(3600.0, 12_000.0, 3.0);
        let same = noise.time_change(&base, &base);
        assert_eq!(same.estimate, 0.0);
        assert!(same.low < 0.0 && same.high > 0.0);
        // About ±6.6% at 99%: sampling (1.7% a side) and the runs' spread.
        assert!(same.high > 5.0 && same.high < 8.5, "{same:?}");
        // 10% slower: 3,960 of 12,360 samples, 1.32 s a run.
        let slower = counts(3960.0, 12_360.0, 3.0);
        let d = noise.time_change(&base, &slower);
        assert!((d.estimate - 10.0).abs() < 1e-9, "{d:?}");
        assert!(d.grew(), "{d:?}");
        // The same 10% with one run a side and a 5% assumed spread: not resolvable.
        let one = Noise {
            dispersion: 1.0,
            dispersion_df: None,
            basis: DispersionBasis::OneRun,
            run_spread: 0.05,
            run_spread_df: None,
        };
        let d = one.time_change(&counts(1200.0, 4000.0, 1.0), &counts(1320.0, 4120.0, 1.0));
        assert!(!d.grew(), "{d:?}");
    }

    #[test]
    fn new_and_vanished_functions_have_finite_intervals() {
        let noise = Noise {
            dispersion: 1.0,
            dispersion_df: None,
            basis: DispersionBasis::OneRun,
            run_spread: 0.02,
            run_spread_df: None,
        };
        let d = noise.time_change(&counts(0.0, 4000.0, 1.0), &counts(50.0, 4000.0, 1.0));
        assert!(
            d.estimate.is_finite() && d.low.is_finite() && d.grew(),
            "{d:?}"
        );
        let one = noise.time_change(&counts(0.0, 4000.0, 1.0), &counts(1.0, 4000.0, 1.0));
        assert!(!one.grew(), "one sample is not evidence: {one:?}");
        let gone = noise.time_change(&counts(50.0, 4000.0, 1.0), &counts(0.0, 4000.0, 1.0));
        assert!(gone.shrank() && gone.high.is_finite(), "{gone:?}");
    }

    #[test]
    fn share_changes_use_binomial_noise_times_the_dispersion() {
        let mut noise = Noise {
            dispersion: 1.0,
            dispersion_df: None,
            basis: DispersionBasis::OneRun,
            run_spread: 0.0,
            run_spread_df: None,
        };
        let base = counts(3000.0, 10_000.0, 1.0);
        let new = counts(3200.0, 10_000.0, 1.0);
        let d = noise.share_change(&base, &new);
        assert!((d.estimate - 2.0).abs() < 1e-9);
        // SE: sqrt(0.21/1e4 + 0.2176/1e4) = 0.654 points; 99%: ±1.69.
        assert!((d.high - d.estimate - 1.685).abs() < 0.01, "{d:?}");
        assert!(d.grew());
        noise.dispersion = 4.0;
        assert!(!noise.share_change(&base, &new).grew());
    }

    #[test]
    fn detectable_changes_shrink_with_samples_and_respect_the_threshold() {
        let noise = Noise {
            dispersion: 1.0,
            dispersion_df: None,
            basis: DispersionBasis::OneRun,
            run_spread: 0.01,
            run_spread_df: Some(4.0),
        };
        let small = noise.detectable_time(&counts(300.0, 1000.0, 1.0), 0.0);
        let large = noise.detectable_time(&counts(3000.0, 10_000.0, 1.0), 0.0);
        assert!(large < small, "{large} vs {small}");
        let floor = noise.detectable_time(&counts(3000.0, 10_000.0, 1.0), 50.0);
        assert!(floor > 50.0, "{floor}");
        let s = noise.detectable_share(&counts(3000.0, 10_000.0, 1.0), 10_000.0, 0.0);
        assert!(s > 1.685 && s < 3.0, "{s}");
    }
}
