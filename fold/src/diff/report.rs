//! Text outputs of a [`Diff`]: the `flamerec-diff/1` JSON object and a
//! Markdown report for CI job summaries. They only format what the diff
//! holds; they return plain `io::Result` so a caller can tell a closed pipe
//! from a real failure.

use std::cmp::Ordering;
use std::io::{self, BufWriter, Write};

use serde::Serialize;

use super::compare::{by_growth, group_name, same_samples_groups};
use super::stats::{DispersionBasis, CONFIDENCE_PCT};
use super::{Diff, FunctionDiff, Interval, PathDiff, Trip, Verdict};

/// Schema name of the diff JSON. Fields added since its first version
/// (runs, times, intervals, verdicts, the gate, noise, notes, the weight's
/// unit, call paths) are additive: a reader of the first version reads
/// this one.
pub const DIFF_SCHEMA: &str = "flamerec-diff/1";

/// Changes smaller than this (in points) are not listed as regressions or
/// improvements: they would print as `+0.00`.
const LISTED_PCT: f64 = 0.005;

/// Functions listed in the resolution table.
const RESOLUTION_ROWS: usize = 5;

/// Writes the diff as one JSON object (schema `flamerec-diff/1`), functions
/// in the diff's order (largest total change first).
pub fn write_diff_json<W: Write>(diff: &Diff, out: W) -> io::Result<()> {
    let doc = Json {
        schema: DIFF_SCHEMA,
        base_samples: diff.base_weight,
        new_samples: diff.new_weight,
        weight_unit: &diff.weight_unit,
        base_runs: diff.base_runs,
        new_runs: diff.new_runs,
        confidence_pct: CONFIDENCE_PCT,
        time: diff.time.map(|t| JsonTime {
            base_ns: t.base_ns,
            new_ns: t.new_ns,
            change_pct: t.change.into(),
        }),
        interrupts: JsonInterrupts {
            base_pct: diff.base_interrupt_pct,
            new_pct: diff.new_interrupt_pct,
        },
        noise: JsonNoise {
            dispersion: diff.noise.dispersion,
            dispersion_measured: diff.noise.dispersion_df.is_some(),
            dispersion_over: match diff.noise.basis {
                DispersionBasis::Leaves => Some("leaves"),
                DispersionBasis::CallPaths(_) => Some("call_paths"),
                DispersionBasis::OneRun | DispersionBasis::OneCategory => None,
            },
            dispersion_frames: match diff.noise.basis {
                DispersionBasis::Leaves => Some(1),
                DispersionBasis::CallPaths(n) => Some(n),
                DispersionBasis::OneRun | DispersionBasis::OneCategory => None,
            },
            run_spread_pct: diff.noise.run_spread * 100.0,
            run_spread_measured: diff.noise.run_spread_df.is_some(),
        },
        gate: JsonGate {
            fail_above: diff.gate.share_pts,
            fail_time_above: diff.gate.time_pct,
            tripped: diff.tripped().iter().map(|f| f.name.as_str()).collect(),
        },
        notes: &diff.notes,
        functions: diff
            .functions
            .iter()
            .map(|f| JsonFunction {
                name: &f.name,
                module: &f.module,
                base: JsonShares {
                    self_pct: f.base.self_pct,
                    total_pct: f.base.total_pct,
                    self_ns: f.base_time.map(|t| t.self_ns),
                    total_ns: f.base_time.map(|t| t.total_ns),
                },
                new: JsonShares {
                    self_pct: f.new.self_pct,
                    total_pct: f.new.total_pct,
                    self_ns: f.new_time.map(|t| t.self_ns),
                    total_ns: f.new_time.map(|t| t.total_ns),
                },
                self_delta_pct: f.self_delta_pct,
                total_delta_pct: f.total_delta_pct,
                time_change_pct: f.time_change.map(Into::into),
                share_change_pts: f.share_change.into(),
                verdict: f.verdict.as_str(),
                trips: f.trips.map(|t| match t {
                    Trip::Time => "time",
                    Trip::Share => "share",
                }),
                detectable_time_pct: f.detectable_time_pct,
                detectable_share_pts: f.detectable_share_pts,
            })
            .collect(),
        paths: diff
            .paths
            .iter()
            .map(|p| JsonPath {
                frames: &p.frames,
                base: JsonPathSide {
                    total_pct: p.base_pct,
                    total_ns: p.base_ns,
                },
                new: JsonPathSide {
                    total_pct: p.new_pct,
                    total_ns: p.new_ns,
                },
                time_change_pct: p.time_change.map(Into::into),
                share_change_pts: p.share_change.into(),
            })
            .collect(),
    };
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &doc)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[derive(Serialize)]
struct Json<'a> {
    schema: &'static str,
    /// The total weight, in `weight_unit` (named in the first version).
    base_samples: u64,
    new_samples: u64,
    weight_unit: &'a str,
    base_runs: usize,
    new_runs: usize,
    confidence_pct: f64,
    time: Option<JsonTime>,
    interrupts: JsonInterrupts,
    noise: JsonNoise,
    gate: JsonGate<'a>,
    notes: &'a [String],
    functions: Vec<JsonFunction<'a>>,
    paths: Vec<JsonPath<'a>>,
}

