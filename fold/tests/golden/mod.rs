//! Golden files for the folded text and the JSON summary of a synthetic
//! recording (kernel symbols, a missing binary, anonymous code, several
//! processes and threads), folded with 1 and with 2 threads.
//!
//! `FLAMEREC_BLESS=1 cargo test -p flamerec-fold --test fold golden`
//! rewrites the files in `tests/golden/` from the current output.

use std::path::PathBuf;

use flamerec_fold::{write_json_summary, FoldOptions};
use flamerec_format::{Frame, Module, ModuleKind};

use crate::support::*;

fn recording() -> Vec<u8> {
    let mut w = writer();
    let k = kernel(&mut w);
    let lib = w.module(&Module {
        kind: ModuleKind::File,
        path: "/nonexistent/golden/libgold.so.3".into(),
        build_id: vec![0x60, 0x1d],
    });
    let anon = w.module(&Module {
        kind: ModuleKind::Anonymous,
        path: "[anon]".into(),
        build_id: Vec::new(),
    });
    let user: Vec<u32> = (0..6u64)
        .map(|i| {
            w.frame(Frame {
                module: lib,
                address: 0x1000 + 0x40 * i,
            })
        })
        .collect();
    let jit = w.frame(Frame {
        module: anon,
        address: 0x7f00_dead_0000,
    });
    let ka = kframe(&mut w, k, 0x10);
    let kb = kframe(&mut w, k, 0x220);
    let kw = kframe(&mut w, k, 0x305);
    w.comm(0, 10, 10, "server", true);
    w.fork(1, 10, 10, 11, 10);
    w.comm(2, 10, 11, "worker 1", false);
    w.comm(3, 20, 20, "# batch", true);
    let stacks = [
        w.stack(&[user[0], user[1], user[2]]),
        w.stack(&[user[0], user[1], user[3], ka, kb]),
        w.stack(&[user[0], user[4], jit]),
        w.stack(&[user[5], kw]),
        w.stack(&[ka]),
    ];
    for i in 0..40u32 {
        let (pid, tid) = match i % 4 {
            0 | 1 => (10, 10),
            2 => (10, 11),
            _ => (20, 20),
        };
        let s = stacks[(i as usize * 7) % stacks.len()];
        w.sample(sample(pid, tid, s, 1 + u64::from(i % 3)));
    }
    finish(w)
}

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("golden")
        .join(name)
}

fn check(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("FLAMEREC_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, got).expect("bless golden file");
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (FLAMEREC_BLESS=1 creates it)", path.display()));
    assert_eq!(got, want, "{name} differs; FLAMEREC_BLESS=1 regenerates it");
}

#[test]
fn folded_text_and_json_match_the_golden_files_with_1_and_2_threads() {
    let bytes = recording();
    for (suffix, per_process) in [("", false), ("-per-process", true)] {
        let mut outputs = Vec::new();
        for jobs in [1, 2] {
            let opts = {
                let mut o = FoldOptions {
                    jobs: Some(jobs),
                    per_process,
                    ..Default::default()
                };
                o.names.perf_map_dir = None;
                o
            };
            let p = fold_bytes(&bytes, &opts);
            let mut json = Vec::new();
            write_json_summary(&p, &mut json).expect("json");
            let json = String::from_utf8(json).expect("utf-8");
            serde_json::from_str::<serde_json::Value>(&json).expect("valid JSON");
            outputs.push((folded(&p), json, p.warnings));
        }
        assert!(outputs[0] == outputs[1], "1 and 2 threads differ");
        let (text, json, warnings) = &outputs[0];
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        check(&format!("synthetic{suffix}.folded"), text);
        check(&format!("synthetic{suffix}.json"), json);
    }
}
