//! End-to-end tests of `fold --pprof`, `--speedscope` and `--firefox`:
//! real workloads recorded with perf_event_open, exported, and read back by
//! the consumers users open them with — `go tool pprof`, speedscope's own
//! importer in headless Chromium — or, for the Firefox Profiler, by serde.
//! Each export is compared with `fold` of the same recording, so the
//! checks are exact or within printing precision, never statistical.
//!
//! Tests need perf_event_open (and install golang-go, Chromium, npm and
//! perf as root when missing). Where perf events are denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

pub(crate) mod consumers;
mod hostile;
mod inputs;

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::*;
use consumers::{pprof, speedscope_import, top_rows};
use flamerec_samples::{FramePointers, Sample};
use serde_json::Value;

/// pprof prints shares with two decimals; fold's JSON has them exact.
const SHARE_TOLERANCE_PCT: f64 = 0.1;

/// A recording shared by the tests that read it; `None` when perf tests
/// are skipped.
fn recording(sample: Sample, extra: &'static [&'static str]) -> Option<&'static Path> {
    type Made = Option<(tempfile::TempDir, PathBuf)>;
    static MADE: OnceLock<std::sync::Mutex<HashMap<String, &'static Made>>> = OnceLock::new();
    let key = format!("{sample} {extra:?}");
    // A panic while recording must not hide behind a poisoned lock.
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let entry = made.entry(key).or_insert_with(|| {
        let dir = tmp();
        let out = dir.path().join(format!("{sample}.frec"));
        let bin = sample_bin(sample, FramePointers::No);
        let args = sample.args(sample.default_work());
        let cmd: Vec<&str> = std::iter::once(bin.to_str().expect("UTF-8 path"))
            .chain(args.iter().map(String::as_str))
            .collect();
        let made: Made = record(&out, extra, &cmd).map(|o| {
            assert!(o.status.success(), "record {sample}: {}", stderr(&o));
            (dir, out)
        });
        Box::leak(Box::new(made))
    });
    entry.as_ref().map(|(_, p)| p.as_path())
}

/// Runs `flamerec fold ARGS INPUT`, which must succeed quietly on stdout.
fn export(input: &Path, args: &[&str]) {
    let o = flamerec()
        .arg("fold")
        .args(args)
        .arg(input)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "fold {args:?} failed: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "only file outputs were asked for");
}

/// Exports `input` to pprof, speedscope and the Firefox Profiler at once,
/// into `dir` named after `stem`; returns their paths in that order.
fn export_all(input: &Path, dir: &Path, stem: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (pb, ss, ff) = (
        dir.join(format!("{stem}.pb.gz")),
        dir.join(format!("{stem}.speedscope.json")),
        dir.join(format!("{stem}.json.gz")),
    );
    let path = |p: &PathBuf| p.to_str().expect("a UTF-8 path").to_owned();
    let (a, b, c) = (path(&pb), path(&ss), path(&ff));
    export(input, &["--pprof", &a, "--speedscope", &b, "--firefox", &c]);
    (pb, ss, ff)
}

