//! Text outputs of a [`Diff`]: the `flamerec-diff/1` JSON object and a
//! Markdown report for CI job summaries. They only format what the diff
//! holds; they return plain `io::Result` so a caller can tell a closed pipe
//! from a real failure.

use std::cmp::Ordering;
use std::io::{self, BufWriter, Write};

use serde::Serialize;

use super::{Diff, FunctionDiff};

/// Schema name of the diff JSON.
pub const DIFF_SCHEMA: &str = "flamerec-diff/1";

/// Changes smaller than this (in points) are not listed as regressions or
/// improvements: they would print as `+0.00`.
const LISTED_PCT: f64 = 0.005;

/// Writes the diff as one JSON object (schema `flamerec-diff/1`), functions
/// in the diff's order (largest total change first).
pub fn write_diff_json<W: Write>(diff: &Diff, out: W) -> io::Result<()> {
    let doc = Json {
        schema: DIFF_SCHEMA,
        base_samples: diff.base_samples,
        new_samples: diff.new_samples,
        functions: diff
            .functions
            .iter()
            .map(|f| JsonFunction {
                name: &f.name,
                module: &f.module,
                base: JsonShares {
                    self_pct: f.base.self_pct,
                    total_pct: f.base.total_pct,
                },
                new: JsonShares {
                    self_pct: f.new.self_pct,
                    total_pct: f.new.total_pct,
                },
                self_delta_pct: f.self_delta_pct,
                total_delta_pct: f.total_delta_pct,
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
    functions: Vec<JsonFunction<'a>>,
}

#[derive(Serialize)]
struct JsonFunction<'a> {
    name: &'a str,
    module: &'a str,
    base: JsonShares,
    new: JsonShares,
    self_delta_pct: f64,
    total_delta_pct: f64,
}

#[derive(Serialize)]
struct JsonShares {
    self_pct: f64,
    total_pct: f64,
}

/// What the Markdown report says besides the numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkdownOptions {
    /// Name of the BASE input (e.g. its path).
    pub base_label: String,
    /// Name of the NEW input.
    pub new_label: String,
    /// Rows per table.
    pub top: usize,
    /// The `--fail-above` threshold, if any: the report says whether it held.
    pub fail_above: Option<f64>,
    /// The `--min-share` threshold, if any, so the report says what was left out.
    pub min_share: Option<f64>,
}

impl Default for MarkdownOptions {
    fn default() -> Self {
        MarkdownOptions {
            base_label: "BASE".to_string(),
            new_label: "NEW".to_string(),
            top: 10,
            fail_above: None,
            min_share: None,
        }
    }
}

/// Writes a Markdown report: the gate's verdict (with `fail_above`), then the
/// top regressions and the top improvements by change of total share, as
/// GitHub-flavored tables. New and vanished functions are marked.
pub fn write_diff_markdown<W: Write>(
    diff: &Diff,
    opts: &MarkdownOptions,
    out: W,
) -> io::Result<()> {
    let mut out = BufWriter::new(out);
    writeln!(out, "## flamerec diff")?;
    writeln!(out)?;
    writeln!(
        out,
        "**Base** {} ({} samples) → **new** {} ({} samples). Shares are percent of each \
         side's samples; changes are in percentage points.",
        code(&opts.base_label),
        thousands(diff.base_samples),
        code(&opts.new_label),
        thousands(diff.new_samples),
    )?;
    if let Some(min) = opts.min_share {
        writeln!(out, "Functions under {min}% on both sides are left out.")?;
    }
    writeln!(out)?;

    if let Some(limit) = opts.fail_above {
        let grew = diff.grew_more_than(limit);
        if grew.is_empty() {
            writeln!(
                out,
                "✅ No function's total share grew by more than {limit} points."
            )?;
        } else {
            let names: Vec<String> = grew.iter().map(|f| code(&f.name)).collect();
            writeln!(
                out,
                "❌ **{} grew by more than {limit} points:** {}.",
                plural(grew.len(), "function"),
                names.join(", ")
            )?;
        }
        writeln!(out)?;
    }

    let mut regressions: Vec<&FunctionDiff> = diff
        .functions
        .iter()
        .filter(|f| f.total_delta_pct >= LISTED_PCT)
        .collect();
    regressions.sort_by(|a, b| by_change(b, a));
    let mut improvements: Vec<&FunctionDiff> = diff
        .functions
        .iter()
        .filter(|f| f.total_delta_pct <= -LISTED_PCT)
        .collect();
    improvements.sort_by(|a, b| by_change(a, b));

    writeln!(out, "### Regressions (total share grew)")?;
    writeln!(out)?;
    table(&mut out, &regressions, opts.top, "No function grew.")?;
    writeln!(out, "### Improvements (total share shrank)")?;
    writeln!(out)?;
    table(&mut out, &improvements, opts.top, "No function shrank.")?;
    out.flush()
}

/// Ascending by total change, then self change, then name.
fn by_change(a: &FunctionDiff, b: &FunctionDiff) -> Ordering {
    a.total_delta_pct
        .partial_cmp(&b.total_delta_pct)
        .unwrap_or(Ordering::Equal)
        .then_with(|| {
            a.self_delta_pct
                .partial_cmp(&b.self_delta_pct)
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| b.name.cmp(&a.name))
}

fn table<W: Write>(out: &mut W, rows: &[&FunctionDiff], top: usize, none: &str) -> io::Result<()> {
    if rows.is_empty() {
        writeln!(out, "_{none}_")?;
        return writeln!(out);
    }
    writeln!(
        out,
        "| function | module | base total | new total | Δ total | Δ self |"
    )?;
    writeln!(out, "|:--|:--|--:|--:|--:|--:|")?;
    for f in rows.iter().take(top) {
        let mark = if f.is_new() {
            " *(new)*"
        } else if f.vanished() {
            " *(vanished)*"
        } else {
            ""
        };
        writeln!(
            out,
            "| {}{mark} | {} | {:.2}% | {:.2}% | **{:+.2}** | {:+.2} |",
            code(&f.name),
            if f.module.is_empty() {
                String::new()
            } else {
                code(&f.module)
            },
            f.base.total_pct,
            f.new.total_pct,
            f.total_delta_pct,
            f.self_delta_pct,
        )?;
    }
    if rows.len() > top {
        writeln!(out)?;
        writeln!(out, "_… and {} more._", rows.len() - top)?;
    }
    writeln!(out)
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

    use super::super::Side;
    use super::*;

    fn diff(base: &str, new: &str) -> Diff {
        let side = |t: &str| Side::from_folded(t.as_bytes(), Path::new("t")).unwrap();
        Diff::new(&side(base), &side(new))
    }

    fn markdown(d: &Diff, opts: &MarkdownOptions) -> String {
        let mut out = Vec::new();
        write_diff_markdown(d, opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn json_follows_the_schema() {
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
        assert_eq!(
            fs[0],
            serde_json::json!({
                "name": "c", "module": "",
                "base": { "self_pct": 0.0, "total_pct": 0.0 },
                "new": { "self_pct": 50.0, "total_pct": 50.0 },
                "self_delta_pct": 50.0, "total_delta_pct": 50.0
            })
        );
        let names: Vec<&str> = fs.iter().map(|f| f["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["c", "a", "b", "main"]);
        let obj = v.as_object().unwrap();
        let mut keys: Vec<&String> = obj.keys().collect();
        keys.sort();
        assert_eq!(keys, ["base_samples", "functions", "new_samples", "schema"]);
    }

    #[test]
    fn markdown_lists_regressions_and_improvements_with_marks() {
        let d = diff(
            "p;main;a 50\np;main;gone 20\np;main;b 30\n",
            "p;main;a 40\np;main;fresh 30\np;main;b 30\n",
        );
        let md = markdown(
            &d,
            &MarkdownOptions {
                fail_above: Some(5.0),
                ..Default::default()
            },
        );
        assert!(md.starts_with("## flamerec diff\n"), "{md}");
        assert!(md.contains("(100 samples)"), "{md}");
        assert!(
            md.contains("❌ **1 function grew by more than 5 points:** `fresh`."),
            "{md}"
        );
        assert!(
            md.contains("| `fresh` *(new)* |  | 0.00% | 30.00% | **+30.00** | +30.00 |"),
            "{md}"
        );
        let improvements = md.split("### Improvements").nth(1).unwrap();
        let gone = improvements.find("`gone` *(vanished)*").unwrap();
        let a = improvements.find("| `a` |").unwrap();
        assert!(gone < a, "largest shrinkage first: {md}");
        assert!(
            !md.contains("| `b` |"),
            "unchanged functions are not listed: {md}"
        );
        assert!(!md.contains("| `main` |"), "{md}");
    }

    #[test]
    fn markdown_says_when_nothing_changed() {
        let d = diff("p;a 1\n", "p;a 7\n");
        let md = markdown(
            &d,
            &MarkdownOptions {
                fail_above: Some(1.0),
                min_share: Some(0.5),
                ..Default::default()
            },
        );
        assert!(md.contains("✅ No function's total share grew by more than 1 points."));
        assert!(md.contains("_No function grew._"));
        assert!(md.contains("_No function shrank._"));
        assert!(md.contains("under 0.5% on both sides"));
    }

    #[test]
    fn markdown_tables_are_capped_at_top() {
        let base: String = (0..15).map(|i| format!("p;f{i:02} 1\n")).collect();
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
    }
}
