//! The exports of a small synthetic recording, read back: pprof decoded with
//! the same prost types, speedscope and Firefox JSON with serde.

use std::io::{Read, Write};

use flamerec_format::{
    write_names, Frame, KernelSymbol, Metadata, Module, ModuleKind, Sample, Totals, Writer,
};
use prost::Message;
use serde_json::Value;

use super::{proto, write_firefox, write_pprof, write_speedscope, Kept, Measure};
use crate::{fold_recording, FoldOptions, Profile};

const KBASE: u64 = 0xffff_ffff_8100_0000;
/// File offsets of the app's frames.
const MAIN_OFF: u64 = 0x1100;
const WORK_OFF: u64 = 0x2200;

/// pid 10 runs `main` (tid 10) and `worker` (tid 11); pid 20 reuses tid 11
/// later. Samples: main 1, worker 3 (one of them with a kernel leaf), pid
/// 20 two; times given out of order once. `work` holds `inner` inlined.
fn recording(off_cpu: bool) -> Vec<u8> {
    let meta = Metadata {
        command: vec!["/opt/app".into(), "--fast".into()],
        event: if off_cpu { "off-cpu" } else { "cpu-clock" }.into(),
        frequency_hz: if off_cpu { 0 } else { 1000 },
        weight_unit: if off_cpu { "ns" } else { "samples" }.into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        embeds_names: true,
        ..Default::default()
    };
    let mut w = Writer::new(Vec::new(), &meta).unwrap();
    let kernel = w.module(&Module {
        kind: ModuleKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        build_id: Vec::new(),
    });
    w.kernel_symbol(&KernelSymbol {
        start: KBASE,
        size: 0x100,
        name: "do_syscall_64".into(),
        module: String::new(),
    });
    let libc = w.module(&Module {
        kind: ModuleKind::File,
        path: "/lib/libc.so.6".into(),
        build_id: vec![0x11],
    });
    let app = w.module(&Module {
        kind: ModuleKind::File,
        path: "/opt/app".into(),
        build_id: vec![0xab, 0xcd],
    });
    let start = w.frame(Frame {
        module: libc,
        address: 0x50,
    });
    let main = w.frame(Frame {
        module: app,
        address: MAIN_OFF,
    });
    let work = w.frame(Frame {
        module: app,
        address: WORK_OFF,
    });
    let sys = w.frame(Frame {
        module: kernel,
        address: KBASE + 8,
    });
    let s_main = w.stack(&[start, main]);
    let s_work = w.stack(&[start, main, work]);
    let s_sys = w.stack(&[start, main, work, sys]);
    w.comm(0, 10, 10, "main", true);
    w.comm(0, 10, 11, "worker", false);
    w.comm(0, 20, 20, "other", true);
    let weight = |w: u64| if off_cpu { w * 1_500_000 } else { 1 };
    let mut sample = |time_ns, pid, tid, stack, wt| {
        w.sample(Sample {
            time_ns,
            pid,
            tid,
            stack,
            weight: weight(wt),
        });
    };
    sample(1_000, 10, 10, s_main, 1);
    sample(3_000, 10, 11, s_work, 2);
    sample(2_000, 10, 11, s_sys, 1);
    sample(4_000, 10, 11, s_work, 1);
    sample(5_000, 20, 11, s_main, 1);
    sample(6_000, 20, 11, s_work, 1);
    let mut bytes = w
        .finish(Totals {
            duration_ns: 10_000,
            ..Default::default()
        })
        .unwrap();
    let names = vec![
        (start, vec!["_start".to_string()]),
        (main, vec!["main".to_string()]),
        (work, vec!["work".to_string(), "inner".to_string()]),
    ];
    write_names(&mut bytes, &names, true).unwrap();
    bytes
}

fn fold(bytes: &[u8], opts: FoldOptions) -> Profile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    fold_recording(
        f.path(),
        &FoldOptions {
            keep_samples: true,
            ..opts
        },
    )
    .unwrap()
}

fn pprof_of(p: &Profile) -> proto::Profile {
    let mut gz = Vec::new();
    write_pprof(p, &mut gz).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .unwrap();
    proto::Profile::decode(raw.as_slice()).unwrap()
}

