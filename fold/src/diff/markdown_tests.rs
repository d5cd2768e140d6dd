//! Tests of the Markdown report: verdicts, words true for the event, rows
//! capped and folded.

use std::path::Path;

use super::super::{write_diff_json, DiffOptions, Gate, Side};
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
        md.contains("✅ No function grew beyond noise and above the thresholds (share +1 points)."),
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

#[test]
fn the_noise_sentence_gives_the_reason_that_holds() {
    let runs = |texts: &[&str]| Side::merge(texts.iter().map(|t| side(t)).collect());
    // Three runs a side, every sample on one path: nothing to measure over.
    let one = runs(&[
        "p;main;work 1000\n",
        "p;main;work 990\n",
        "p;main;work 1010\n",
    ]);
    let md = markdown(&Diff::new(&one, &one), &MarkdownOptions::default());
    assert!(
        md.contains("as sampling alone gives: nearly all samples take one call path"),
        "{md}"
    );
    assert!(!md.contains("one run per side"), "{md}");
    // Two leaves: measured over them.
    let two = runs(&[
        "p;a 500\np;b 500\n",
        "p;a 520\np;b 480\n",
        "p;a 490\np;b 510\n",
    ]);
    let md = markdown(&Diff::new(&two, &two), &MarkdownOptions::default());
    assert!(md.contains("(measured over leaf functions)"), "{md}");
}