#[derive(Serialize)]
struct JsonPath<'a> {
    frames: &'a [String],
    base: JsonPathSide,
    new: JsonPathSide,
    time_change_pct: Option<JsonInterval>,
    share_change_pts: JsonInterval,
}

#[derive(Serialize)]
struct JsonPathSide {
    total_pct: f64,
    total_ns: Option<f64>,
}

#[derive(Serialize)]
struct JsonTime {
    base_ns: f64,
    new_ns: f64,
    change_pct: JsonInterval,
}

#[derive(Serialize)]
struct JsonInterrupts {
    base_pct: f64,
    new_pct: f64,
}

#[derive(Serialize)]
struct JsonNoise {
    dispersion: f64,
    dispersion_measured: bool,
    dispersion_over: Option<&'static str>,
    dispersion_frames: Option<usize>,
    run_spread_pct: f64,
    run_spread_measured: bool,
}

#[derive(Serialize)]
struct JsonGate<'a> {
    fail_above: Option<f64>,
    fail_time_above: Option<f64>,
    tripped: Vec<&'a str>,
}

#[derive(Serialize)]
struct JsonInterval {
    estimate: f64,
    low: f64,
    high: f64,
}

impl From<Interval> for JsonInterval {
    fn from(i: Interval) -> Self {
        JsonInterval {
            estimate: i.estimate,
            low: i.low,
            high: i.high,
        }
    }
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    module: &'a str,
    base: JsonShares,
    new: JsonShares,
    self_delta_pct: f64,
    total_delta_pct: f64,
    time_change_pct: Option<JsonInterval>,
    share_change_pts: JsonInterval,
    verdict: &'static str,
    trips: Option<&'static str>,
    detectable_time_pct: Option<f64>,
    detectable_share_pts: f64,
}

#[derive(Serialize)]
struct JsonShares {
    self_pct: f64,
    total_pct: f64,
    self_ns: Option<f64>,
    total_ns: Option<f64>,
}

/// What the Markdown report says besides the numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkdownOptions {
    /// Name of the BASE input (e.g. its path, or its paths joined).
    pub base_label: String,
    /// Name of the NEW input.
    pub new_label: String,
    /// Rows per table.
    pub top: usize,
    /// The `--min-share` threshold, if any, so the report says what was left out.
    pub min_share: Option<f64>,
    /// Every row: no cap at `top`, and rows within noise and below the
    /// resolution not folded into one line.
    pub all_rows: bool,
}

impl Default for MarkdownOptions {
    fn default() -> Self {
        MarkdownOptions {
            base_label: "BASE".to_string(),
            new_label: "NEW".to_string(),
            top: 10,
            min_share: None,
            all_rows: false,
        }
    }
}

