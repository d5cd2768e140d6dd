//! End-to-end tests of folding: synthetic recordings written with the format
//! crate's `Writer`, whose user frames point into this very test binary (a
//! real ELF on disk) and whose kernel frames use embedded kernel symbols.

mod dwarf;
mod golden;
mod perfdata;
mod support;

use flamerec_fold::{fold_recording, write_json_summary, write_svg, FoldError, FoldOptions};
use flamerec_format::{Frame, Module, ModuleKind};
use support::*;

#[test]
fn user_frames_resolve_to_function_names_in_the_real_binary() {
    let e = exe();
    let mut w = writer();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: e.path.clone(),
        build_id: e.build_id.clone(),
    });
    let caller = w.frame(Frame {
        module: m,
        address: e.rust_off,
    });
    let leaf = w.frame(Frame {
        module: m,
        address: e.leaf_off,
    });
    let s = w.stack(&[caller, leaf]);
    w.comm(0, 100, 100, "testprog", true);
    w.sample(sample(100, 100, s, 3));
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    assert_eq!(
        folded(&p),
        "testprog;fold::support::rust_target_fn;flamerec_fold_test_leaf 3\n"
    );
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert!(p.damage.is_none());
    let module = exe_name(&e);
    assert!(p
        .functions
        .iter()
        .all(|f| f.module == module && f.total_weight == 3));
}

#[test]
fn kernel_frames_resolve_from_embedded_symbols() {
    let mut w = writer();
    let k = kernel(&mut w);
    let frames = [
        kframe(&mut w, k, 0x10),
        kframe(&mut w, k, 0x210),
        kframe(&mut w, k, 0x305),
        kframe(&mut w, k, 0x1000),
    ];
    let s = w.stack(&frames);
    w.comm(0, 7, 7, "kworker", false);
    w.sample(sample(7, 7, s, 1));
    let bytes = finish(w);

    let p = fold_bytes(&bytes, &FoldOptions::default());
    assert_eq!(
        folded(&p),
        "kworker;entry_a;helper_b;weird:name_12;[kernel.kallsyms]+0xffffffff81001000 1\n"
    );
    let ext4 = p.functions.iter().find(|f| f.name == "helper_b");
    assert_eq!(ext4.map(|f| f.module.as_str()), Some("[ext4]"));

    let opts = {
        let mut o = FoldOptions::default();
        o.names.kernel_suffix = true;
        o
    };
    let p = fold_bytes(&bytes, &opts);
    assert_eq!(
        folded(&p),
        "kworker;entry_a_[k];helper_b_[k];weird:name_12_[k];[kernel.kallsyms]+0xffffffff81001000_[k] 1\n"
    );
}

#[test]
fn unknown_modules_print_as_module_plus_offset_with_one_warning() {
    let e = exe();
    let mut w = writer();
    let missing = w.module(&Module {
        kind: ModuleKind::File,
        path: "/nonexistent/dir/libgone.so.1".into(),
        build_id: vec![1, 2, 3, 4],
    });
    let changed = w.module(&Module {
        kind: ModuleKind::File,
        path: e.path.clone(),
        build_id: vec![0xde, 0xad, 0xbe, 0xef],
    });
    let vdso = w.module(&Module {
        kind: ModuleKind::Vdso,
        path: "[vdso]".into(),
        build_id: Vec::new(),
    });
    let anon = w.module(&Module {
        kind: ModuleKind::Anonymous,
        path: "[anon]".into(),
        build_id: Vec::new(),
    });
    let f = [
        w.frame(Frame {
            module: missing,
            address: 0x1234,
        }),
        w.frame(Frame {
            module: changed,
            address: e.leaf_off,
        }),
        w.frame(Frame {
            module: anon,
            address: 0x7f00_0000_1000,
        }),
        w.frame(Frame {
            module: vdso,
            address: 0x9a0,
        }),
    ];
    let s = w.stack(&f);
    let s2 = w.stack(&f[..1]);
    w.comm(0, 5, 5, "app", true);
    w.sample(sample(5, 5, s, 2));
    w.sample(sample(5, 5, s2, 1));
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    let name = exe_name(&e);
    assert_eq!(
        folded(&p),
        format!(
            "app;libgone.so.1+0x1234 1\n\
             app;libgone.so.1+0x1234;{name}+0x{:x};[anon]+0x7f0000001000;[vdso]+0x9a0 2\n",
            e.leaf_off
        )
    );
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let w0 = &p.warnings[0];
    assert!(w0.starts_with("2 binaries"), "{w0}");
    assert!(w0.contains("1 with a build id mismatch"), "{w0}");
    assert!(w0.contains("2 frames shown as module+0xOFFSET"), "{w0}");
}

