//! Helpers shared by the end-to-end tests: run the `flamerec` binary,
//! record (failing with the cause when perf_event_open is unusable, unless
//! FLAMEREC_SKIP_PERF_TESTS=1), fold and read `info --json`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flamerec_samples::{build, frame_is, FramePointers, Sample};

/// The binary under test. Its HOME is a directory of the test build, so
/// fold's default symbol cache never touches the user's.
pub fn flamerec() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flamerec"));
    c.env("HOME", concat!(env!("CARGO_TARGET_TMPDIR"), "/home"));
    c
}

/// A fresh temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// What a run printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Records `cmd` into `out`; `None` when perf tests are skipped.
pub fn record(out: &Path, extra: &[&str], cmd: &[&str]) -> Option<Output> {
    let o = flamerec()
        .arg("record")
        .arg("-q")
        .arg("-o")
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run flamerec");
    let err = stderr(&o);
    if err.contains("perf_event_open") {
        if std::env::var("FLAMEREC_SKIP_PERF_TESTS").as_deref() == Ok("1") {
            eprintln!("skipped (FLAMEREC_SKIP_PERF_TESTS=1): {err}");
            return None;
        }
        panic!("perf_event_open is not usable here, so this test cannot record: {err}");
    }
    Some(o)
}

/// Folded stacks of a recording as (frames root first, count).
pub fn fold(path: &Path, extra: &[&str]) -> Vec<(Vec<String>, u64)> {
    let o = flamerec()
        .arg("fold")
        .args(extra)
        .arg(path)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "fold failed: {}", stderr(&o));
    String::from_utf8(o.stdout)
        .expect("utf-8 folded output")
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("`stack count` line");
            (
                stack.split(';').map(str::to_owned).collect(),
                count.parse().expect("count"),
            )
        })
        .collect()
}

pub fn info_json(path: &Path) -> serde_json::Value {
    let o = flamerec()
        .args(["info", "--json"])
        .arg(path)
        .output()
        .expect("run flamerec info");
    assert!(o.status.success(), "info failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("info --json is JSON")
}

/// Share (0–100) of samples whose stack satisfies `pred`.
pub fn share(stacks: &[(Vec<String>, u64)], pred: impl Fn(&[String]) -> bool) -> f64 {
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let hit: u64 = stacks.iter().filter(|s| pred(&s.0)).map(|s| s.1).sum();
    hit as f64 * 100.0 / total.max(1) as f64
}

pub fn sample_bin(s: Sample, fp: FramePointers) -> PathBuf {
    build(s, fp).unwrap_or_else(|e| panic!("cannot build sample {s}: {e}"))
}

/// Whether perf_event_open works here; panics naming the cause when it does
/// not, unless FLAMEREC_SKIP_PERF_TESTS=1 (then `false`).
pub fn perf_usable() -> bool {
    let dir = tmp();
    record(&dir.path().join("probe.frec"), &["-g", "fp"], &["true"]).is_some()
}

/// Sum of the counts of folded stacks.
pub fn total(stacks: &[(Vec<String>, u64)]) -> u64 {
    stacks.iter().map(|s| s.1).sum()
}

/// Asserts a sample's expected shares (self: leaf frame; total: anywhere in
/// the stack, once per sample) within `flamerec_samples::TOLERANCE_PCT` points.
pub fn assert_expected_shares(stacks: &[(Vec<String>, u64)], sample: Sample) {
    for e in sample.expected() {
        let got = match e.kind {
            flamerec_samples::ShareKind::SelfPct => share(stacks, |s| {
                s.last().is_some_and(|f| frame_is(f, e.function))
            }),
            flamerec_samples::ShareKind::TotalPct => {
                share(stacks, |s| s.iter().any(|f| frame_is(f, e.function)))
            }
        };
        assert!(
            e.matches(got),
            "{sample} {}: {got:.1}% measured, {}% expected",
            e.function,
            e.pct
        );
    }
}
