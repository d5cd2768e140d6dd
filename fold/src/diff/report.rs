//! Text outputs of a [`Diff`]: the `flamerec-diff/1` JSON object and a
//! Markdown report for CI job summaries. They only format what the diff
//! holds; they return plain `io::Result` so a caller can tell a closed pipe
//! from a real failure.

use std::cmp::Ordering;
use std::io::{self, BufWriter, Write};

use serde::Serialize;

use super::compare::{by_growth, group_name, same_samples_groups};
use super::stats::CONFIDENCE_PCT;
use super::{Diff, FunctionDiff, Interval, Trip, Verdict};

/// Schema name of the diff JSON. Fields added since its first version
/// (runs, times, intervals, verdicts, the gate, noise, notes) are additive:
/// a reader of the first version reads this one.
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
        base_samples: diff.base_samples,
        new_samples: diff.new_samples,
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
    };
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &doc)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[derive(Serialize)]
struct Json<'a> {
    schema: &'static str,
    base_samples: u64,
    new_samples: u64,
    base_runs: usize,
    new_runs: usize,
    confidence_pct: f64,
    time: Option<JsonTime>,
    interrupts: JsonInterrupts,
    noise: JsonNoise,
    gate: JsonGate<'a>,
    notes: &'a [String],
    functions: Vec<JsonFunction<'a>>,
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
}

impl Default for MarkdownOptions {
    fn default() -> Self {
        MarkdownOptions {
            base_label: "BASE".to_string(),
            new_label: "NEW".to_string(),
            top: 10,
            min_share: None,
        }
    }
}

/// Writes a Markdown report: the program's time, the gate's verdict (with
/// thresholds), the top regressions and improvements with their intervals
/// and verdicts, the comparison's resolution for its largest functions, the
/// samples left to the machine, and notes on the method's inputs.
pub fn write_diff_markdown<W: Write>(
    diff: &Diff,
    opts: &MarkdownOptions,
    out: W,
) -> io::Result<()> {
    let mut out = BufWriter::new(out);
    let timed = diff.time.is_some();
    writeln!(out, "## flamerec diff")?;
    writeln!(out)?;
    writeln!(
        out,
        "**Base** {} ({}, {} samples) → **new** {} ({}, {} samples).",
        code(&opts.base_label),
        plural(diff.base_runs, "run"),
        thousands(diff.base_samples),
        code(&opts.new_label),
        plural(diff.new_runs, "run"),
        thousands(diff.new_samples),
    )?;
    if let Some(t) = &diff.time {
        writeln!(
            out,
            "CPU time of the program per run: {} → {} (**{}**, {CONFIDENCE_PCT}% interval {}).",
            seconds(t.base_ns),
            seconds(t.new_ns),
            signed_pct(t.change.estimate),
            range(&t.change, "%"),
        )?;
    }
    writeln!(
        out,
        "Shares are percent of each side's program samples; share changes are in points; \
         intervals are {CONFIDENCE_PCT}%."
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
            let names: Vec<String> = same_samples_groups(&tripped)
                .iter()
                .map(|g| grouped_name(g))
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
    table(&mut out, &regressions, opts.top, timed, "No function grew.")?;
    writeln!(out, "### Improvements ({what} shrank)")?;
    writeln!(out)?;
    table(
        &mut out,
        &improvements,
        opts.top,
        timed,
        "No function shrank.",
    )?;
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

fn table<W: Write>(
    out: &mut W,
    rows: &[&FunctionDiff],
    top: usize,
    timed: bool,
    none: &str,
) -> io::Result<()> {
    if rows.is_empty() {
        writeln!(out, "_{none}_")?;
        return writeln!(out);
    }
    if timed {
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
    // Functions with the same samples (a chain of callers) are one row.
    let shown: Vec<(&FunctionDiff, String)> = same_samples_groups(rows)
        .into_iter()
        .map(|g| (g[0], grouped_name(&g)))
        .collect();
    let total = shown.len();
    for (f, name) in shown.into_iter().take(top) {
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
    if total > top {
        writeln!(out)?;
        writeln!(out, "_… and {} more._", total - top)?;
    }
    writeln!(out)
}

/// A group of functions with the same samples, as a row name.
fn grouped_name(group: &[&FunctionDiff]) -> String {
    match group_name(group) {
        (name, 0) => code(&name),
        (name, more) => format!(
            "{} _(and {} with the same samples)_",
            code(&name),
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
    let spread = if diff.noise.run_spread_df.is_some() {
        format!(
            "measured {:.1}% between runs of a side",
            diff.noise.run_spread * 100.0
        )
    } else {
        format!(
            "assumed {:.1}%: one run per side",
            diff.noise.run_spread * 100.0
        )
    };
    let shares = if diff.noise.dispersion_df.is_some() {
        format!(
            "shares vary between runs {:.2}× as much (variance) as sampling alone gives",
            diff.noise.dispersion
        )
    } else {
        format!(
            "shares are assumed to vary between runs {:.0}× as much (variance) as sampling \
             alone gives: one run per side",
            diff.noise.dispersion
        )
    };
    writeln!(
        out,
        "Noise: the program's time spreads {spread}; {shares}. Sampling noise shrinks with \
         more samples (a higher -F, longer runs), the spread between runs with more runs per \
         side."
    )?;
    writeln!(out)
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
                "schema",
                "time"
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
        let base: String = (0..15).map(|i| format!("p;f{i:02} {}\n", i + 1)).collect();
        let d = diff(&base, "p;other 1\n");
        let md = markdown(&d, &MarkdownOptions::default());
        let rows = md.lines().filter(|l| l.contains("*(vanished)*")).count();
        assert_eq!(rows, 10, "{md}");
        assert!(md.contains("_… and 5 more._"), "{md}");
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