/// `fold --json` of `input` with `args`.
fn summary(input: &Path, args: &[&str], dir: &Path) -> Value {
    let json = dir.join("summary.json");
    let mut all = vec!["--json", json.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    export(input, &all);
    serde_json::from_slice(&std::fs::read(&json).expect("read summary")).expect("summary is JSON")
}

/// Asserts pprof's `-top` rows have the JSON summary's shares; returns
/// the names compared. pprof reports C++/Rust/Go names simplified (no
/// templates, argument lists or paths) and adds up functions whose
/// simplified names agree, so only rows it cannot have rewritten are
/// compared: plain identifiers that one function, and no longer name
/// ending in them, can stand behind.
fn assert_top_matches(top: &str, json: &Value) -> Vec<String> {
    let functions = json["functions"].as_array().expect("functions");
    let names: Vec<&str> = functions
        .iter()
        .map(|f| f["name"].as_str().expect("name"))
        .collect();
    let mut compared = Vec::new();
    for row in top_rows(top) {
        let n = row.name.as_str();
        if !n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let behind: Vec<usize> = (0..names.len())
            .filter(|&i| {
                let m = names[i];
                m == n
                    || [":", ".", "/", ">", " "]
                        .iter()
                        .any(|sep| m.ends_with(&format!("{sep}{n}")))
            })
            .collect();
        let [i] = behind[..] else {
            continue;
        };
        if names[i] != n {
            continue;
        }
        let f = &functions[i];
        let (s, t) = (
            f["self_pct"].as_f64().unwrap(),
            f["total_pct"].as_f64().unwrap(),
        );
        assert!(
            (row.flat_pct - s).abs() <= SHARE_TOLERANCE_PCT
                && (row.cum_pct - t).abs() <= SHARE_TOLERANCE_PCT,
            "{}: pprof flat {}% cum {}%, fold self {s:.3}% total {t:.3}%\n{top}",
            row.name,
            row.flat_pct,
            row.cum_pct
        );
        compared.push(row.name);
    }
    compared
}

fn gunzip_json(path: &Path) -> Value {
    let file = std::fs::File::open(path).expect("open");
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut text)
        .expect("gzip");
    serde_json::from_slice(&text).expect("gzipped JSON")
}

/// Per-thread folded weights: `(pid, tid)` → weight, from `--per-thread` roots.
fn thread_weights(input: &Path, extra: &[&str]) -> HashMap<(u32, u32), u64> {
    let mut args = vec!["--per-thread"];
    args.extend_from_slice(extra);
    let mut out = HashMap::new();
    for (stack, count) in fold(input, &args) {
        // `comm-PID/TID`
        let (_, ids) = stack[0].rsplit_once('-').expect("comm-PID/TID root");
        let (pid, tid) = ids.split_once('/').expect("PID/TID");
        *out.entry((pid.parse().unwrap(), tid.parse().unwrap()))
            .or_insert(0) += count;
    }
    out
}

fn period_ns(input: &Path) -> u64 {
    1_000_000_000
        / info_json(input)["frequency_hz"]
            .as_u64()
            .expect("frequency")
}

#[test]
fn pprof_top_has_the_shares_of_fold_json() {
    let Some(rec) = recording(Sample::CpuMix, &[]) else {
        return;
    };
    let dir = tmp();
    let pb = dir.path().join("cpu-mix.pb.gz");
    export(rec, &["--pprof", pb.to_str().unwrap()]);
    let json = summary(rec, &[], dir.path());
    for index in ["samples", "cpu"] {
        let top = pprof(
            &["-top", "-nodecount=20", &format!("-sample_index={index}")],
            &pb,
        );
        let compared = assert_top_matches(&top, &json);
        for f in ["cpu_mix_alpha", "cpu_mix_beta", "cpu_mix_gamma"] {
            assert!(compared.iter().any(|c| c == f), "{f} not compared:\n{top}");
        }
        // cpu_mix_run has no self time: by flat share it ranks with the
        // kernel's few-sample frames (a cold disk adds block-layer ones);
        // by cumulative share it is near the top.
        let top = pprof(
            &[
                "-top",
                "-cum",
                "-nodecount=20",
                &format!("-sample_index={index}"),
            ],
            &pb,
        );
        let compared = assert_top_matches(&top, &json);
        assert!(
            compared.iter().any(|c| c == "cpu_mix_run"),
            "cpu_mix_run not compared:\n{top}"
        );
    }
    // The cpu value is samples times the period.
    let raw = pprof(&["-raw"], &pb);
    assert!(raw.contains("samples/count cpu/nanoseconds[dflt]"), "{raw}");
    assert!(
        raw.contains(&format!("Period: {}", period_ns(rec))),
        "{raw}"
    );
}

