//! PLT stubs are named as perf names them, `callee@plt`: a shared library
//! (tests/programs/plt/lib.c) that calls its own exported function through
//! its PLT, driven by a program (main.c), both compiled here with gcc, is
//! recorded with names embedded and without, and both folds name the stub.
//! Before, a sample in the stub took the name of the symbol before `.plt`,
//! `_init`.
//!
//! Tests that record need perf_event_open. Where it is denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

use std::path::{Path, PathBuf};

use crate::common::{fold, gcc, record, stderr, tmp};

const LIBRARY: &str = include_str!("programs/plt/lib.c");
const PROGRAM: &str = include_str!("programs/plt/main.c");

/// Builds the library (-fPIC, default visibility: the call may be
/// interposed, so it goes through the PLT) and the program linked to it.
fn build(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("lib.c"), LIBRARY).expect("write lib.c");
    std::fs::write(dir.join("main.c"), PROGRAM).expect("write main.c");
    gcc(
        dir,
        &["-O2", "-fPIC", "-shared", "-o", "libplt.so", "lib.c"],
    );
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    gcc(dir, &["-O2", "-o", "plt", "main.c", "-L.", "-lplt", &rpath]);
    dir.join("plt")
}

#[test]
fn plt_stubs_are_named_after_their_callee() {
    let dir = tmp();
    let program = build(dir.path());
    let program = program.to_str().expect("utf-8 path");
    // 600 million calls: about 1.5 s of one core. The stub is one jump of
    // the loop's six instructions; on this VM's timer sampling 0.4% of the
    // samples land in it, about 24 of 5,400 at 4999 Hz. Asking for one
    // leaves a wide margin (Poisson: P(0 | mean 24) < 1e-10; still < 1e-5
    // if a loaded machine halved the share); the count of samples follows
    // the program's CPU time, not the wall clock.
    let args = ["-F", "4999", "-g", "fp"];
    for embed in [true, false] {
        let out = dir.path().join(format!("plt-{embed}.frec"));
        let mut extra = args.to_vec();
        if !embed {
            extra.push("--no-embed-symbols");
        }
        let Some(o) = record(&out, &extra, &[program, "600000000"]) else {
            return;
        };
        assert!(o.status.success(), "record failed: {}", stderr(&o));
        let stacks = fold(&out, &[]);
        let in_stub: u64 = stacks
            .iter()
            .filter(|(s, _)| s.last().is_some_and(|f| f == "plt_step@plt"))
            .map(|s| s.1)
            .sum();
        assert!(
            in_stub >= 1,
            "embed={embed}: no leaf is plt_step@plt: {stacks:?}"
        );
        // What plt_spin runs is the stub or plt_step, never `_init` (the
        // program's own `_init` may run at start-up, under no plt_spin).
        let init: Vec<_> = stacks
            .iter()
            .filter(|(s, _)| s.windows(2).any(|w| w[0] == "plt_spin" && w[1] == "_init"))
            .collect();
        assert!(
            init.is_empty(),
            "embed={embed}: stubs named _init: {init:?}"
        );
    }
}
