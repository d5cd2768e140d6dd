//! End-to-end tests of `flamerec diff`: real recordings of the cpu-mix sample
//! compared with themselves and with a deliberate slowdown, and folded-text
//! inputs as a CI job would pass them.
//!
//! Tests that record need perf_event_open. Where it is denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{compile_c, flamerec, sample_bin, stderr, tmp};
use flamerec_samples::{FramePointers, Sample};
use flamerec_testkit::folded;

/// Records `cmd` into `out` with frame pointers; `None` when perf tests are skipped.
///
/// At 4999 Hz: two recordings of cpu-mix (≈ 1 s) differ by sampling alone,
/// and at 999 Hz (≈ 1,000 samples each) the difference of two 30% shares
/// has a standard deviation of 2 points, so the 5-point tolerance was 2.4σ
/// (CI saw −6.4). With ≈ 5,000 samples each it is 0.9 points: 5 points is 5.4σ.
fn record(out: &Path, cmd: &[&str]) -> Option<()> {
    let o = crate::common::record(out, &["-g", "fp", "-F", "4999"], cmd)?;
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

/// Margins: every function's total and self share may differ by 5 points
/// between two runs; at ≈ 5,000 samples a side the difference of two 50%
/// shares has a binomial standard deviation of 1.0 point (see `record`).
/// Shares are of each run's own CPU time, and the samples a busy machine
/// adds when it preempts a run are taken in interrupt context, which diff
/// leaves out of the shares (its report says how many): load moves
/// neither side. Counts follow CPU time, not the wall clock.
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
        // The tolerance assumes ≈ 5,000 samples a side (see `record`); at
        // 3,000 it is still 3.9 sd.
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
        // ≥ 20% by construction, ≈ 100% for cpu_mix_run.
        assert!(pct(&f["base"]["total_pct"]) > 10.0, "{f}");
    }
    // All but start-up and exit (a few ms of ≈ 1 s).
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
        err.contains("cpu_mix_gamma (share +"),
        "names the offender: {err}"
    );
    for innocent in ["cpu_mix_alpha", "cpu_mix_beta", "cpu_mix_run"] {
        assert!(!err.contains(innocent), "{innocent} did not grow: {err}");
    }
    // Outputs are written before the gate trips, so CI can upload them.
    let v = read_json(&json);
    let gamma = function(&v, "cpu_mix_gamma");
    // 20% → 42.9%: ≈ 5,000 and ≈ 7,000 samples give the difference a
    // binomial standard deviation of 0.8 points, and 5 points are 6 of them;
    // shares of each run's own CPU time, load or not.
    let grew = pct(&gamma["total_delta_pct"]);
    assert!(
        (grew - 22.9).abs() <= 5.0,
        "gamma grew {grew} points: {gamma}"
    );
    assert_eq!(gamma["module"], "cpu-mix");
    // ≈ 100% on both sides, short of it only by start-up and exit (≈ 0.1%).
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
    // Of the three leaves, gamma leads (the whole program's callers, which
    // got faster by the same time, may stand above it).
    let leaf = improvements
        .lines()
        .find(|l| l.starts_with("| `cpu_mix_") && !l.starts_with("| `cpu_mix_run"));
    assert!(
        leaf.is_some_and(|r| r.starts_with("| `cpu_mix_gamma` |") && r.ends_with("| shrank |")),
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
    assert!(
        stderr(&o).contains("layout (share +21.98 points"),
        "{}",
        stderr(&o)
    );
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
        err.contains("cannot open") && err.contains("missing.frec"),
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

/// Records cpu-mix with `args` at 4999 Hz (≈ 5,000 samples a run), frame
/// pointers; `None` when perf tests are skipped.
fn record_cpu_mix(out: &Path, args: &[&str]) -> Option<()> {
    let bin = cpu_mix();
    let mut cmd = vec![bin.to_str().unwrap()];
    cmd.extend_from_slice(args);
    record(out, &cmd)
}

/// `n` recordings of cpu-mix for each (stem, args) of `kinds`, named
/// `{stem}{i}.frec` in `dir`, made interleaved (one of each kind, then the
/// next round) as the gate's users are told to: a machine that slows down
/// between two batches moves one batch, and no statistic over the runs
/// tells that from a change of the program (a helper's A/A run tripped on
/// +8% that way while VMs booted beside it).
fn runs(dir: &Path, n: usize, kinds: &[(&str, &[&str])]) -> Option<Vec<Vec<PathBuf>>> {
    let mut out = vec![Vec::new(); kinds.len()];
    for i in 0..n {
        for (k, (stem, args)) in kinds.iter().enumerate() {
            let path = dir.join(format!("{stem}{i}.frec"));
            record_cpu_mix(&path, args)?;
            out[k].push(path);
        }
    }
    Some(out)
}

/// `diff --base BASE... --new NEW... ARGS --json PATH`, its output and JSON.
fn gate(
    dir: &Path,
    base: &[PathBuf],
    new: &[PathBuf],
    args: &[&str],
) -> (Output, serde_json::Value) {
    let json = dir.join("gate.json");
    let o = flamerec()
        .arg("diff")
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .arg("--base")
        .args(base)
        .arg("--new")
        .args(new)
        .output()
        .expect("run flamerec diff");
    (o, read_json(&json))
}

/// The thresholds the README's CI example uses.
const README_GATE: [&str; 4] = ["--fail-time-above", "5", "--fail-above", "2"];

fn interval(v: &serde_json::Value) -> (f64, f64, f64) {
    (pct(&v["estimate"]), pct(&v["low"]), pct(&v["high"]))
}

/// The gate against the construction of cpu-mix, three runs a side.
///
/// Margins, for a loaded 2-core machine: each run is ≈ 5,000 samples, so
/// `cpu_mix_beta` (30%) has ≈ 4,500 a side and its time ratio a sampling
/// standard error of ≈ 1.8%; the work is register-only xorshift, whose CPU
/// time per unit moves little with the other core's load (measured on a
/// quiet machine: the runs' totals spread ≈ 1%), but a loaded one moved a
/// side's mean by ≈ 3% (the beta side's program time measured +6.2% for
/// +3%), the same for every function of a run: the difference of two
/// 3-run means then has ≈ 2 points of sd on top of sampling. Tolerances:
/// program time ±6 points (A/A) and ±8 (30% slower), ≥ 3σ of that; beta's
/// time ±9 points (its sampling 1.8 and the runs' 2 give ≈ 2.7: 3.3σ); ±3
/// points of share, which no speed moves (≥ 4σ of a 4,500-sample
/// binomial). The regression to catch is beta 20% slower: with three runs a
/// side the gate's stated resolution for beta is +8 to +11% (bench/RESULTS.md,
/// beside two busy loops), so 20% is about twice it and, at ≈ 3.5 points of
/// standard error under a CPU hog, 3σ above where its interval would reach
/// zero. 10% is near the resolution: caught 20 times in 20 in the bench, but
/// one stress run of the suite missed it — a rate, which the bench measures.
/// (cpu-mix's rounds once ran in a fixed order, and a 4999 Hz clock aliased
/// with their ≈ 30 µs period: beta=20 measured +13–15% and moved alpha +3%.
/// They start at a pseudo-random function now.) An A/A comparison trips only
/// past both its 99% interval and the thresholds.
#[test]
fn the_gate_knows_time_runs_and_noise() {
    let dir = tmp();
    let kinds: [(&str, &[&str]); 4] = [
        ("base", &[]),
        ("same", &[]),
        ("beta", &["--slower", "beta=20"]),
        ("all", &["--slower", "all=30"]),
    ];
    let Some(pools) = runs(dir.path(), 3, &kinds) else {
        return;
    };
    let [base, same, beta, all] = [&pools[0], &pools[1], &pools[2], &pools[3]];

    // A/A: identical builds do not trip.
    let (o, v) = gate(dir.path(), base, same, &README_GATE);
    assert!(o.status.success(), "A/A tripped: {}", stderr(&o));
    assert_eq!(
        (v["base_runs"].as_u64(), v["new_runs"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(v["noise"]["run_spread_measured"], true);
    let t = interval(&v["time"]["change_pct"]);
    assert!(
        t.0.abs() < 6.0 && t.1 < t.0 && t.0 < t.2,
        "program time {t:?}"
    );
    // Shares still follow the construction (50/30/20, ±5 points).
    for (name, share) in [
        ("cpu_mix_alpha", 50.0),
        ("cpu_mix_beta", 30.0),
        ("cpu_mix_gamma", 20.0),
    ] {
        let f = function(&v, name);
        assert!((pct(&f["base"]["self_pct"]) - share).abs() < 5.0, "{f}");
        assert!(pct(&f["base"]["self_ns"]) > 0.0, "{f}");
    }

    // One function much slower: caught (by its time, or by its share when
    // the machine's spread between runs widened the time interval: both are
    // the gate's to use), and named first.
    let (o, v) = gate(dir.path(), base, beta, &README_GATE);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("cpu_mix_beta ("), "{err}");
    // Interrupt entry frames are not the program's: never named.
    assert!(!err.contains("asm_"), "interrupt frames named: {err}");
    // The other leaves did not change. Each is named only past its own 99%
    // interval, which an unchanged function crosses about once in a hundred
    // comparisons by construction (one stress round saw gamma at +9.5%,
    // interval +0.5…+19.4%, and named): asserting it never happens would
    // fail at that rate. What must hold is that beta is named first and the
    // innocents' estimates stay near zero: their time ratios have ≈ 3.7
    // points of standard error under two busy loops (gamma's interval
    // above), so ±15 points is 4σ, while beta's +20 is found within ±10.
    let first_leaf = ["cpu_mix_alpha (", "cpu_mix_beta (", "cpu_mix_gamma ("]
        .into_iter()
        .filter_map(|n| err.find(n).map(|at| (at, n)))
        .min();
    assert_eq!(first_leaf.map(|(_, n)| n), Some("cpu_mix_beta ("), "{err}");
    for innocent in ["cpu_mix_alpha", "cpu_mix_gamma"] {
        let f = function(&v, innocent);
        let (est, _, _) = interval(&f["time_change_pct"]);
        assert!(est.abs() < 15.0, "{innocent} moved: {f}");
    }
    let b = function(&v, "cpu_mix_beta");
    let (est, _, high) = interval(&b["time_change_pct"]);
    assert!((est - 20.0).abs() < 10.0 && high > 20.0, "{b}");
    // Its share: 30 → 3.6/10.6 = 34.0%.
    let share = pct(&b["new"]["total_pct"]);
    assert!((share - 34.0).abs() < 3.0, "{b}");
    assert!(b["trips"] == "time" || b["trips"] == "share", "{b}");
    assert!(pct(&b["detectable_time_pct"]) > 0.0, "{b}");
    let md = flamerec()
        .arg("diff")
        .args(README_GATE)
        .arg("--base")
        .args(base)
        .arg("--new")
        .args(beta)
        .output()
        .expect("diff");
    let md = String::from_utf8(md.stdout).unwrap();
    let regressions = md.split("### Regressions").nth(1).unwrap();
    let regressions = regressions.split("### Improvements").next().unwrap();
    // Its callers (main, cpu_mix_run, ...) hold its growth: the whole
    // program's, +6%, passes the 5% threshold, so they trip with it. The report lists where the time went first (added self
    // time): beta leads.
    let first = regressions
        .lines()
        .skip_while(|l| !l.starts_with("|:--"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.starts_with("| `cpu_mix_beta` |"), "{md}");
    assert!(md.contains("### Resolution"), "{md}");

    // Every function 30% slower: shares stay, time trips.
    let (o, v) = gate(dir.path(), base, all, &README_GATE);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("with the same samples (time +"), "{err}");
    // The estimate strays under load (one `.ci/stress-tests` round beside
    // two busy loops measured +38.4%, interval +24.0…+54.5): within 8
    // points of the truth, or the interval the gate reports holds it.
    let t = interval(&v["time"]["change_pct"]);
    let covered = t.1 <= 30.0 && 30.0 <= t.2;
    assert!(
        ((t.0 - 30.0).abs() < 8.0 || covered) && t.1 > 5.0,
        "program time {t:?}"
    );
    for name in ["cpu_mix_alpha", "cpu_mix_beta", "cpu_mix_gamma"] {
        let f = function(&v, name);
        assert!(pct(&f["total_delta_pct"]).abs() < 3.0, "{f}");
    }
    // By shares alone (the old gate, at the README's share threshold) it
    // passes: shares did not move. A leaf's share change has ≈ 0.4 points of
    // standard error with three runs a side under two busy loops, so 2 points
    // is 5σ; at 1 point one CI run saw gamma at +1.20 (interval +0.06…+2.33)
    // trip, an unchanged leaf crossing its 99% interval and a threshold 2.5σ
    // out.
    let (o, _) = gate(dir.path(), base, all, &["--fail-above", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The bug this gate was built for: one run a side, a 30% uniform
    // slowdown, passed. One run assumes a 5% spread between runs (±≈14% at
    // 99%), so 30% trips.
    let (o, v) = gate(dir.path(), &base[..1], &all[..1], &README_GATE);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(v["noise"]["run_spread_measured"], false);
    assert!(
        v["notes"][0].as_str().unwrap().contains("One run per side"),
        "{v}"
    );
}

/// The program of issue 39: four callers (parse_input 49%, compute_hash
/// 29%, render 20%, log_message 2%) spend all their time in one shared
/// leaf, `work`; its second argument is compute_hash's work in percent.
const SHARED_LEAF: &str = include_str!("programs/shared-leaf/shared-leaf.c");

/// The shared-leaf program built with frame pointers and no tail calls, so
/// every stack reads main → caller → work.
fn shared_leaf(dir: &Path) -> PathBuf {
    compile_c(
        dir,
        "shared-leaf",
        SHARED_LEAF,
        &[
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ],
    )
}

/// A caller of a shared leaf 20% slower, three runs a side, interleaved:
/// the gate names the call path `compute_hash → work` first on stderr and
/// in the Markdown, the dispersion is measured over call paths (one leaf
/// holds every sample) and the report says so; one run a side says that
/// instead.
///
/// Margins, for a loaded 2-core machine: at 4999 Hz a run of ≈ 1 s is ≈
/// 5,000 samples, compute_hash ≈ 1,450 of them (≈ 4,350 a side). The path
/// is judged by its time: its log ratio has ≈ 0.011 of sampling standard
/// error, and the runs' spread (at least the prior-weighted 2.4% with three
/// runs a side, ≈ 3% beside two busy loops) adds ≈ 0.025, so ≈ 0.03 in
/// all; +20% is 0.18, its 99% bound ≈ 0.09: the truth is 3σ above it. The
/// gate trips on time or share, and the share alone (28.6% → 32.5%, SE
/// ≈ 0.3 points) passes the README's 2 points by 6σ. The search climbs from
/// `work` to `compute_hash → work` only while the other callers' 70% stays
/// within its interval (±≈ 6% at 99%): interleaved runs keep a machine that
/// slows down from moving one side alone (an A/A batch beside this one moved
/// the program +0.4%). (At 999 Hz, runs of ≈ 1 s resolve only ≈ +22% for
/// compute_hash: too close to 20% for a test; see docs/design-notes.md.)
#[test]
fn a_slower_caller_of_a_shared_leaf_is_named_by_its_call_path() {
    let dir = tmp();
    let bin = shared_leaf(dir.path());
    let bin = bin.to_str().unwrap();
    let (mut base, mut new) = (Vec::new(), Vec::new());
    for i in 0..3 {
        for (pct, runs) in [("100", &mut base), ("120", &mut new)] {
            let path = dir.path().join(format!("hash{pct}-{i}.frec"));
            let Some(()) = record(&path, &[bin, "7000", pct]) else {
                return;
            };
            runs.push(path);
        }
    }
    let md = dir.path().join("d.md");
    let mut args = README_GATE.to_vec();
    args.extend(["--markdown", md.to_str().unwrap()]);
    let (o, v) = gate(dir.path(), &base, &new, &args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let named = err.split_once("threshold: ").map_or("", |(_, n)| n);
    assert!(named.starts_with("compute_hash → work ("), "{err}");
    assert_eq!(
        v["paths"][0]["frames"],
        serde_json::json!(["compute_hash", "work"]),
        "{v}"
    );
    assert_eq!(v["noise"]["dispersion_over"], "call_paths", "{v}");
    assert_eq!(v["noise"]["dispersion_frames"], 2, "{v}");

    let md = std::fs::read_to_string(&md).expect("Markdown written");
    let verdict = md.lines().find(|l| l.starts_with("❌")).unwrap_or_default();
    assert!(verdict.contains(":** `compute_hash → work`"), "{md}");
    let paths = md.find("### Call paths that grew").expect("a paths table");
    assert!(paths < md.find("### Regressions").unwrap(), "{md}");
    let first = md[paths..]
        .lines()
        .skip_while(|l| !l.starts_with("|:--"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.starts_with("| `compute_hash → work` |"), "{md}");
    assert!(
        md.contains("(measured over call paths of 2 frames: the samples end in too few leaf"),
        "{md}"
    );
    assert!(!md.contains("one run per side"), "{md}");

    // One run a side: nothing to measure either spread with, and the
    // report gives that reason for both.
    let o = diff(&["--markdown", "-"], &base[0], &new[0]);
    assert!(o.status.success(), "{}", stderr(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(
        md.contains("spreads assumed 5.0%: one run per side"),
        "{md}"
    );
    assert!(
        md.contains("as much (variance) as sampling alone gives: one run per side."),
        "{md}"
    );
}

/// Off-CPU weights are nanoseconds blocked: the report says time blocked,
/// never samples or CPU time. Not statistical: only words are asserted.
#[test]
fn an_off_cpu_diff_reads_in_time_blocked() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.frec"), dir.path().join("b.frec"));
    for path in [&a, &b] {
        let Some(o) = crate::common::record(
            path,
            &["-e", "off-cpu"],
            &["sh", "-c", "sleep 0.1; sleep 0.1"],
        ) else {
            return;
        };
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = diff(&["--markdown", "-"], &a, &b);
    assert!(o.status.success(), "{}", stderr(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    let sides = md
        .lines()
        .find(|l| l.starts_with("**Base**"))
        .unwrap_or_default();
    assert_eq!(sides.matches(" blocked)").count(), 2, "{md}");
    assert!(
        md.contains("Time the program spent blocked per run: "),
        "{md}"
    );
    assert!(md.contains("percent of each side's time blocked"), "{md}");
    assert!(
        !sides.contains("samples") && !md.contains("CPU time"),
        "{md}"
    );
}

#[test]
fn sides_that_measured_different_things_are_refused_or_explained() {
    let dir = tmp();
    let clock = dir.path().join("clock.frec");
    let Some(()) = record_cpu_mix(&clock, &["--units", "100000"]) else {
        return;
    };
    let task = dir.path().join("task.frec");
    let o = crate::common::record(
        &task,
        &["-e", "task-clock", "-g", "fp"],
        &[cpu_mix().to_str().unwrap(), "--units", "100000"],
    )
    .expect("recording");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = diff(&[], &clock, &task);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("records cpu-clock") && err.contains("task-clock") && err.contains("same -e"),
        "{err}"
    );

    // Different frequencies: compared in nanoseconds, and said.
    let slow = dir.path().join("slow.frec");
    let o = crate::common::record(
        &slow,
        &["-g", "fp", "-F", "999"],
        &[cpu_mix().to_str().unwrap(), "--units", "100000"],
    )
    .expect("recording");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = diff(&["--markdown", "-"], &clock, &slow);
    assert!(o.status.success(), "{}", stderr(&o));
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(
        md.contains("different frequencies (999 Hz, 4999 Hz)"),
        "{md}"
    );
    assert!(md.contains("CPU time of the program per run"), "{md}");

    // A folded side: no time; shares compared, the time gate cannot apply.
    let folded = dir.path().join("f.folded");
    let text = flamerec().arg("fold").arg(&clock).output().expect("fold");
    std::fs::write(&folded, &text.stdout).unwrap();
    let o = diff(
        &["--fail-time-above", "5", "--markdown", "-"],
        &folded,
        &clock,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--fail-time-above needs CPU time"),
        "{}",
        stderr(&o)
    );
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(
        md.contains("is folded text: no CPU time, so shares are compared"),
        "{md}"
    );

    // An empty side is an error, not a pass.
    let empty = dir.path().join("empty.folded");
    std::fs::write(&empty, "# nothing\n").unwrap();
    let o = diff(&["--fail-above", "1"], &clock, &empty);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("NEW holds no samples"), "{err}");

    // --base needs --new, and the two spellings do not mix.
    for args in [
        vec!["diff", "--base", "a"],
        vec!["diff", "a", "--base", "b", "--new", "c"],
        vec!["diff", "a"],
    ] {
        let o = flamerec().args(&args).output().expect("run");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

/// Runs merge wherever a profile is read: `fold` (folded text and the
/// exports) and `view` take several recordings and add them up.
#[test]
fn several_runs_fold_view_and_export_as_one_profile() {
    let dir = tmp();
    let (a, b) = (dir.path().join("a.frec"), dir.path().join("b.frec"));
    let Some(()) = record_cpu_mix(&a, &["--units", "100000"]) else {
        return;
    };
    record_cpu_mix(&b, &["--units", "100000", "--slower", "beta=50"]).expect("recording");
    let sum = |args: &[&Path]| -> u64 {
        let o = flamerec().arg("fold").args(args).output().expect("fold");
        assert!(o.status.success(), "{}", stderr(&o));
        folded::stacks(&String::from_utf8(o.stdout).unwrap())
            .iter()
            .map(|s| s.1)
            .sum()
    };
    let (sa, sb) = (sum(&[&a]), sum(&[&b]));
    assert!(sa > 0 && sb > 0);
    assert_eq!(sum(&[&a, &b]), sa + sb);

    // The time-ordered exports keep both runs: one after the other.
    let speedscope = dir.path().join("s.json");
    let o = flamerec()
        .arg("fold")
        .arg("--speedscope")
        .arg(&speedscope)
        .args([&a, &b])
        .output()
        .expect("fold");
    assert!(o.status.success(), "{}", stderr(&o));
    let v = read_json(&speedscope);
    let samples: usize = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["samples"].as_array().unwrap().len())
        .sum();
    assert_eq!(samples as u64, sa + sb, "{v}");

    let html = dir.path().join("v.html");
    let o = flamerec()
        .args(["view", "--html"])
        .arg(&html)
        .arg("--base")
        .args([&a, &b])
        .output()
        .expect("view");
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("a.frec (+1 more)"),
        "the title names the runs"
    );
}