#[test]
fn pprof_raw_shows_thread_labels_and_inlined_lines() {
    let Some(rec) = recording(Sample::InlineHeavy, &[]) else {
        return;
    };
    let dir = tmp();
    let pb = dir.path().join("inline.pb.gz");
    export(rec, &["--pprof", pb.to_str().unwrap()]);
    let raw = pprof(&["-raw"], &pb);
    assert!(raw.contains("comm:[inline-heavy]"), "{raw}");
    let pid = thread_weights(rec, &[]).keys().next().expect("a thread").0;
    assert!(raw.contains(&format!("pid:[{pid}] tid:[{pid}]")), "{raw}");
    // An inlined helper's location continues with the function it is inlined into.
    let lines: Vec<&str> = raw.lines().collect();
    let inlined = lines.windows(2).any(|w| {
        w[0].contains("inline_heavy_alpha")
            && w[1].contains("inline_heavy_run")
            && !is_location_start(w[1])
    });
    assert!(
        inlined,
        "no location of inline_heavy_alpha inlined into inline_heavy_run:\n{raw}"
    );

    let flat = dir.path().join("flat.pb.gz");
    export(rec, &["--no-inline", "--pprof", flat.to_str().unwrap()]);
    let raw = pprof(&["-raw"], &flat);
    let locations = raw.split("\nLocations\n").nth(1).expect("locations");
    let locations = locations.split("\nMappings\n").next().unwrap_or(locations);
    assert!(
        locations.lines().all(is_location_start) && !locations.contains("inline_heavy_alpha"),
        "--no-inline still has inlined lines:\n{locations}"
    );
}

/// `   12: 0x... M=1 name ...`: the first line of a location in `-raw`.
fn is_location_start(line: &str) -> bool {
    line.trim_start()
        .split_once(':')
        .is_some_and(|(id, _)| id.parse::<u64>().is_ok())
}