/// Two threads of process 100 (`main`, `worker`) and process 200 (`other`).
fn threads_recording() -> Vec<u8> {
    let mut w = writer();
    let k = kernel(&mut w);
    let a = kframe(&mut w, k, 0x10);
    let b = kframe(&mut w, k, 0x210);
    let sa = w.stack(&[a]);
    let sab = w.stack(&[a, b]);
    w.comm(0, 100, 100, "main", true);
    w.fork(1, 100, 100, 101, 100);
    w.comm(2, 100, 101, "worker", false);
    w.comm(3, 200, 200, "other", true);
    w.sample(sample(100, 100, sa, 1));
    w.sample(sample(100, 101, sab, 2));
    w.sample(sample(100, 101, sab, 3));
    w.sample(sample(200, 200, sa, 7));
    finish(w)
}

#[test]
fn roots_follow_comm_process_and_thread_modes() {
    let bytes = threads_recording();
    let p = fold_bytes(&bytes, &FoldOptions::default());
    assert_eq!(
        folded(&p),
        "main;entry_a 1\nother;entry_a 7\nworker;entry_a;helper_b 5\n"
    );
    let per_process = FoldOptions {
        per_process: true,
        ..Default::default()
    };
    assert_eq!(
        folded(&fold_bytes(&bytes, &per_process)),
        "main-100;entry_a 1\nmain-100;entry_a;helper_b 5\nother-200;entry_a 7\n"
    );
    let per_thread = FoldOptions {
        per_thread: true,
        ..Default::default()
    };
    assert_eq!(
        folded(&fold_bytes(&bytes, &per_thread)),
        "main-100/100;entry_a 1\nother-200/200;entry_a 7\nworker-100/101;entry_a;helper_b 5\n"
    );
}

#[test]
fn filters_keep_only_matching_samples() {
    let bytes = threads_recording();
    let by = |opts: FoldOptions| folded(&fold_bytes(&bytes, &opts));
    assert_eq!(
        by(FoldOptions {
            pids: vec![200],
            ..Default::default()
        }),
        "other;entry_a 7\n"
    );
    assert_eq!(
        by(FoldOptions {
            tids: vec![101],
            ..Default::default()
        }),
        "worker;entry_a;helper_b 5\n"
    );
    // The process's name also keeps its differently named threads.
    assert_eq!(
        by(FoldOptions {
            comms: vec!["main".into()],
            ..Default::default()
        }),
        "main;entry_a 1\nworker;entry_a;helper_b 5\n"
    );
    assert_eq!(
        by(FoldOptions {
            comms: vec!["worker".into()],
            ..Default::default()
        }),
        "worker;entry_a;helper_b 5\n"
    );
    assert_eq!(
        by(FoldOptions {
            pids: vec![100],
            tids: vec![200],
            ..Default::default()
        }),
        ""
    );
}

#[test]
fn counts_add_up_to_the_sum_of_weights() {
    let bytes = threads_recording();
    let p = fold_bytes(&bytes, &FoldOptions::default());
    let sum: u64 = p.stacks.iter().map(|(_, c)| c).sum();
    assert_eq!(sum, 13);
    assert_eq!(p.total_weight, 13);
    assert_eq!(p.samples, 4);
    assert_eq!(p.lost_samples, 4);
    assert_eq!(p.duration_ns, 2_000_000_000);
    assert_eq!(p.totals.as_ref().map(|t| t.weight), Some(13));
    let procs: Vec<(u32, &str, u64, u64)> = p
        .processes
        .iter()
        .map(|x| (x.pid, x.comm.as_str(), x.samples, x.weight))
        .collect();
    assert_eq!(procs, vec![(200, "other", 1, 7), (100, "main", 3, 6)]);
}

