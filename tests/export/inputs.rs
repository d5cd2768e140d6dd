//! Every kind of input and event the exports take: off-CPU recordings
//! (weights in nanoseconds), perf.data, and folded text (pprof only of the
//! exports; its other outputs are tested in `tests/inputs.rs`).

use serde_json::Value;

use super::consumers::{self, pprof, speedscope_import};
use super::{
    assert_top_matches, export, export_all, gunzip_json, recording, summary, thread_weights,
};
use crate::common::*;
use flamerec_samples::{FramePointers, Sample};

#[test]
fn off_cpu_exports_weigh_blocked_nanoseconds() {
    let Some(rec) = recording(Sample::Sleeper, &["-e", "off-cpu"]) else {
        return;
    };
    let dir = tmp();
    let (pb, ss, ff) = export_all(rec, dir.path(), "off");
    let json = summary(rec, &[], dir.path());
    let total_ns = json["total_samples"].as_u64().unwrap();
    // 0.8 s of sleeps by construction; a busy machine only adds (each
    // wake-up's wait for a CPU counts), so 0.5 s is a floor with room.
    assert!(
        total_ns > 500_000_000,
        "sleeper blocks 0.8 s, fold says {total_ns} ns"
    );

    let raw = pprof(&["-raw"], &pb);
    assert!(raw.contains("off_cpu/nanoseconds[dflt]"), "{raw}");
    let top = pprof(&["-top", "-nodecount=20"], &pb);
    assert!(!assert_top_matches(&top, &json).is_empty(), "{top}");

    let got = speedscope_import(&ss);
    assert_eq!(got["errors"], Value::Array(vec![]), "{got}");
    let sum: u64 = got["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["total"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, total_ns);

    let f = gunzip_json(&ff);
    let mut ms = 0.0;
    for t in f["threads"].as_array().unwrap() {
        assert_eq!(t["samples"]["weightType"], "tracing-ms");
        ms += t["samples"]["weight"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap())
            .sum::<f64>();
    }
    // Sums of fractional milliseconds: exact but for float rounding.
    assert!(
        (ms - total_ns as f64 / 1e6).abs() < 1e-3,
        "{ms} ms vs {total_ns} ns"
    );
}

#[test]
fn perf_data_exports_like_a_recording() {
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let data = dir.path().join("perf.data");
    let bin = sample_bin(Sample::CpuMix, FramePointers::Yes);
    let o = std::process::Command::new(consumers::perf())
        .args(["record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .args(Sample::CpuMix.args(Sample::CpuMix.default_work()))
        .output()
        .expect("run perf record");
    assert!(o.status.success(), "perf record failed: {}", stderr(&o));
    let (pb, ss, ff) = export_all(&data, dir.path(), "p");
    let json = summary(&data, &[], dir.path());
    let top = pprof(&["-top", "-nodecount=20"], &pb);
    let compared = assert_top_matches(&top, &json);
    assert!(compared.iter().any(|c| c == "cpu_mix_alpha"), "{top}");
    let got = speedscope_import(&ss);
    assert_eq!(got["errors"], Value::Array(vec![]), "{got}");
    let weights = thread_weights(&data, &[]);
    assert_eq!(got["profiles"].as_array().unwrap().len(), weights.len());
    assert_eq!(
        gunzip_json(&ff)["threads"].as_array().unwrap().len(),
        weights.len()
    );
}

#[test]
fn folded_text_exports_to_pprof_only() {
    let Some(rec) = recording(Sample::Threads, &[]) else {
        return;
    };
    let dir = tmp();
    let folded = dir.path().join("threads.folded");
    export(rec, &["-o", folded.to_str().unwrap()]);
    let pb = dir.path().join("folded.pb.gz");
    export(&folded, &["--pprof", pb.to_str().unwrap()]);
    let json = summary(rec, &[], dir.path());
    let top = pprof(&["-top", "-nodecount=20"], &pb);
    let compared = assert_top_matches(&top, &json);
    assert!(compared.iter().any(|c| c == "threads_worker_c"), "{top}");
    assert!(pprof(&["-raw"], &pb).contains("comm:[worker-b]"));

    // --comm filters the roots; what folded text cannot filter is an error.
    export(
        &folded,
        &["--comm", "worker-a", "--pprof", pb.to_str().unwrap()],
    );
    let raw = pprof(&["-raw"], &pb);
    assert!(
        raw.contains("comm:[worker-a]") && !raw.contains("comm:[worker-b]"),
        "{raw}"
    );
    for (args, needle) in [
        (vec!["--speedscope", "x.json"], "no time axis"),
        (vec!["--firefox", "x.json.gz"], "no time axis"),
        (
            vec!["--pid", "1"],
            "--pid: folded text carries no process ids",
        ),
        (vec!["--no-inline"], "--no-inline"),
    ] {
        let mut all = args.clone();
        all.extend(["--pprof", pb.to_str().unwrap()]);
        let o = flamerec()
            .arg("fold")
            .args(&all)
            .arg(&folded)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(
            err.starts_with("flamerec: error: ") && err.contains(needle),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