/// Writes a Markdown report: the program's time, the gate's verdict (with
/// thresholds, naming the call path that carries each growth), the call
/// paths that grew, the top regressions and improvements with their
/// intervals and verdicts, the comparison's resolution for its largest
/// functions, the samples left to the machine, and notes on the method's
/// inputs.
pub fn write_diff_markdown<W: Write>(
    diff: &Diff,
    opts: &MarkdownOptions,
    out: W,
) -> io::Result<()> {
    let mut out = BufWriter::new(out);
    let timed = diff.time.is_some();
    let words = Words::of(diff);
    writeln!(out, "## flamerec diff")?;
    writeln!(out)?;
    writeln!(
        out,
        "**Base** {} ({}, {}) → **new** {} ({}, {}).",
        code(&opts.base_label),
        plural(diff.base_runs, "run"),
        words.amount(diff.base_weight),
        code(&opts.new_label),
        plural(diff.new_runs, "run"),
        words.amount(diff.new_weight),
    )?;
    if let Some(t) = &diff.time {
        writeln!(
            out,
            "{} per run: {} → {} (**{}**, {CONFIDENCE_PCT}% interval {}).",
            words.program_time,
            seconds(t.base_ns),
            seconds(t.new_ns),
            signed_pct(t.change.estimate),
            range(&t.change, "%"),
        )?;
    }
    writeln!(
        out,
        "Shares are percent of {}; share changes are in points; intervals are \
         {CONFIDENCE_PCT}%.",
        words.shares_of
    )?;
    if let Some(min) = opts.min_share {
        writeln!(out, "Functions under {min}% on both sides are left out.")?;
    }
    writeln!(out)?;

    if diff.gate.is_set() {
        let limits = thresholds(diff);
        let tripped = diff.tripped();
        if tripped.is_empty() {
            writeln!(
                out,
                "✅ No function grew beyond noise and above the thresholds ({limits})."
            )?;
        } else {
            let names: Vec<String> = diff
                .findings()
                .iter()
                .map(|f| match f.path {
                    Some(p) => code(&p.name()),
                    None => grouped(&f.name, f.more),
                })
                .collect();
            writeln!(
                out,
                "❌ **{} grew beyond noise and above the thresholds ({limits}):** {}.",
                plural(tripped.len(), "function"),
                names.join(", ")
            )?;
        }
        writeln!(out)?;
    }
    paths(&mut out, diff, opts, timed)?;

    let grew = |f: &FunctionDiff| match f.added_ns() {
        Some(ns) => ns > 0.0,
        None => f.total_delta_pct >= LISTED_PCT,
    };
    let shrank = |f: &FunctionDiff| match f.added_ns() {
        Some(ns) => ns < 0.0,
        None => f.total_delta_pct <= -LISTED_PCT,
    };
    let mut regressions: Vec<&FunctionDiff> = diff.functions.iter().filter(|f| grew(f)).collect();
    regressions.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| by_growth(b, a)));
    let mut improvements: Vec<&FunctionDiff> =
        diff.functions.iter().filter(|f| shrank(f)).collect();
    improvements.sort_by(|a, b| {
        (a.verdict != Verdict::Shrank)
            .cmp(&(b.verdict != Verdict::Shrank))
            .then_with(|| by_growth(a, b))
    });

    let what = if timed { "time" } else { "total share" };
    writeln!(out, "### Regressions ({what} grew)")?;
    writeln!(out)?;
    table(&mut out, &regressions, opts, timed, "No function grew")?;
    writeln!(out, "### Improvements ({what} shrank)")?;
    writeln!(out)?;
    table(&mut out, &improvements, opts, timed, "No function shrank")?;
    resolution(&mut out, diff, timed)?;

    if diff.base_interrupt_pct > 0.0 || diff.new_interrupt_pct > 0.0 {
        writeln!(
            out,
            "Samples taken in interrupt context (timer ticks, IPIs, preemption: the machine's \
             load, not the program) are left out: {:.2}% of base, {:.2}% of new \
             (`--keep-interrupts` counts them).",
            diff.base_interrupt_pct, diff.new_interrupt_pct
        )?;
        writeln!(out)?;
    }
    for note in &diff.notes {
        writeln!(out, "> {note}")?;
        writeln!(out)?;
    }
    out.flush()
}

/// How the report words a diff's weights: samples and CPU time, or time
/// blocked (off-CPU recordings, whose weights are nanoseconds).
struct Words {
    unit: String,
    program_time: &'static str,
    shares_of: &'static str,
}

