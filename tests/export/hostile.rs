//! Hostile names — `</script>`, quotes, backslashes, newlines, a U+FFFD
//! left by invalid UTF-8 — in thread names, function names, the command
//! line and mapping paths: every export stays valid for its consumer and
//! keeps each name exactly as the flamegraph spells it.

use std::path::Path;

use flamerec_format::{
    write_names, Frame, KernelSymbol, Metadata, Module, ModuleKind, Sample, Totals, Writer,
};
use serde_json::Value;

use super::consumers::{pprof, speedscope_import};
use super::{export_all, gunzip_json};
use crate::common::*;

const KBASE: u64 = 0xffff_ffff_8100_0000;
const MAIN_COMM: &str = "</script><b>\"q'&amp;\n";
/// `MAIN_COMM` spelled as a root frame: `;` becomes `:`, control
/// characters spaces, ends are trimmed.
const MAIN_SHOWN: &str = "</script><b>\"q'&amp:";
const WORKER_COMM: &str = "tab\tname";
const WORKER_SHOWN: &str = "tab name";
const LIB_PATH: &str = "/nonexistent/</script>\"dir\n/lib\u{fffd}bad.so";

/// Names every export must show, as `fold` spells them.
const SHOWN: &[&str] = &[
    "main_</script>",
    "outer\"quoted\\",
    "inlined newline",
    "k_</script>\"x'",
    "lib\u{fffd}bad.so+0x1234",
];

/// A recording of two threads whose names, functions and paths are hostile.
fn hostile_recording(path: &Path) {
    let meta = Metadata {
        command: vec!["</script>".into(), "\"a b\"".into(), "new\nline".into()],
        target: "command".into(),
        event: "cpu-clock".into(),
        frequency_hz: 1000,
        call_graph: "fp".into(),
        weight_unit: "samples".into(),
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
        name: "k_</script>\"x'".into(),
        module: String::new(),
    });
    let lib = w.module(&Module {
        kind: ModuleKind::File,
        path: LIB_PATH.into(),
        build_id: vec![0xde, 0xad, 0xbe, 0xef],
    });
    let app = w.module(&Module {
        kind: ModuleKind::File,
        path: "/nonexistent/app".into(),
        build_id: vec![1, 2, 3, 4],
    });
    let main = w.frame(Frame {
        module: app,
        address: 0x100,
    });
    let outer = w.frame(Frame {
        module: app,
        address: 0x200,
    });
    let unnamed = w.frame(Frame {
        module: lib,
        address: 0x1234,
    });
    let kfun = w.frame(Frame {
        module: kernel,
        address: KBASE + 0x10,
    });
    let a = w.stack(&[main, outer, unnamed]);
    let b = w.stack(&[main, outer, kfun]);
    w.comm(0, 100, 100, MAIN_COMM, true);
    w.comm(0, 100, 101, WORKER_COMM, false);
    for i in 0..30u64 {
        let (tid, stack) = if i % 3 == 0 { (100, a) } else { (101, b) };
        w.sample(Sample {
            time_ns: 1_000_000 * i,
            pid: 100,
            tid,
            stack,
            weight: 1,
        });
    }
    let mut bytes = w
        .finish(Totals {
            samples: 30,
            weight: 30,
            duration_ns: 30_000_000,
            processes: 1,
            threads: 2,
            ..Default::default()
        })
        .unwrap();
    let names = vec![
        (main, vec!["main_</script>".to_string()]),
        (
            outer,
            vec![
                "outer\"quoted\\".to_string(),
                "inlined\nnewline".to_string(),
            ],
        ),
    ];
    write_names(&mut bytes, &names, true).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Asserts the speedscope file (ours, then as speedscope imported it)