#[test]
fn names_follow_exec_and_fork_in_stream_order() {
    let mut w = writer();
    let k = kernel(&mut w);
    let a = kframe(&mut w, k, 0x10);
    let s = w.stack(&[a]);
    w.comm(0, 10, 10, "sh", true);
    w.sample(sample(10, 10, s, 1));
    w.fork(5, 11, 10, 11, 10);
    w.sample(sample(11, 11, s, 2));
    w.comm(10, 10, 10, "make", true);
    w.sample(sample(10, 10, s, 4));
    w.sample(sample(12, 12, s, 8));
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    assert_eq!(
        folded(&p),
        "[unknown];entry_a 8\nmake;entry_a 4\nsh;entry_a 3\n"
    );
}

#[test]
fn json_summary_counts_a_function_once_per_sample() {
    let mut w = writer();
    let k = kernel(&mut w);
    let a1 = kframe(&mut w, k, 0x10);
    let b = kframe(&mut w, k, 0x210);
    let a2 = kframe(&mut w, k, 0x20);
    let recursive = w.stack(&[a1, b, a2]);
    let ab = w.stack(&[a1, b]);
    let empty = w.stack(&[]);
    w.comm(0, 1, 1, "rec", true);
    w.sample(sample(1, 1, recursive, 5));
    w.sample(sample(1, 1, ab, 2));
    w.sample(sample(1, 1, empty, 1));
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    assert_eq!(
        folded(&p),
        "rec 1\nrec;entry_a;helper_b 2\nrec;entry_a;helper_b;entry_a 5\n"
    );

    let mut out = Vec::new();
    write_json_summary(&p, &mut out).expect("json");
    let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
    assert_eq!(v["schema"], "flamerec-summary/1");
    assert_eq!(v["total_samples"], 8);
    assert_eq!(v["lost_samples"], 4);
    assert_eq!(v["duration_s"], 2.0);
    assert_eq!(v["event"], "cpu-clock");
    assert_eq!(v["frequency_hz"], 999);
    assert_eq!(
        v["processes"],
        serde_json::json!([{ "pid": 1, "comm": "rec", "samples": 8 }])
    );
    let funcs = v["functions"].as_array().expect("functions");
    assert_eq!(funcs.len(), 2);
    assert_eq!(funcs[0]["name"], "entry_a");
    assert_eq!(funcs[0]["module"], "[kernel.kallsyms]");
    assert_eq!(funcs[0]["self"], 5);
    assert_eq!(funcs[0]["total"], 7);
    assert_eq!(funcs[0]["self_pct"], 62.5);
    assert_eq!(funcs[0]["total_pct"], 87.5);
    assert_eq!(funcs[1]["name"], "helper_b");
    assert_eq!(funcs[1]["module"], "[ext4]");
    assert_eq!(funcs[1]["self"], 2);
    assert_eq!(funcs[1]["total"], 7);
    let keys: Vec<&String> = v.as_object().expect("object").keys().collect();
    assert_eq!(keys.len(), 8, "{keys:?}");
}

#[test]
fn svg_shows_the_function_names() {
    let e = exe();
    let mut w = writer();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: e.path.clone(),
        build_id: e.build_id.clone(),
    });
    let leaf = w.frame(Frame {
        module: m,
        address: e.leaf_off,
    });
    let s = w.stack(&[leaf]);
    w.comm(0, 1, 1, "svgtest", true);
    w.sample(sample(1, 1, s, 10));
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    let mut out = Vec::new();
    write_svg(&p, None, &mut out).expect("svg");
    let svg = String::from_utf8(out).expect("utf-8");
    assert!(svg.contains("<svg"));
    assert!(svg.contains("flamerec_fold_test_leaf"));
    assert!(svg.contains("testprog --fast"), "title is the command");

    let mut out = Vec::new();
    write_svg(&p, Some("My <title>"), &mut out).expect("svg");
    let svg = String::from_utf8(out).expect("utf-8");
    assert!(svg.contains("My &lt;title&gt;"));
}