fn speedscope_of(p: &Profile) -> Value {
    let mut out = Vec::new();
    write_speedscope(p, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap()
}

fn firefox_of(p: &Profile) -> Value {
    let mut gz = Vec::new();
    write_firefox(p, &mut gz).unwrap();
    serde_json::from_reader(flate2::read::GzDecoder::new(gz.as_slice())).unwrap()
}

#[test]
fn pprof_has_values_labels_inlined_lines_and_file_offsets() {
    let p = pprof_of(&fold(&recording(false), FoldOptions::default()));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(types, [("samples", "count"), ("cpu", "nanoseconds")]);
    assert_eq!(s(p.default_sample_type), "cpu");
    assert_eq!(p.period, 1_000_000);
    assert_eq!(p.time_nanos, 1_700_000_000_000_000_000);
    let total: Vec<i64> = (0..2)
        .map(|i| p.sample.iter().map(|x| x.value[i]).sum())
        .collect();
    assert_eq!(total, [6, 6_000_000]);

    // One sample per (thread, stack); the worker's kernel leaf sample.
    assert_eq!(p.sample.len(), 5);
    let label = |x: &proto::Sample, k: &str| {
        let l = x.label.iter().find(|l| s(l.key) == k).unwrap();
        if l.str != 0 {
            s(l.str).to_string()
        } else {
            l.num.to_string()
        }
    };
    let sys = p.sample.iter().find(|x| x.location_id.len() == 4).unwrap();
    assert_eq!(
        (label(sys, "pid"), label(sys, "tid"), label(sys, "comm")),
        ("10".into(), "11".into(), "worker".into())
    );

    // Leaf first; the inlined function first within its location.
    let loc = |id: u64| &p.location[id as usize - 1];
    let fname = |id: u64| s(p.function[id as usize - 1].name);
    let lines: Vec<Vec<&str>> = sys
        .location_id
        .iter()
        .map(|&l| loc(l).line.iter().map(|ln| fname(ln.function_id)).collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["do_syscall_64"],
            vec!["inner", "work"],
            vec!["main"],
            vec!["_start"]
        ]
    );

    // The command's binary is the first mapping; its addresses map back
    // to file offsets, the kernel's stay absolute.
    let app = &p.mapping[0];
    assert_eq!((s(app.filename), s(app.build_id)), ("/opt/app", "abcd"));
    assert!(app.has_functions && app.has_inline_frames);
    let work = loc(sys.location_id[1]);
    assert_eq!(work.mapping_id, app.id);
    assert_eq!(work.address - app.memory_start + app.file_offset, WORK_OFF);
    assert!(work.address < app.memory_limit);
    let k = loc(sys.location_id[0]);
    assert_eq!(k.address, KBASE + 8);
    let libc = p
        .mapping
        .iter()
        .find(|m| s(m.filename) == "/lib/libc.so.6")
        .unwrap();
    assert!(libc.memory_start >= app.memory_limit || libc.memory_limit <= app.memory_start);
}

#[test]
fn no_inline_and_filters_reach_the_exports() {
    let mut opts = FoldOptions {
        pids: vec![10],
        ..Default::default()
    };
    opts.names.inline = false;
    let p = fold(&recording(false), opts);
    let pb = pprof_of(&p);
    assert!(pb.location.iter().all(|l| l.line.len() == 1));
    assert!(!pb.mapping[0].has_inline_frames);
    assert!(!pb.string_table.iter().any(|s| s == "inner" || s == "other"));
    assert_eq!(speedscope_of(&p)["profiles"].as_array().unwrap().len(), 2);
    assert_eq!(firefox_of(&p)["threads"].as_array().unwrap().len(), 2);
}

#[test]
fn speedscope_has_a_time_ordered_profile_per_thread() {
    let f = speedscope_of(&fold(&recording(false), FoldOptions::default()));
    assert_eq!(f["$schema"], super::SPEEDSCOPE_SCHEMA);
    let frames: Vec<&str> = f["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    let profiles = f["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "main (pid 10, tid 10)",
            "worker (pid 10, tid 11)",
            "worker (pid 20, tid 11)"
        ]
    );
    // The worker of pid 10 has the most weight.
    assert_eq!(f["activeProfileIndex"], 1);
    let worker = &profiles[1];
    assert_eq!(
        (worker["type"].as_str(), worker["unit"].as_str()),
        (Some("sampled"), Some("nanoseconds"))
    );
    assert_eq!(worker["endValue"], 3_000_000);
    assert_eq!(
        worker["weights"],
        serde_json::json!([1_000_000, 1_000_000, 1_000_000])
    );
    // Time order: the kernel sample (t = 2 µs) before the others.
    let leaves: Vec<&str> = worker["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| frames[s.as_array().unwrap().last().unwrap().as_u64().unwrap() as usize])
        .collect();
    assert_eq!(leaves, ["do_syscall_64", "inner", "inner"]);
    let first: Vec<&str> = worker["samples"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| frames[i.as_u64().unwrap() as usize])
        .collect();
    assert_eq!(first, ["_start", "main", "work", "inner", "do_syscall_64"]);
}