/// names every hostile frame and thread exactly.
fn check_speedscope(file: &Path) {
    let ours: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).expect("valid JSON");
    let frames: Vec<&str> = ours["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    for name in SHOWN {
        assert!(frames.contains(name), "{name:?} not among {frames:?}");
    }
    assert_eq!(ours["name"], "</script> \"a b\" new\nline");
    let got = speedscope_import(file);
    assert_eq!(got["errors"], Value::Array(vec![]), "{got}");
    assert_eq!(got["alerts"], Value::Array(vec![]), "{got}");
    let imported: Vec<&str> = got["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for name in SHOWN {
        assert!(
            imported.contains(name),
            "speedscope lost {name:?}: {imported:?}"
        );
    }
    let profiles: Vec<&str> = got["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        profiles.contains(&format!("{MAIN_SHOWN} (pid 100, tid 100)").as_str()),
        "{profiles:?}"
    );
    assert!(
        profiles.contains(&format!("{WORKER_SHOWN} (pid 100, tid 101)").as_str()),
        "{profiles:?}"
    );
}

fn check_firefox(file: &Path) {
    let profile = gunzip_json(file);
    let threads = profile["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    let mut strings: Vec<&str> = Vec::new();
    for t in threads {
        assert_eq!(t["processName"], MAIN_SHOWN);
        strings.extend(
            t["stringArray"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_str().unwrap()),
        );
    }
    for name in SHOWN {
        assert!(strings.contains(name), "{name:?} not among {strings:?}");
    }
    let names: Vec<&str> = threads
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&MAIN_SHOWN) && names.contains(&WORKER_SHOWN),
        "{names:?}"
    );
    assert_eq!(profile["meta"]["product"], "</script> \"a b\" new\nline");
}

#[test]
fn hostile_names_survive_every_export() {
    let dir = tmp();
    let rec = dir.path().join("hostile.frec");
    hostile_recording(&rec);
    let (pb, ss, ff) = export_all(&rec, dir.path(), "h");

    let raw = pprof(&["-raw"], &pb);
    for name in SHOWN {
        assert!(raw.contains(name), "pprof lost {name:?}:\n{raw}");
    }
    assert!(raw.contains(&format!("comm:[{MAIN_SHOWN}]")), "{raw}");
    assert!(raw.contains(LIB_PATH) && raw.contains("deadbeef"), "{raw}");
    pprof(&["-top"], &pb);
    check_speedscope(&ss);
    check_firefox(&ff);
}

#[test]
fn invalid_utf8_in_a_mapping_path_survives_perf_data_exports() {
    use std::os::unix::ffi::OsStrExt;
    if !perf_usable() {
        return;
    }
    let dir = tmp();
    let bad = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"bad\xff</script>\"q\nx"));
    std::fs::create_dir_all(&bad).unwrap();
    let bin = bad.join("cpu-mix");
    std::fs::copy(
        sample_bin(
            flamerec_samples::Sample::CpuMix,
            flamerec_samples::FramePointers::Yes,
        ),
        &bin,
    )
    .unwrap();
    // Started through a UTF-8 link (Rust's `env::args` refuses anything
    // else); the kernel maps, and perf records, the real path.
    let link = dir.path().join("cpu-mix-link");
    std::os::unix::fs::symlink(&bin, &link).unwrap();
    let data = dir.path().join("perf.data");
    let o = std::process::Command::new(super::consumers::perf())
        .args(["record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&link)
        .args(["--units", "60000"])
        .output()
        .expect("run perf record");
    assert!(o.status.success(), "perf record failed: {}", stderr(&o));
    let (pb, ss, ff) = export_all(&data, dir.path(), "b");
    let raw = pprof(&["-raw"], &pb);
    assert!(raw.contains("bad\u{fffd}</script>\"q\nx/cpu-mix"), "{raw}");
    let got = speedscope_import(&ss);
    assert_eq!(got["errors"], Value::Array(vec![]), "{got}");
    assert!(!got["profiles"].as_array().unwrap().is_empty());
    assert!(!gunzip_json(&ff)["threads"].as_array().unwrap().is_empty());
}