#[test]
fn svg_of_an_empty_profile_is_not_an_error() {
    let w = writer();
    let p = fold_bytes(&finish(w), &FoldOptions::default());
    assert!(p.stacks.is_empty());
    let mut out = Vec::new();
    write_svg(&p, None, &mut out).expect("svg");
    assert!(String::from_utf8_lossy(&out).contains("<svg"));
}

#[test]
fn truncated_recording_folds_its_complete_chunks_with_damage() {
    let mut w = writer();
    let k = kernel(&mut w);
    let a = kframe(&mut w, k, 0x10);
    let s = w.stack(&[a]);
    w.comm(0, 1, 1, "cut", true);
    w.sample(sample(1, 1, s, 1));
    w.flush().expect("flush");
    w.sample(sample(1, 1, s, 1));
    w.lost(5, 3);
    w.flush().expect("flush");
    w.sample(sample(1, 1, s, 100));
    let bytes = finish(w);
    for cut in 1..40 {
        let p = fold_bytes(&bytes[..bytes.len() - cut], &FoldOptions::default());
        assert!(p.damage.is_some(), "cut {cut}");
        assert!(p.totals.is_none());
        assert_eq!(folded(&p), "cut;entry_a 2\n", "cut {cut}");
        assert_eq!(p.lost_samples, 3);
    }
}

#[test]
fn input_that_cannot_be_read_is_a_one_line_error() {
    let dir = tempfile::tempdir().expect("dir");
    let cases: [(&str, &[u8]); 4] = [
        ("empty", b""),
        ("binary", b"\x00\xff\xfe\x01 not text\n"),
        ("perf.data", b"PERFILE2\x68\x00\x00\x00\x00\x00\x00\x00"),
        ("pipe.data", b"PERFILE2\x10\x00\x00\x00\x00\x00\x00\x00\x01"),
    ];
    for (name, bytes) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let err = fold_recording(&path, &FoldOptions::default()).expect_err(name);
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        assert!(msg.contains(name), "{msg}");
        match name {
            "empty" => assert!(matches!(err, FoldError::Empty { .. }), "{err:?}"),
            "binary" => assert!(matches!(err, FoldError::Folded { line: 1, .. }), "{err:?}"),
            _ => assert!(matches!(err, FoldError::PerfData { .. }), "{err:?}"),
        }
    }
    let err = fold_recording(&dir.path().join("nope.frec"), &FoldOptions::default())
        .expect_err("missing file");
    assert!(matches!(err, FoldError::Open { .. }));
}

/// Folded text folds like a recording: its stacks as they are, functions
/// counted once per stack, the root not a function; CRLF, a missing final
/// newline, comments and counts of 0 read as inferno writes and reads them.
#[test]
fn folded_text_folds_into_a_profile() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("in.folded");
    let text = "# from some tool\r\nmy app;main;f;f 3\r\nmy app;main;g 0\nmy app;main;ns::a:b [x] 2\nmy app;main;f;f 1";
    std::fs::write(&path, text).expect("write");
    let p = fold_recording(&path, &FoldOptions::default()).expect("fold folded text");
    assert_eq!(folded(&p), "my app;main;f;f 4\nmy app;main;ns::a:b [x] 2\n");
    assert_eq!((p.samples, p.total_weight), (6, 6));
    let f = &p.functions[0];
    assert_eq!(
        (f.name.as_str(), f.self_weight, f.total_weight),
        ("main", 0, 6)
    );
    let f = &p.functions[1];
    assert_eq!(
        (f.name.as_str(), f.self_weight, f.total_weight),
        ("f", 4, 4)
    );
    assert!(p.functions.iter().all(|f| f.name != "my app"));
    let opts = FoldOptions {
        pids: vec![1],
        ..FoldOptions::default()
    };
    let err = fold_recording(&path, &opts).expect_err("--pid on folded text");
    assert!(
        matches!(err, FoldError::Unsupported { what: "--pid", .. }),
        "{err:?}"
    );
}

