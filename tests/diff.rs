//! End-to-end tests of `flamerec diff`: real recordings of the cpu-mix sample
//! compared with themselves and with a deliberate slowdown, and folded-text
//! inputs as a CI job would pass them.
//!
//! Tests that record need perf_event_open. Where it is denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{flamerec, sample_bin, stderr, tmp};
use flamerec_samples::{FramePointers, Sample};

/// Records `cmd` into `out` with frame pointers; `None` when perf tests are skipped.
///
/// At 4999 Hz: two recordings of cpu-mix (≈ 1 s) differ by sampling alone,
/// and at 999 Hz (≈ 1,000 samples each) the difference of two 30% shares
/// has a standard deviation of 2 points, so the 5-point tolerance was 2.4σ
/// (CI saw −6.4). With ≈ 5,000 samples each it is 0.9 points: 5 points is 5.4σ.
fn record(out: &Path, cmd: &[&str]) -> Option<()> {
    let o = common::record(out, &["-g", "fp", "-F", "4999"], cmd)?;
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    Some(())
}

fn cpu_mix() -> PathBuf {
    sample_bin(Sample::CpuMix, FramePointers::Yes)
}

fn diff(args: &[&str], base: &Path, new: &Path) -> Output {
    flamerec()
        .arg("diff")
        .args(args)
        .arg(base)
        .arg(new)
        .output()
        .expect("run flamerec diff")
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read(path).expect("diff JSON written");
    serde_json::from_slice(&text).expect("diff JSON parses")
}

/// The entry of `name` in a flamerec-diff/1 object.
fn function<'a>(json: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    json["functions"]
        .as_array()
        .expect("functions array")
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} missing from the diff"))
}

fn pct(v: &serde_json::Value) -> f64 {
    v.as_f64().expect("a number")
}