impl Words {
    fn of(diff: &Diff) -> Words {
        let blocked = diff.weight_unit == "ns";
        Words {
            unit: diff.weight_unit.clone(),
            program_time: if blocked {
                "Time the program spent blocked"
            } else {
                "CPU time of the program"
            },
            shares_of: if blocked {
                "each side's time blocked"
            } else {
                "each side's program samples"
            },
        }
    }

    /// A side's total weight: `3,000 samples`, `804.4 ms blocked`.
    fn amount(&self, weight: u64) -> String {
        match self.unit.as_str() {
            "ns" => format!("{} blocked", seconds(weight as f64)),
            "samples" | "" => format!("{} samples", thousands(weight)),
            unit => format!("{} {unit}", thousands(weight)),
        }
    }
}

/// Tripping first, then changes beyond noise, then the rest.
fn rank(f: &FunctionDiff) -> u8 {
    match (f.trips, f.verdict) {
        (Some(_), _) => 0,
        (None, Verdict::Grew) => 1,
        _ => 2,
    }
}

fn thresholds(diff: &Diff) -> String {
    let mut parts = Vec::new();
    if let Some(t) = diff.gate.time_pct {
        parts.push(format!("time +{t}%"));
    }
    if let Some(s) = diff.gate.share_pts {
        parts.push(format!("share +{s} points"));
    }
    parts.join(", ")
}

/// The call paths that grew, largest growth first; nothing when none did.
fn paths<W: Write>(
    out: &mut W,
    diff: &Diff,
    opts: &MarkdownOptions,
    timed: bool,
) -> io::Result<()> {
    if diff.paths.is_empty() {
        return Ok(());
    }
    writeln!(out, "### Call paths that grew")?;
    writeln!(out)?;
    writeln!(
        out,
        "Each path runs from the caller whose time grew to the frame where the time went, the \
         shortest that carries the growth:"
    )?;
    writeln!(out)?;
    if timed {
        writeln!(
            out,
            "| call path | base time | new time | Δ time ({CONFIDENCE_PCT}% interval) | Δ share |"
        )?;
    } else {
        writeln!(
            out,
            "| call path | base share | new share | Δ share ({CONFIDENCE_PCT}% interval) |"
        )?;
    }
    writeln!(out, "|:--|--:|--:|--:|{}", if timed { "--:|" } else { "" })?;
    let shown: Vec<&PathDiff> = diff.paths.iter().collect();
    let cap = if opts.all_rows { shown.len() } else { opts.top };
    for p in shown.iter().take(cap) {
        let name = code(&p.name());
        match (p.base_ns, p.new_ns, p.time_change) {
            (Some(b), Some(n), Some(c)) if timed => writeln!(
                out,
                "| {name} | {} | {} | **{}** ({}) | {:+.2} |",
                seconds(b),
                seconds(n),
                signed_pct(c.estimate),
                range(&c, ""),
                p.share_change.estimate,
            )?,
            _ => writeln!(
                out,
                "| {name} | {:.2}% | {:.2}% | **{:+.2}** ({}) |",
                p.base_pct,
                p.new_pct,
                p.share_change.estimate,
                range(&p.share_change, ""),
            )?,
        }
    }
    if shown.len() > cap {
        writeln!(out)?;
        writeln!(out, "_… and {} more._", shown.len() - cap)?;
    }
    writeln!(out)
}

/// Whether a row says nothing a reader needs: its interval holds zero, it
/// trips nothing, and a change as large as the function itself would be
/// within noise — the smallest time growth this comparison catches for it
/// is +100% or more; without time, its share's interval is wider than its
/// share.
fn below_resolution(f: &FunctionDiff, timed: bool) -> bool {
    if f.verdict != Verdict::Noise || f.trips.is_some() {
        return false;
    }
    match f.detectable_time_pct {
        Some(t) if timed => t >= 100.0,
        _ => f.share_change.high - f.share_change.estimate >= f.base.total_pct.max(f.new.total_pct),
    }
}