#[test]
fn output_is_the_same_with_one_or_many_threads() {
    let e = exe();
    let mut w = writer();
    let k = kernel(&mut w);
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: e.path.clone(),
        build_id: e.build_id.clone(),
    });
    let gone = w.module(&Module {
        kind: ModuleKind::File,
        path: "/nonexistent/libx.so".into(),
        build_id: Vec::new(),
    });
    w.comm(0, 1, 1, "many", true);
    // Enough distinct frames to split the binary into several work items.
    let step = (e.text.1 / 10_000).max(1);
    for i in 0..10_000u64 {
        let user = w.frame(Frame {
            module: if i % 10 == 0 { gone } else { m },
            address: e.text.0 + i * step,
        });
        let kf = kframe(&mut w, k, (i * 7) % 0x400);
        let s = w.stack(&[user, kf]);
        w.sample(sample(1, 1 + (i % 5) as u32, s, 1 + i % 3));
    }
    let bytes = finish(w);
    let run = |jobs| {
        let opts = FoldOptions {
            jobs: Some(jobs),
            per_thread: true,
            ..Default::default()
        };
        let p = fold_bytes(&bytes, &opts);
        let mut json = Vec::new();
        write_json_summary(&p, &mut json).expect("json");
        let mut svg = Vec::new();
        write_svg(&p, None, &mut svg).expect("svg");
        (folded(&p), json, svg, p.warnings)
    };
    let one = run(1);
    let four = run(4);
    assert!(one == four, "output differs between 1 and 4 threads");
    let resolved = one
        .0
        .lines()
        .filter(|l| l.split(';').nth(1).is_some_and(|f| !f.contains("+0x")))
        .count();
    assert!(
        resolved > 1000,
        "only {resolved} lines with a named user frame"
    );
    assert!(one.0.contains("libx.so+0x"));
    let mut lines: Vec<&str> = one.0.lines().collect();
    let unsorted = lines.clone();
    lines.sort_unstable();
    assert_eq!(lines, unsorted);
}

#[test]
fn mutated_recordings_fold_or_fail_cleanly() {
    let bytes = threads_recording();
    let file = tempfile::NamedTempFile::new().expect("temp file");
    for pos in 0..bytes.len() {
        for flip in [0x01u8, 0xff] {
            let mut m = bytes.clone();
            m[pos] ^= flip;
            std::fs::write(file.path(), &m).expect("write");
            match fold_recording(file.path(), &FoldOptions::default()) {
                Ok(p) => {
                    let sum: u64 = p.stacks.iter().map(|(_, c)| c).sum();
                    assert_eq!(sum, p.total_weight, "byte {pos}");
                }
                Err(e) => assert!(!e.to_string().contains('\n')),
            }
        }
    }
}

#[test]
fn anonymous_frames_are_named_from_the_processes_perf_maps() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(
        dir.path().join("perf-4242.map"),
        "7f0000001000 100 LazyCompile:~hot app.js:3\n7f0000002000 10 stub;with;semis\n",
    )
    .expect("write map");
    let mut w = writer();
    let anon = w.module(&Module {
        kind: ModuleKind::Anonymous,
        path: "[anon]".into(),
        build_id: Vec::new(),
    });
    let f = [0x7f00_0000_1010u64, 0x7f00_0000_2004, 0x7f00_0000_3000].map(|address| {
        w.frame(Frame {
            module: anon,
            address,
        })
    });
    let s = w.stack(&f);
    w.comm(0, 4242, 4242, "node", true);
    w.sample(sample(4242, 4242, s, 1));
    let bytes = finish(w);
    let with_maps = {
        let mut o = FoldOptions::default();
        o.names.perf_map_dir = Some(dir.path().to_path_buf());
        o
    };
    assert_eq!(
        folded(&fold_bytes(&bytes, &with_maps)),
        "node;LazyCompile:~hot app.js:3;stub:with:semis;[anon]+0x7f0000003000 1\n"
    );
    let without = {
        let mut o = FoldOptions::default();
        o.names.perf_map_dir = None;
        o
    };
    assert!(folded(&fold_bytes(&bytes, &without)).starts_with("node;[anon]+0x7f0000001010;"));
}
