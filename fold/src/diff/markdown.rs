//! The Markdown report of a [`Diff`] for CI job summaries: the sides, the
//! gate's verdict, the call paths that grew, the regressions and
//! improvements (rows within noise and below the resolution folded), the
//! resolution and the notes, in words true for the event (samples and CPU
//! time, or time blocked). It only formats what the diff holds and returns
//! plain `io::Result`, so a caller can tell a closed pipe from a real
//! failure.

use std::cmp::Ordering;
use std::io::{self, BufWriter, Write};

use super::compare::{by_growth, group_name, same_samples_groups};
use super::stats::{DispersionBasis, CONFIDENCE_PCT};
use super::{Diff, FunctionDiff, Interval, PathDiff, Verdict};

/// Changes smaller than this (in points) are not listed as regressions or
/// improvements: they would print as `+0.00`.
const LISTED_PCT: f64 = 0.005;

/// Functions listed in the resolution table.
const RESOLUTION_ROWS: usize = 5;

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
            "{assumed}: nearly all samples take one call path, so the runs have nothing to \
             compare it over"
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
#[path = "markdown_tests.rs"]
mod tests;