fn table<W: Write>(
    out: &mut W,
    rows: &[&FunctionDiff],
    opts: &MarkdownOptions,
    timed: bool,
    none: &str,
) -> io::Result<()> {
    if rows.is_empty() {
        writeln!(out, "_{none}._")?;
        return writeln!(out);
    }
    // Functions with the same samples (a chain of callers) are one row.
    let groups = same_samples_groups(rows);
    let (shown, folded): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|g| opts.all_rows || !below_resolution(g[0], timed));
    if shown.is_empty() {
        writeln!(out, "_{none} beyond the resolution._")?;
        writeln!(out)?;
    } else if timed {
        writeln!(
            out,
            "| function | module | base time | new time | Δ time ({CONFIDENCE_PCT}% interval) | Δ share | verdict |"
        )?;
        writeln!(out, "|:--|:--|--:|--:|--:|--:|:--|")?;
    } else {
        writeln!(
            out,
            "| function | module | base total | new total | Δ total ({CONFIDENCE_PCT}% interval) | Δ self | verdict |"
        )?;
        writeln!(out, "|:--|:--|--:|--:|--:|--:|:--|")?;
    }
    let total = shown.len();
    let cap = if opts.all_rows { total } else { opts.top };
    for g in shown.iter().take(cap) {
        let f = g[0];
        let name = grouped_name(g);
        let mark = if f.is_new() {
            " *(new)*"
        } else if f.vanished() {
            " *(vanished)*"
        } else {
            ""
        };
        let module = if f.module.is_empty() {
            String::new()
        } else {
            code(&f.module)
        };
        let verdict = match (f.trips, f.verdict) {
            (Some(_), _) => "❌ grew".to_string(),
            (None, v) => v.as_str().to_string(),
        };
        match (f.base_time, f.new_time, f.time_change) {
            (Some(b), Some(n), Some(c)) if timed => writeln!(
                out,
                "| {name}{mark} | {module} | {} | {} | **{}** ({}) | {:+.2} | {verdict} |",
                seconds(b.total_ns),
                seconds(n.total_ns),
                signed_pct(c.estimate),
                range(&c, ""),
                f.total_delta_pct,
            )?,
            _ => writeln!(
                out,
                "| {name}{mark} | {module} | {:.2}% | {:.2}% | **{:+.2}** ({}) | {:+.2} | {verdict} |",
                f.base.total_pct,
                f.new.total_pct,
                f.total_delta_pct,
                range(&f.share_change, ""),
                f.self_delta_pct,
            )?,
        }
    }
    if total > cap {
        writeln!(out)?;
        writeln!(out, "_… and {} more._", total - cap)?;
    }
    if !folded.is_empty() {
        // Self shares split a side's samples (one leaf each): they add up,
        // on the side where they are larger.
        let sum =
            |side: fn(&FunctionDiff) -> f64| folded.iter().flatten().map(|f| side(f)).sum::<f64>();
        let share: f64 = sum(|f| f.base.self_pct).max(sum(|f| f.new.self_pct));
        if !shown.is_empty() {
            writeln!(out)?;
        }
        writeln!(
            out,
            "_{}, all within noise and below the resolution, together {} of the program \
             (`--all-rows` lists them)._",
            plural(folded.iter().map(|g| g.len()).sum(), "more function"),
            small_pct(share)
        )?;
    }
    writeln!(out)
}

/// A group of functions with the same samples, as a row name.
fn grouped_name(group: &[&FunctionDiff]) -> String {
    let (name, more) = group_name(group);
    grouped(&name, more)
}

/// `name`, and how many more functions have the same samples.
fn grouped(name: &str, more: usize) -> String {
    match more {
        0 => code(name),
        more => format!(
            "{} _(and {} with the same samples)_",
            code(name),
            plural(more, "function")
        ),
    }
}