#[test]
fn firefox_has_a_track_per_thread_grouped_by_process() {
    let f = firefox_of(&fold(&recording(false), FoldOptions::default()));
    let threads = f["threads"].as_array().unwrap();
    let ids: Vec<(&str, &str, &str)> = threads
        .iter()
        .map(|t| {
            (
                t["pid"].as_str().unwrap(),
                t["tid"].as_str().unwrap(),
                t["processName"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&("10", "10", "main")) && ids.contains(&("10", "11", "main")));
    // A tid seen again in another process is told apart.
    assert!(ids.contains(&("20", "11.1", "other")), "{ids:?}");
    for t in threads {
        let samples = &t["samples"];
        assert_eq!(samples["weightType"], "samples");
        let cpu: Vec<u64> = samples["threadCPUDelta"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert!(cpu.iter().all(|&us| us == 1000), "{cpu:?}");
    }
    assert_eq!(f["meta"]["interval"], 1.0);
    assert_eq!(f["meta"]["product"], "/opt/app --fast");
    assert_eq!(f["meta"]["symbolicated"], true);
}

#[test]
fn off_cpu_weights_are_nanoseconds_and_fractional_milliseconds() {
    let p = fold(&recording(true), FoldOptions::default());
    let pb = pprof_of(&p);
    let s = |i: i64| pb.string_table[i as usize].as_str();
    assert_eq!(pb.sample_type.len(), 1);
    assert_eq!(
        (s(pb.sample_type[0].r#type), s(pb.sample_type[0].unit)),
        ("off_cpu", "nanoseconds")
    );
    assert_eq!(
        pb.sample.iter().map(|x| x.value[0]).sum::<i64>(),
        7 * 1_500_000
    );

    let ss = speedscope_of(&p);
    assert_eq!(
        ss["profiles"][1]["weights"],
        serde_json::json!([1_500_000, 3_000_000, 1_500_000])
    );

    let f = firefox_of(&p);
    for t in f["threads"].as_array().unwrap() {
        let samples = &t["samples"];
        assert_eq!(samples["weightType"], "tracing-ms");
        let w: Vec<f64> = samples["weight"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let want: &[f64] = match (t["pid"].as_str(), t["tid"].as_str()) {
            (Some("10"), Some("11")) => &[1.5, 3.0, 1.5],
            (Some("20"), Some("11.1")) => &[1.5, 1.5],
            _ => &[1.5],
        };
        assert_eq!(w, want, "{}", t["tid"]);
    }
}

#[test]
fn writers_refuse_a_profile_without_samples() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&recording(false)).unwrap();
    let p = fold_recording(f.path(), &FoldOptions::default()).unwrap();
    assert!(p.timeline.is_none());
    let e = write_pprof(&p, Vec::new()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(write_speedscope(&p, Vec::new()).is_err());
    assert!(write_firefox(&p, Vec::new()).is_err());
}

fn meta(event: &str, hz: u64, unit: &str) -> Metadata {
    Metadata {
        event: event.into(),
        frequency_hz: hz,
        weight_unit: unit.into(),
        ..Default::default()
    }
}

#[test]
fn the_measure_follows_the_event() {
    assert_eq!(
        Measure::of(&meta("cpu-clock", 1000, "samples")),
        Measure::Clock {
            period_ns: 1_000_000
        }
    );
    assert_eq!(
        Measure::of(&meta("task-clock:u", 999, "samples")),
        Measure::Clock {
            period_ns: 1_001_001
        }
    );
    assert_eq!(Measure::of(&meta("off-cpu", 0, "ns")), Measure::OffCpu);
    assert_eq!(Measure::of(&meta("cycles", 999, "samples")), Measure::Count);
    // A clock without a frequency (a fixed period in perf.data) is a count.
    assert_eq!(
        Measure::of(&meta("cpu-clock", 0, "samples")),
        Measure::Count
    );
}

#[test]
fn threads_keep_their_last_names() {
    let mut k = Kept::default();
    assert_eq!(k.thread(1, 1, 10, 10), 0);
    assert_eq!(k.thread(1, 2, 11, 10), 1);
    assert_eq!(k.thread(1, 1, 12, 12), 0);
    assert_eq!(k.threads, vec![(1, 1, 12, 12), (1, 2, 11, 10)]);
}