#[test]
fn speedscope_imports_one_profile_per_thread_with_its_weight() {
    let Some(rec) = recording(Sample::Threads, &[]) else {
        return;
    };
    let dir = tmp();
    let file = dir.path().join("threads.speedscope.json");
    export(rec, &["--speedscope", file.to_str().unwrap()]);
    let ours: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(
        ours["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );

    let got = speedscope_import(&file);
    assert_eq!(got["errors"], Value::Array(vec![]), "{got}");
    assert_eq!(got["alerts"], Value::Array(vec![]), "{got}");
    let weights = thread_weights(rec, &[]);
    let period = period_ns(rec);
    let profiles = got["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), weights.len(), "{got}");
    for ((pid, tid), w) in &weights {
        let tag = format!("(pid {pid}, tid {tid})");
        let p = profiles
            .iter()
            .find(|p| p["name"].as_str().is_some_and(|n| n.ends_with(&tag)))
            .unwrap_or_else(|| panic!("no profile {tag}: {got}"));
        assert_eq!(p["unit"], "nanoseconds");
        assert_eq!(p["total"].as_u64(), Some(w * period), "{tag}");
    }
}

#[test]
fn firefox_profile_has_every_thread_its_samples_and_folds_top_function() {
    let Some(rec) = recording(Sample::Threads, &[]) else {
        return;
    };
    let dir = tmp();
    let file = dir.path().join("threads.json.gz");
    export(rec, &["--firefox", file.to_str().unwrap()]);
    let profile = gunzip_json(&file);
    let threads = profile["threads"].as_array().expect("threads");
    let weights = thread_weights(rec, &[]);
    assert_eq!(threads.len(), weights.len());
    for t in threads {
        let key = (
            t["pid"].as_str().unwrap().parse::<u32>().unwrap(),
            t["tid"].as_str().unwrap().parse::<u32>().unwrap(),
        );
        // cpu-clock samples weigh one each.
        assert_eq!(
            t["samples"]["length"].as_u64(),
            weights.get(&key).copied(),
            "{key:?}"
        );
    }
    // The busiest thread (worker-c) leads with the function fold puts first.
    // Not close: worker-c holds ≈ 50% of ≈ 1,000 samples and worker-b ≈ 33%
    // (each thread's own CPU time, load or not).
    let ((_, tid), _) = weights.iter().max_by_key(|(_, w)| **w).unwrap();
    let t = threads
        .iter()
        .find(|t| t["tid"].as_str() == Some(tid.to_string().as_str()))
        .expect("busiest thread");
    let json = summary(rec, &["--tid", &tid.to_string()], dir.path());
    let functions = json["functions"].as_array().unwrap();
    let top_self = functions.iter().max_by_key(|f| f["self"].as_u64()).unwrap();
    assert_eq!(
        leaf_names(t).first().map(|(n, _)| n.as_str()),
        top_self["name"].as_str()
    );
}

/// Leaf function names of a Firefox thread with their sample weights,
/// heaviest first.
fn leaf_names(t: &Value) -> Vec<(String, u64)> {
    let col = |table: &str, c: &str| t[table][c].as_array().expect("column").clone();
    let (stack_frame, frame_func, func_name) = (
        col("stackTable", "frame"),
        col("frameTable", "func"),
        col("funcTable", "name"),
    );
    let strings = t["stringArray"].as_array().expect("strings");
    let mut by_name: HashMap<String, u64> = HashMap::new();
    let samples = &t["samples"];
    for (stack, w) in samples["stack"]
        .as_array()
        .unwrap()
        .iter()
        .zip(samples["weight"].as_array().unwrap())
    {
        let Some(stack) = stack.as_u64() else {
            continue;
        };
        let frame = stack_frame[stack as usize].as_u64().unwrap();
        let func = frame_func[frame as usize].as_u64().unwrap();
        let name = func_name[func as usize].as_u64().unwrap();
        let name = strings[name as usize].as_str().unwrap().to_string();
        *by_name.entry(name).or_insert(0) += w.as_u64().unwrap_or(0);
    }
    let mut v: Vec<(String, u64)> = by_name.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[test]
fn every_export_keeps_only_the_filtered_threads() {
    let Some(rec) = recording(Sample::Threads, &[]) else {
        return;
    };
    let weights = thread_weights(rec, &[]);
    let ((pid, tid), _) = weights.iter().max_by_key(|(_, w)| **w).unwrap();
    let dir = tmp();
    let (pb, ss, ff) = (
        dir.path().join("t.pb.gz"),
        dir.path().join("t.speedscope.json"),
        dir.path().join("t.json.gz"),
    );
    for filter in [
        vec!["--tid".to_string(), tid.to_string()],
        vec!["--comm".into(), "worker-c".into()],
    ] {
        let mut args: Vec<&str> = filter.iter().map(String::as_str).collect();
        args.extend([
            "--pprof",
            pb.to_str().unwrap(),
            "--speedscope",
            ss.to_str().unwrap(),
        ]);
        args.extend(["--firefox", ff.to_str().unwrap()]);
        export(rec, &args);
        let raw = pprof(&["-raw"], &pb);
        let tids: Vec<&str> = raw.matches("tid:[").collect();
        assert!(!tids.is_empty());
        assert!(
            raw.lines()
                .filter(|l| l.contains("tid:["))
                .all(|l| l.contains(&format!("pid:[{pid}] tid:[{tid}]"))),
            "{filter:?}: other threads in the pprof:\n{raw}"
        );
        let s: Value = serde_json::from_slice(&std::fs::read(&ss).unwrap()).unwrap();
        assert_eq!(s["profiles"].as_array().unwrap().len(), 1, "{filter:?}");
        let f = gunzip_json(&ff);
        let threads = f["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 1, "{filter:?}");
        assert_eq!(threads[0]["tid"], tid.to_string());
    }
}

#[test]
fn completions_name_the_subcommands_and_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let o = flamerec().args(["completions", shell]).output().unwrap();
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = String::from_utf8(o.stdout).unwrap();
        // fish spells long options `-l pprof`.
        let flag = if shell == "fish" {
            "-l pprof"
        } else {
            "--pprof"
        };
        assert!(
            script.contains("record") && script.contains(flag),
            "{shell}:\n{script}"
        );
    }
    let o = flamerec().args(["completions", "tcsh"]).output().unwrap();
    assert!(!o.status.success());
}