/// What this comparison can resolve, for its largest functions in BASE.
fn resolution<W: Write>(out: &mut W, diff: &Diff, timed: bool) -> io::Result<()> {
    let mut top: Vec<&FunctionDiff> = diff
        .functions
        .iter()
        .filter(|f| f.base.total_pct > 0.0)
        .collect();
    top.sort_by(|a, b| {
        b.base
            .total_pct
            .partial_cmp(&a.base.total_pct)
            .unwrap_or(Ordering::Equal)
            .then_with(|| a.name.cmp(&b.name))
    });
    // Functions with the same samples resolve alike: one row each.
    let top: Vec<(&FunctionDiff, String)> = same_samples_groups(&top)
        .into_iter()
        .map(|g| (g[0], grouped_name(&g)))
        .collect();
    if top.is_empty() {
        return Ok(());
    }
    writeln!(out, "### Resolution")?;
    writeln!(out)?;
    writeln!(
        out,
        "The smallest growth this comparison catches four times in five, thresholds included:"
    )?;
    writeln!(out)?;
    if timed {
        writeln!(
            out,
            "| function | base total | detectable Δ time | detectable Δ share |"
        )?;
    } else {
        writeln!(out, "| function | base total | detectable Δ share |")?;
    }
    writeln!(out, "|:--|--:|--:|{}", if timed { "--:|" } else { "" })?;
    for (f, name) in top.iter().take(RESOLUTION_ROWS) {
        match f.detectable_time_pct {
            Some(t) if timed => writeln!(
                out,
                "| {name} | {:.2}% | +{t:.1}% | {} |",
                f.base.total_pct,
                if f.base.total_pct >= 99.5 {
                    // Nearly every sample: its share cannot grow.
                    "—".to_string()
                } else {
                    format!("+{:.2}", f.detectable_share_pts)
                }
            )?,
            _ => writeln!(
                out,
                "| {name} | {:.2}% | +{:.2} |",
                f.base.total_pct, f.detectable_share_pts
            )?,
        }
    }
    writeln!(out)?;
    writeln!(out, "{}", noise_sentence(diff))?;
    writeln!(out)
}

/// What the noise was, measured or assumed, with the reason that holds.
fn noise_sentence(diff: &Diff) -> String {
    let noise = &diff.noise;
    let spread = if noise.run_spread_df.is_some() {
        format!(
            "measured {:.1}% between runs of a side",
            noise.run_spread * 100.0
        )
    } else {
        format!("assumed {:.1}%: one run per side", noise.run_spread * 100.0)
    };
    let measured = format!(
        "shares vary between runs {:.2}× as much (variance) as sampling alone gives",
        noise.dispersion
    );
    let assumed = format!(
        "shares are assumed to vary between runs {:.0}× as much (variance) as sampling alone \
         gives",
        noise.dispersion
    );
    let shares = match noise.basis {
        DispersionBasis::Leaves => format!("{measured} (measured over leaf functions)"),
        DispersionBasis::CallPaths(frames) => format!(
            "{measured} (measured over call paths of {frames} frames: the samples end in too \
             few leaf functions to measure it over them)"
        ),
        DispersionBasis::OneRun => format!("{assumed}: one run per side"),
        DispersionBasis::OneCategory => format!(
            "{assumed}: {} runs a side, but nearly all samples take one call path, so the runs \
             show nothing to measure it over",
            diff.base_runs.max(diff.new_runs)
        ),
    };
    format!(
        "Noise: the program's time spreads {spread}; {shares}. Sampling noise shrinks with \
         more samples (a higher -F, longer runs), the spread between runs with more runs per \
         side."
    )
}

/// A share of the program in percent, `<0.1%` when it rounds to nothing.
fn small_pct(x: f64) -> String {
    if x > 0.0 && x < 0.05 {
        "<0.1%".to_string()
    } else {
        format!("{x:.1}%")
    }
}

/// `+12.3%` (one decimal).
fn signed_pct(x: f64) -> String {
    format!("{x:+.1}%")
}

/// `+1.2 … +3.4` with `unit` after each bound.
fn range(i: &Interval, unit: &str) -> String {
    format!("{:+.1}{unit} … {:+.1}{unit}", i.low, i.high)
}

