//! perf.data input: a workload recorded with `perf record -F 999 -g` folds
//! to the same leaf functions, in the same shares, as `perf script` shows.
//!
//! Needs `/usr/bin/perf` and perf_event_open; set `FLAMEREC_SKIP_PERF_TESTS=1`
//! where they are unavailable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use flamerec_fold::{fold_recording, FoldOptions};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};

use crate::support::folded;

/// Three functions whose time splits about 50/30/20.
const WORKLOAD: &str = r#"
#include <stdint.h>
static volatile uint64_t sink;
static inline __attribute__((always_inline)) void spin(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) x = x * 6364136223846793005u + 1442695040888963407u; sink = x; }
__attribute__((noinline)) void pd_alpha(void) { spin(50000000); }
__attribute__((noinline)) void pd_beta(void) { spin(30000000); }
__attribute__((noinline)) void pd_gamma(void) { spin(20000000); }
int main(void) { for (int r = 0; r < 8; r++) { pd_alpha(); pd_beta(); pd_gamma(); } return 0; }
"#;

/// The skip rule: `true` (said on stderr) under FLAMEREC_SKIP_PERF_TESTS=1,
/// else a failure naming `why`.
fn skip(why: &str) -> bool {
    skip_or_fail(SKIP_PERF, why);
    true
}

/// Leaf function shares in percent, from folded lines or `perf script`.
fn shares(counts: HashMap<String, u64>) -> HashMap<String, f64> {
    let total: u64 = counts.values().sum();
    counts
        .into_iter()
        .map(|(k, v)| (k, v as f64 * 100.0 / total.max(1) as f64))
        .collect()
}

/// `perf script` blocks: a header line, then frames leaf first as
/// `ADDR SYMBOL+0xOFF (DSO)`. Unknown symbols become `DSO-basename+?`, the
/// spelling flamerec's `module+0xOFFSET` is normalized to below.
fn perf_script_leaves(text: &str) -> HashMap<String, u64> {
    let mut leaves = HashMap::new();
    for block in text.split("\n\n") {
        let mut lines = block.lines().filter(|l| !l.trim().is_empty());
        let (Some(_header), Some(leaf)) = (lines.next(), lines.next()) else {
            continue;
        };
        let rest = leaf.trim().split_once(' ').map_or("", |(_, r)| r);
        let (sym, dso) = match rest.rfind(" (") {
            Some(i) => (&rest[..i], rest[i + 2..].trim_end_matches(')')),
            None => (rest, ""),
        };
        let sym = match sym.rfind("+0x") {
            Some(i) => &sym[..i],
            None => sym,
        };
        let name = if sym == "[unknown]" {
            format!("{}+?", dso.rsplit('/').next().unwrap_or(dso))
        } else {
            sym.to_string()
        };
        *leaves.entry(name).or_insert(0) += 1;
    }
    leaves
}

fn flamerec_leaves(folded_text: &str) -> HashMap<String, u64> {
    let mut leaves = HashMap::new();
    for (stack, count) in flamerec_testkit::folded::stacks(folded_text) {
        let leaf = stack.rsplit(';').next().unwrap_or(&stack);
        let leaf = match leaf.rfind("+0x") {
            Some(i) => format!("{}+?", &leaf[..i]),
            None => leaf.to_string(),
        };
        *leaves.entry(leaf).or_insert(0) += count;
    }
    leaves
}