#[test]
fn two_recordings_of_the_same_sample_differ_by_at_most_5_points() {
    let bin = cpu_mix();
    let dir = tmp();
    let (a, b) = (dir.path().join("a.frec"), dir.path().join("b.frec"));
    let Some(()) = record(&a, &[bin.to_str().unwrap()]) else {
        return;
    };
    record(&b, &[bin.to_str().unwrap()]).expect("second recording");
    let (json, svg, md) = (
        dir.path().join("d.json"),
        dir.path().join("d.svg"),
        dir.path().join("d.md"),
    );
    let o = diff(
        &[
            "--fail-above",
            "5",
            "--json",
            json.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
        &a,
        &b,
    );
    assert!(o.status.success(), "diff failed: {}", stderr(&o));
    assert!(
        o.stdout.is_empty(),
        "outputs went to files, stdout stays quiet"
    );

    let v = read_json(&json);
    assert_eq!(v["schema"], "flamerec-diff/1");
    assert!(
        // The tolerance assumes ≈ 5,000 samples a side (see `record`).
        v["base_samples"].as_u64().unwrap() > 3000,
        "{}",
        v["base_samples"]
    );
    assert!(
        v["new_samples"].as_u64().unwrap() > 3000,
        "{}",
        v["new_samples"]
    );
    // Tolerance: 5 percentage points (flamerec_samples::TOLERANCE_PCT).
    for f in v["functions"].as_array().unwrap() {
        for key in ["total_delta_pct", "self_delta_pct"] {
            assert!(
                pct(&f[key]).abs() <= flamerec_samples::TOLERANCE_PCT,
                "{} {key} = {}",
                f["name"],
                f[key]
            );
        }
    }
    for name in [
        "cpu_mix_alpha",
        "cpu_mix_beta",
        "cpu_mix_gamma",
        "cpu_mix_run",
    ] {
        let f = function(&v, name);
        assert_eq!(f["module"], "cpu-mix", "{f}");
        assert!(pct(&f["base"]["total_pct"]) > 10.0, "{f}");
    }
    let run = function(&v, "cpu_mix_run");
    assert!(pct(&run["new"]["total_pct"]) > 95.0, "{run}");

    let svg = std::fs::read_to_string(&svg).expect("SVG written");
    assert!(
        svg.contains("<svg") && svg.contains("cpu_mix_run ("),
        "not a flamegraph"
    );
    let md = std::fs::read_to_string(&md).expect("Markdown written");
    assert!(md.contains("✅"), "the gate held: {md}");
}

#[test]
fn a_slowdown_in_one_function_is_caught_by_fail_above() {
    let bin = cpu_mix();
    let dir = tmp();
    let base = dir.path().join("base.frec");
    let Some(()) = record(&base, &[bin.to_str().unwrap()]) else {
        return;
    };
    // The same sample with a deliberate regression: cpu_mix_gamma does three
    // times its work, which moves its share from 20% to 6/14 ≈ 43%.
    let new = dir.path().join("slow.frec");
    let Some(()) = record(&new, &[bin.to_str().unwrap(), "--slow-gamma", "3"]) else {
        return;
    };

    let json = dir.path().join("d.json");
    let md = dir.path().join("d.md");
    let o = diff(
        &[
            "--fail-above",
            "5",
            "--json",
            json.to_str().unwrap(),
            "--markdown",
            md.to_str().unwrap(),
        ],
        &base,
        &new,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("flamerec: error: "), "{err}");
    assert!(
        err.contains("cpu_mix_gamma (+"),
        "names the offender: {err}"
    );
    for innocent in ["cpu_mix_alpha", "cpu_mix_beta", "cpu_mix_run"] {
        assert!(!err.contains(innocent), "{innocent} did not grow: {err}");
    }
    // Outputs are written before the gate trips, so CI can upload them.
    let v = read_json(&json);
    let gamma = function(&v, "cpu_mix_gamma");
    let grew = pct(&gamma["total_delta_pct"]);
    assert!(
        (grew - 22.9).abs() <= 5.0,
        "gamma grew {grew} points: {gamma}"
    );
    assert_eq!(gamma["module"], "cpu-mix");
    let run = function(&v, "cpu_mix_run");
    assert!(pct(&run["total_delta_pct"]).abs() < 1.0, "{run}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("❌") && md.contains("`cpu_mix_gamma`"), "{md}");

    // The other way round gamma got faster: it leads the improvements, and
    // without --fail-above the exit status is 0 whatever changed.
    let o = diff(&[], &new, &base);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = String::from_utf8(o.stdout).unwrap();
    let improvements = report
        .split("### Improvements")
        .nth(1)
        .unwrap_or_else(|| panic!("Markdown report on stdout: {report}"));
    let first_row = improvements.lines().find(|l| l.starts_with("| `"));
    assert!(
        first_row.is_some_and(|r| r.starts_with("| `cpu_mix_gamma` |")),
        "{report}"
    );
}

#[test]
fn folded_inputs_gate_filter_and_print_json_to_stdout() {
    let dir = tmp();
    let base = dir.path().join("base.folded");
    let new = dir.path().join("new.folded");
    std::fs::write(
        &base,
        "# base\napp;main;parse 40\napp;main;render 50\napp;main;log 10\n",
    )
    .unwrap();
    std::fs::write(
        &new,
        "app;main;parse 40\napp;main;render 30\napp;main;render;layout 20\napp;main;cache lookup 1\n",
    )
    .unwrap();
    let o = diff(&["--json", "-", "--min-share", "2"], &base, &new);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    // `cache lookup` is under 2% on both sides; log vanished (10 → 0).
    assert!(!names.contains(&"cache lookup"), "{names:?}");
    assert!(
        names.contains(&"log") && names.contains(&"layout"),
        "{names:?}"
    );
    assert_eq!(v["new_samples"], 91);

    let o = diff(&["--fail-above", "15", "--json", "-"], &base, &new);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("layout (+21.98)"), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("render"),
        "render's total barely moved"
    );
}

#[test]
fn unreadable_inputs_are_one_line_errors() {
    let dir = tmp();
    let good = dir.path().join("good.folded");
    std::fs::write(&good, "p;a 1\n").unwrap();
    let bad = dir.path().join("bad.folded");
    std::fs::write(&bad, "p;a 1\n\np;b lots\n").unwrap();
    let o = diff(&[], &good, &bad);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.folded:3: ") && err.contains("`lots` is not a whole number"),
        "{err}"
    );

    let missing = dir.path().join("missing.frec");
    let o = diff(&[], &missing, &good);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot read") && err.contains("missing.frec"),
        "{err}"
    );

    // A damaged magic is read as text, and said to be neither.
    let binary = dir.path().join("junk.frec");
    std::fs::write(&binary, b"FLAMEREX\x00\xff\xfe\x01").unwrap();
    let err = stderr(&diff(&[], &good, &binary));
    assert!(err.contains("junk.frec:1: not UTF-8"), "{err}");

    let o = diff(&["--fail-above", "150"], &good, &good);
    assert_eq!(o.status.code(), Some(2), "clap rejects it: {}", stderr(&o));
}