/// Nanoseconds as seconds or milliseconds, three significant digits.
fn seconds(ns: f64) -> String {
    let s = ns / 1e9;
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 0.001 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

/// `s` as an inline code span that survives a table cell: a backtick fence
/// longer than any run inside, and `|` escaped (GitHub unescapes it in cells).
fn code(s: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", s.replace('|', "\\|"))
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let groups: Vec<String> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|g| g.iter().map(|&b| char::from(b)).collect())
        .collect();
    groups.join(",")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{DiffOptions, Gate, Side};
    use super::*;

    fn side(t: &str) -> Side {
        Side::from_folded(t.as_bytes(), Path::new("t")).unwrap()
    }

    fn diff(base: &str, new: &str) -> Diff {
        Diff::new(&side(base), &side(new))
    }

    fn markdown(d: &Diff, opts: &MarkdownOptions) -> String {
        let mut out = Vec::new();
        write_diff_markdown(d, opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn json_keeps_the_first_versions_fields_and_adds_the_gates() {
        let d = diff("p;main;a 3\np;main;b 1\n", "p;main;a 1\np;main;c 1\n");
        let mut out = Vec::new();
        write_diff_json(&d, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["schema"], "flamerec-diff/1");
        assert_eq!(v["base_samples"], 4);
        assert_eq!(v["new_samples"], 2);
        let fs = v["functions"].as_array().unwrap();
        assert_eq!(fs.len(), 4);
        // Largest total change first: c (+50), then a (-25) and b (-25) by self change and name.
        let c = &fs[0];
        assert_eq!(c["name"], "c");
        assert_eq!(c["module"], "");
        assert_eq!(c["base"]["total_pct"], 0.0);
        assert_eq!(c["new"]["self_pct"], 50.0);
        assert_eq!(c["self_delta_pct"], 50.0);
        assert_eq!(c["total_delta_pct"], 50.0);
        // Folded text: no time.
        assert!(c["new"]["total_ns"].is_null() && c["time_change_pct"].is_null());
        // Two samples are no evidence.
        assert_eq!(c["verdict"], "noise");
        let sc = &c["share_change_pts"];
        assert!(sc["low"].as_f64().unwrap() < 0.0 && sc["high"].as_f64().unwrap() > 50.0);
        let names: Vec<&str> = fs.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["c", "a", "b", "main"]);
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&String> = obj.keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "base_runs",
                "base_samples",
                "confidence_pct",
                "functions",
                "gate",
                "interrupts",
                "new_runs",
                "new_samples",
                "noise",
                "notes",
                "paths",
                "schema",
                "time",
                "weight_unit"
            ]
        );
        assert!(v["time"].is_null());
        // One run a side: the dispersion is assumed, and says so.
        assert_eq!(
            v["noise"]["dispersion"],
            super::super::stats::ASSUMED_DISPERSION
        );
        assert_eq!(v["noise"]["dispersion_measured"], false);
    }

    #[test]
    fn markdown_lists_regressions_and_improvements_with_marks_and_verdicts() {
        let d = Diff::compare(
            &side("p;main;a 5000\np;main;gone 2000\np;main;b 3000\n"),
            &side("p;main;a 4000\np;main;fresh 3000\np;main;b 3000\n"),
            &DiffOptions {
                gate: Gate {
                    share_pts: Some(5.0),
                    time_pct: None,
                },
                ..DiffOptions::default()
            },
        );
        let md = markdown(&d, &MarkdownOptions::default());
        assert!(md.starts_with("## flamerec diff\n"), "{md}");
        assert!(md.contains("(1 run, 10,000 samples)"), "{md}");
        assert!(
            md.contains("❌ **1 function grew beyond noise and above the thresholds (share +5 points):** `fresh`."),
            "{md}"
        );
        assert!(
            md.contains("| `fresh` *(new)* |  | 0.00% | 30.00% | **+30.00** (+"),
            "{md}"
        );
        assert!(md.contains("| +30.00 | ❌ grew |"), "{md}");
        let improvements = md.split("### Improvements").nth(1).unwrap();
        let gone = improvements.find("`gone` *(vanished)*").unwrap();
        let a = improvements.find("| `a` |").unwrap();
        assert!(gone < a, "largest shrinkage first: {md}");
        assert!(
            !md.contains("| `b` |  |"),
            "unchanged functions are not listed: {md}"
        );
        assert!(md.contains("### Resolution"), "{md}");
        assert!(md.contains("no CPU time, so shares are compared"), "{md}");
    }

    #[test]
    fn markdown_says_when_nothing_changed() {
        let d = Diff::compare(
            &side("p;a 1\n"),
            &side("p;a 7\n"),
            &DiffOptions {
                gate: Gate {
                    share_pts: Some(1.0),
                    time_pct: None,
                },
                ..DiffOptions::default()
            },
        );
        let md = markdown(
            &d,
            &MarkdownOptions {
                min_share: Some(0.5),
                ..Default::default()
            },
        );
        assert!(
            md.contains(
                "✅ No function grew beyond noise and above the thresholds (share +1 points)."
            ),
            "{md}"
        );
        assert!(md.contains("_No function grew._"));
        assert!(md.contains("_No function shrank._"));
        assert!(md.contains("under 0.5% on both sides"));
    }

    #[test]
    fn markdown_tables_are_capped_at_top() {
        // 15 functions of 1,000 to 15,000 samples that all vanished: each
        // shrank beyond noise, so none folds; ten rows, and the rest counted.
        let base: String = (0..15)
            .map(|i| format!("p;f{i:02} {}\n", (i + 1) * 1000))
            .collect();
        let d = diff(&base, "p;other 100000\n");
        let md = markdown(&d, &MarkdownOptions::default());
        let rows = md.lines().filter(|l| l.contains("*(vanished)*")).count();
        assert_eq!(rows, 10, "{md}");
        assert!(md.contains("_… and 5 more._"), "{md}");
        let all = markdown(
            &d,
            &MarkdownOptions {
                all_rows: true,
                ..Default::default()
            },
        );
        let rows = all.lines().filter(|l| l.contains("*(vanished)*")).count();
        assert_eq!(rows, 15, "{all}");
    }

    #[test]
    fn rows_within_noise_and_below_the_resolution_fold_into_one_line() {
        // `big` grows beyond noise; the twelve specks (a sample or two each,
        // 0.24% of NEW together) could vanish unseen: one line says so.
        let specks: String = (0..12).map(|i| format!("p;speck{i:02} 1\n")).collect();
        let base = "p;big 2000\np;rest 8000\n".to_string();
        let new = format!("p;big 3000\np;rest 7000\n{specks}");
        let d = diff(&base, &new);
        let md = markdown(&d, &MarkdownOptions::default());
        assert!(md.contains("| `big` |"), "{md}");
        assert!(!md.contains("speck"), "{md}");
        assert!(
            md.contains(
                "_12 more functions, all within noise and below the resolution, together 0.1% of the \
                 program (`--all-rows` lists them)._"
            ),
            "{md}"
        );
        let all = markdown(
            &d,
            &MarkdownOptions {
                all_rows: true,
                ..Default::default()
            },
        );
        assert!(all.contains("| `speck00` _(and 11 functions"), "{all}");
        assert!(!all.contains("all within noise"), "{all}");
        // JSON keeps every function.
        let mut out = Vec::new();
        write_diff_json(&d, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["functions"].as_array().unwrap().len(), 14);
    }

    #[test]
    fn off_cpu_weights_read_as_time_blocked_never_samples() {
        let mut base = side("p;main;sleep 800000000\np;main;read 200000000\n");
        let mut new = side("p;main;sleep 900000000\np;main;read 200000000\n");
        for s in [&mut base, &mut new] {
            s.weight_unit = "ns".to_string();
            for r in &mut s.runs {
                r.event = Some("off-cpu".to_string());
                r.ns_per_weight = Some(1.0);
                r.samples = 50;
            }
        }
        let d = Diff::new(&base, &new);
        assert_eq!(d.weight_unit, "ns");
        let md = markdown(&d, &MarkdownOptions::default());
        assert!(
            md.contains("(1 run, 1.00 s blocked) → **new** `NEW` (1 run, 1.10 s blocked)"),
            "{md}"
        );
        assert!(
            md.contains("Time the program spent blocked per run: 1.00 s → 1.10 s"),
            "{md}"
        );
        assert!(md.contains("percent of each side's time blocked"), "{md}");
        assert!(!md.contains("samples)") && !md.contains("CPU time"), "{md}");
        let mut out = Vec::new();
        write_diff_json(&d, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["weight_unit"], "ns");
    }

    #[test]
    fn code_spans_survive_backticks_and_pipes() {
        assert_eq!(code("a|b"), "`a\\|b`");
        assert_eq!(code("x`y"), "``x`y``");
        assert_eq!(code("`q`"), "`` `q` ``");
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(123456), "123,456");
        assert_eq!(seconds(1.5e9), "1.50 s");
        assert_eq!(seconds(2.5e6), "2.5 ms");
        assert_eq!(seconds(2500.0), "2 µs");
    }
}