/// Compiles [`WORKLOAD`] with `cflags` and records it with `perf record
/// -F 999` plus `perf_args`; `None` when perf is unavailable and the test
/// may be skipped.
fn record(dir: &Path, cflags: &[&str], perf_args: &[&str]) -> Option<PathBuf> {
    if !Path::new("/usr/bin/perf").exists() && skip("/usr/bin/perf is not installed") {
        return None;
    }
    let src = dir.join("pd.c");
    std::fs::write(&src, WORKLOAD).expect("write");
    let prog = dir.join("pd");
    let cc = Command::new("cc")
        .args(cflags)
        .args(["-g", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(cc.success());
    let data = dir.join("perf.data");
    let rec = Command::new("/usr/bin/perf")
        .args(["record", "-q", "-F", "999"])
        .args(perf_args)
        .arg("-o")
        .arg(&data)
        .arg("--")
        .arg(&prog)
        .output()
        .expect("run perf record");
    if !rec.status.success()
        && skip(&format!(
            "perf record failed: {}",
            String::from_utf8_lossy(&rec.stderr).trim()
        ))
    {
        return None;
    }
    Some(data)
}

/// Share of the total under `main;F` as the leaf, for each of the three functions.
fn split_under_main(text: &str, total: u64) -> [f64; 3] {
    let stacks = flamerec_testkit::folded::stacks(text);
    ["pd_alpha", "pd_beta", "pd_gamma"].map(|f| {
        stacks
            .iter()
            .filter(|(s, _)| s.ends_with(&format!("main;{f}")))
            .map(|(_, n)| n)
            .sum::<u64>() as f64
            * 100.0
            / total.max(1) as f64
    })
}

#[test]
fn dwarf_perf_data_is_unwound_without_frame_pointers() {
    let dir = tempfile::tempdir().expect("dir");
    let flags = ["-O1", "-fomit-frame-pointer", "-fno-optimize-sibling-calls"];
    let Some(data) = record(dir.path(), &flags, &["--call-graph", "dwarf"]) else {
        return;
    };
    let inlined = folded(&fold_recording(&data, &FoldOptions::default()).expect("fold"));
    assert!(inlined.contains("main;pd_alpha;spin "), "{inlined}");
    let opts = {
        let mut o = FoldOptions::default();
        o.names.inline = false;
        o
    };
    let prof = fold_recording(&data, &opts).expect("fold perf.data");
    assert_eq!(prof.metadata.call_graph, "dwarf");
    let text = folded(&prof);
    assert!(
        text.contains("pd;_start;"),
        "unwound to the entry point:\n{text}"
    );
    let [a, b, g] = split_under_main(&text, prof.total_weight);
    assert!(
        (a - 50.0).abs() < 8.0 && (b - 30.0).abs() < 8.0 && (g - 20.0).abs() < 8.0,
        "alpha {a:.1} beta {b:.1} gamma {g:.1}\n{text}"
    );
}

#[test]
fn perf_data_folds_to_perfs_own_leaf_functions() {
    let dir = tempfile::tempdir().expect("dir");
    // -O0 keeps every frame pointer, so `-g` stacks are whole.
    let Some(data) = record(dir.path(), &["-O0"], &["-g"]) else {
        return;
    };
    let script = Command::new("/usr/bin/perf")
        .args(["script", "-F", "comm,tid,time,ip,sym,dso", "-i"])
        .arg(&data)
        .output()
        .expect("perf script");
    assert!(script.status.success());
    let want = shares(perf_script_leaves(&String::from_utf8_lossy(&script.stdout)));

    let opts = {
        let mut o = FoldOptions::default();
        o.names.inline = false;
        o
    };
    let prof = fold_recording(&data, &opts).expect("fold perf.data");
    assert!(prof.samples > 500, "only {} samples", prof.samples);
    let text = folded(&prof);
    let got = shares(flamerec_leaves(&text));

    let mut top: Vec<(&String, &f64)> = want.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
    for (name, share) in top.iter().take(5).filter(|(_, s)| **s >= 1.0) {
        let ours = got.get(*name).copied().unwrap_or(0.0);
        assert!(
            (ours - **share).abs() <= 1.0,
            "leaf {name}: perf {share:.1}%, flamerec {ours:.1}%\n{text}"
        );
    }
    // The stacks are whole: each of the three functions under main.
    let [a, b, g] = split_under_main(&text, prof.total_weight);
    assert!(
        (a - 50.0).abs() < 8.0 && (b - 30.0).abs() < 8.0 && (g - 20.0).abs() < 8.0,
        "alpha {a:.1} beta {b:.1} gamma {g:.1}\n{text}"
    );
    assert!(
        prof.warnings.iter().all(|w| !w.contains("damaged")),
        "{:?}",
        prof.warnings
    );

    // Damaged copies fold what they can or fail in one line, never panic.
    let bytes = std::fs::read(&data).expect("read perf.data");
    let bad = dir.path().join("bad.data");
    let step = (bytes.len() / 20).max(1);
    for pos in (0..bytes.len())
        .step_by(step)
        .chain([1, 8, 16, 40, 64, 100])
    {
        let mut m = bytes.clone();
        m[pos] ^= 0x5a;
        for variant in [&m[..], &bytes[..pos]] {
            std::fs::write(&bad, variant).expect("write");
            if let Err(e) = fold_recording(&bad, &opts) {
                assert!(!e.to_string().contains('\n'), "{e}");
            }
        }
    }
}
