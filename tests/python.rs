//! Python frames in recordings: `samples/python/known.py` recorded on every
//! CPython 3.8–3.13 here (pyenv's and the system's), as root, where the
//! kernel walks the sampled thread's frames at each sample.
//!
//! What is asserted holds whatever share of samples got their walk: a
//! Python frame shown is one that was running at that sample (every stack
//! holding one of the three work functions holds exactly the 30 calls of
//! `descend` above it, under `main` and `<module>`), native code called
//! from Python stays under the Python frame that called it (zlib under
//! `py_worker`), and the interpreter's eval loop itself is not shown where
//! Python frames stand for it. Shares are not asserted here: on a loaded
//! machine a run sometimes has most of its walks not pair one for one with
//! the eval-loop frames of their samples (3.8 beside two busy loops: 1,070
//! of 1,510 samples kept native frames only), which the recording says in a
//! warning (see issue 35's note).
//!
//! Needs root (BPF): fails with the cause unless FLAMEREC_SKIP_BPF_TESTS=1;
//! a CPython missing fails unless FLAMEREC_SKIP_PYTHON_TESTS=1.

use std::path::PathBuf;

use crate::common::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/python/known.py");

fn cpythons() -> Vec<PathBuf> {
    let found = flamerec_python::installed();
    let missing: Vec<u8> = (8..=13u8)
        .filter(|m| !found.iter().any(|(f, _)| f == m))
        .collect();
    if !missing.is_empty() {
        if std::env::var("FLAMEREC_SKIP_PYTHON_TESTS").as_deref() == Ok("1") {
            return Vec::new();
        }
        panic!("no CPython 3.{missing:?} here (pyenv's or /usr/bin/python3.X); set FLAMEREC_SKIP_PYTHON_TESTS=1 where they cannot be installed");
    }
    found.into_iter().map(|(_, p)| p).collect()
}

fn is_py(frame: &str, name: &str) -> bool {
    frame
        .strip_prefix(name)
        .is_some_and(|r| r.starts_with(" (") && r.ends_with("known.py)"))
}

#[test]
fn python_frames_stand_where_the_eval_loop_ran_them() {
    if !is_root() {
        if std::env::var("FLAMEREC_SKIP_BPF_TESTS").as_deref() == Ok("1") {
            return;
        }
        panic!("Python frames are read with BPF, which needs root: run the tests as root or set FLAMEREC_SKIP_BPF_TESTS=1");
    }
    let dir = tmp();
    for python in cpythons() {
        let what = python.display().to_string();
        let out = dir.path().join("known.frec");
        let Some(o) = record(&out, &[], &[python.to_str().unwrap(), SCRIPT, "1000"]) else {
            return;
        };
        assert!(o.status.success(), "{what}: {}", stderr(&o));
        let stacks = fold(&out, &[]);
        let mut walked = 0;
        for (frames, n) in &stacks {
            let Some(leaf) = frames.iter().position(|f| {
                ["py_alpha", "py_beta", "py_gamma"]
                    .iter()
                    .any(|w| is_py(f, w))
            }) else {
                continue;
            };
            walked += n;
            let line = frames.join(";");
            let descend = frames.iter().filter(|f| is_py(f, "descend")).count();
            assert_eq!(descend, 30, "{what}: {line}");
            let main = frames.iter().position(|f| is_py(f, "main"));
            let module = frames.iter().position(|f| is_py(f, "<module>"));
            assert!(module < main && main < Some(leaf), "{what}: {line}");
            assert!(
                !frames[module.unwrap()..]
                    .iter()
                    .any(|f| f == "_PyEval_EvalFrameDefault"),
                "{what}: the eval loop shown beside its Python frames: {line}"
            );
        }
        let worker_in_zlib: u64 = stacks
            .iter()
            .filter(|(f, _)| {
                f.iter()
                    .position(|x| is_py(x, "py_worker"))
                    .is_some_and(|w| {
                        f[w + 1..]
                            .iter()
                            .any(|x| x.contains("compress") || x.contains("deflate"))
                    })
            })
            .map(|(_, n)| n)
            .sum();
        // ≈ 1,000 samples of the main thread and a few hundred of the
        // worker; even a run whose main thread went unwalked (it happens)
        // walked the worker's.
        let named: u64 = stacks
            .iter()
            .filter(|(f, _)| f.iter().any(|x| x.ends_with("known.py)")))
            .map(|(_, n)| n)
            .sum();
        assert!(
            named >= 10,
            "{what}: {named} samples with Python frames: {}",
            stderr(&o)
        );
        assert!(walked + worker_in_zlib > 0, "{what}: {}", stderr(&o));
    }
}
