//! JIT code named while recording: node writing a jitdump (`--perf-prof`)
//! or a perf map (`--perf-basic-prof`), recorded as a user would, folded
//! after the runtime's files are gone (the names travel in the recording).
//!
//! The program (`programs/known-profile.js`) spends 50/30/20 of its time
//! in `fa`, `fb` and `fc`. Shares are of the samples in one of them, within
//! 6 points: about 1,300 such samples put one standard deviation of the
//! count near 1.4 points, and what the JIT does before it optimizes a
//! function (interpreted and baseline code, named too) shifts a share by a
//! point or two more on a busy 2-core machine.
//!
//! CPython's `-X perf` trampolines (3.12, a perf map flushed per line) are
//! stepped while recording, so stacks are whole through 30 interpreter
//! entries, each behind a trampoline.
//!
//! node run without a perf flag is told, once, which flag it needs. Java
//! writes its whole map at exit (`-XX:+DumpPerfMapAtExit`): read after the
//! process ended, it names what no earlier line did. A JVMTI agent built
//! here from `programs/jitdump-agent.c` (the JDK's headers) writes Java's
//! compiled methods to a jitdump as the JVM announces them.
//!
//! `FLAMEREC_SKIP_NODE_TESTS=1`, `FLAMEREC_SKIP_PYTHON_TESTS=1` and
//! `FLAMEREC_SKIP_JAVA_TESTS=1` skip them where node, pyenv's CPython 3.12
//! or a JDK (`javac`, `java`) is missing.

use crate::common::{
    bpf_usable, fold, info_json, measuring, record_in, remove_jit_files, runtime, sample_bin,
    share, stderr, tmp, Stacks,
};
use flamerec_samples::{FramePointers, Sample};
use flamerec_testkit::{python, skip_or_fail, SKIP_JAVA, SKIP_NODE};

/// No advice to add a perf flag: the run had one (code its files did not
/// name by the end may still be said).
fn no_setup_advice(o: &std::process::Output) {
    let err = stderr(o);
    assert!(
        !err.contains("ran JIT code that no perf map or jitdump named"),
        "{err}"
    );
}

pub(crate) const PROGRAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/programs/known-profile.js"
);
const MARGIN: f64 = 6.0;

/// The JS function a frame names (`JS:*fa /path.js:4:13` → `fa`), in
/// whichever tier (`*` optimized, `^` baseline, `~` interpreted).
pub(crate) fn js_function(frame: &str) -> Option<&str> {
    let rest = frame.strip_prefix("JS:")?;
    let rest = rest.trim_start_matches(['*', '^', '~']);
    rest.split(' ').next()
}

/// The line of `err` that says `what`, and the share it gives (its
/// `(n of all)`, unrounded); the test fails naming what it lacked.
fn advice_line<'a>(err: &'a str, what: &str) -> (&'a str, f64) {
    let line = err
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no line with {what:?}: {err}"));
    let share = line
        .split_once(" (")
        .and_then(|(_, r)| r.split_once(')'))
        .and_then(|(counts, _)| counts.split_once(" of "))
        .and_then(|(n, all)| Some((n.parse::<f64>().ok()?, all.parse::<f64>().ok()?)))
        .map(|(n, all)| n * 100.0 / all)
        .unwrap_or_else(|| panic!("no (n of all) in {line}"));
    (line, share)
}

/// Records the program under node with `flag` in a fresh directory (node
/// writes its jitdump there), removes the runtime's files, folds per
/// process, and checks names, shares and whole stacks.
fn check(flag: &str) {
    let Some(node) = runtime("node", SKIP_NODE) else {
        return;
    };
    // Shares are measured: no other test's workload beside this one.
    let Some(_machine) = measuring() else {
        return;
    };
    let dir = tmp();
    let out = dir.path().join("js.frec");
    let node = node.to_string_lossy().into_owned();
    let cmd = [
        node.as_str(),
        "--allow-natives-syntax",
        flag,
        PROGRAM,
        "300",
    ];
    // node writes jit-PID.dump in its working directory: run it in `dir`.
    let Some(o) = record_in(Some(dir.path()), &out, &[], &cmd) else {
        return;
    };
    // Gone before folding: the names must come from the recording.
    remove_jit_files(&out, Some(dir.path()));
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    no_setup_advice(&o);
    let stacks = fold(&out, &[]);
    let in_fn =
        |name: &'static str| move |s: &[String]| s.iter().any(|f| js_function(f) == Some(name));
    let ours: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| {
            s.iter()
                .any(|f| matches!(js_function(f), Some("fa" | "fb" | "fc")))
        })
        .cloned()
        .collect();
    let n: u64 = ours.iter().map(|s| s.1).sum();
    assert!(n > 500, "{flag}: only {n} samples in fa, fb or fc");
    for (name, want) in [("fa", 50.0), ("fb", 30.0), ("fc", 20.0)] {
        let got = share(&ours, in_fn(name));
        assert!(
            (got - want).abs() <= MARGIN,
            "{flag}: {name} {got:.1}% of {n} samples, {want}% expected"
        );
    }
    // Their leaves are named (no `[anon]+0x…`) and their stacks whole.
    let anon_leaf = share(&ours, |s| s.last().is_some_and(|f| f.starts_with("[anon]")));
    assert!(
        anon_leaf < 1.0,
        "{flag}: {anon_leaf:.1}% of the leaves unnamed"
    );
    let whole = share(&ours, |s| s.get(1).is_some_and(|f| f == "_start"));
    assert!(whole >= 97.0, "{flag}: {whole:.1}% whole");
    // `info` says where the names came from: the file the flag writes.
    let info = info_json(&out);
    let j = &info["jit_frames"];
    let (from, other) = match flag {
        "--perf-prof" => ("jitdump", "perf_map"),
        _ => ("perf_map", "jitdump"),
    };
    assert!(j[from].as_u64().unwrap_or(0) > 0, "{flag}: {info}");
    assert_eq!(j[other], 0, "{flag}: {info}");
}

#[test]
fn node_perf_prof_functions_are_named_from_its_jitdump() {
    check("--perf-prof");
}

#[test]
fn node_perf_basic_prof_functions_are_named_from_its_map() {
    check("--perf-basic-prof");
}

const PY_PROGRAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/programs/known-profile.py"
);

/// Records known-profile.py under pyenv's CPython 3.`minor` with `flag`
/// (recorder flags `extra`), removes the runtime's files, and checks the
/// program's frames as `is_fn(frame, name)` tells them: over 500 samples in
/// `spin`, fa/fb/fc 50/30/20 within [`MARGIN`], and ≥ 97% of them whole
/// from `_start` through the 31 calls of `deep`. Returns the samples in
/// `spin` and the recording's stderr.
fn python_known_profile(
    minor: u8,
    flag: &str,
    extra: &[&str],
    is_fn: fn(&str, &str) -> bool,
) -> Option<(Stacks, String)> {
    let py = python(minor)?;
    let _machine = measuring()?;
    let dir = tmp();
    let out = dir.path().join("py.frec");
    let py = py.to_string_lossy().into_owned();
    let o = record_in(
        Some(dir.path()),
        &out,
        extra,
        &[&py, "-X", flag, PY_PROGRAM, "400"],
    )?;
    // Gone before folding: the names must come from the recording.
    remove_jit_files(&out, Some(dir.path()));
    let err = stderr(&o);
    assert!(o.status.success(), "{flag}: record failed: {err}");
    let named = |name: &'static str| move |s: &[String]| s.iter().any(|f| is_fn(f, name));
    let ours: Vec<_> = fold(&out, &[])
        .into_iter()
        .filter(|(s, _)| named("spin")(s))
        .collect();
    let n: u64 = ours.iter().map(|s| s.1).sum();
    assert!(n > 500, "{flag}: only {n} samples in spin: {err}");
    for (name, want) in [("fa", 50.0), ("fb", 30.0), ("fc", 20.0)] {
        let got = share(&ours, named(name));
        assert!(
            (got - want).abs() <= MARGIN,
            "{flag}: {name} {got:.1}% of {n} samples, {want}% expected"
        );
    }
    let whole = share(&ours, |s| {
        s.get(1).is_some_and(|f| f == "_start")
            && s.iter().filter(|f| is_fn(f, "deep")).count() == 31
    });
    assert!(whole >= 97.0, "{flag}: {whole:.1}% whole");
    Some((ours, err))
}

/// A perf trampoline's frame of function `name` (`py::name:file`).
fn trampoline_of(frame: &str, name: &str) -> bool {
    frame
        .strip_prefix("py::")
        .and_then(|r| r.strip_prefix(name))
        .is_some_and(|r| r.starts_with(':'))
}

/// A frame of function `name` read from the frame chain (`name (file)`).
fn chain_frame_of(frame: &str, name: &str) -> bool {
    frame
        .strip_prefix(name)
        .is_some_and(|r| r.starts_with(" (") && r.ends_with("known-profile.py)"))
}

#[test]
fn python_perf_trampolines_are_unwound_through_and_named() {
    // The trampolines alone: Python frames from the frame chain off. Whole:
    // through all 31 frames of `deep` (each behind its trampoline), not cut
    // at the first trampoline as before.
    python_known_profile(12, "perf", &["--python", "off"], trampoline_of);
}

/// CPython 3.13 `-X perf_jit` buffers its jitdump (4 KiB): the loads and
/// unwind tables of its trampolines reach the file long after the samples
/// that ran them. The trampolines are found by their bytes in the arena
/// CPython makes executable (before any runs), so stacks are whole from the
/// first sample; the names come from the dump when it is flushed. Recorded
/// with the frame chain off, so the trampolines alone carry the Python
/// names. Before: 98.6% of stacks cut at the first trampoline.
#[test]
fn python_perf_jit_trampolines_are_unwound_before_the_dump_names_them() {
    python_known_profile(13, "perf_jit", &["--python", "off"], trampoline_of);
}

/// With `-X perf` and the frame chain read at the sample (the default), a
/// trampoline beside the Python frame it called names the same code and is
/// left out: each Python frame is shown once. Trampolines that name other
/// code would stay and be counted in a warning; none are expected (both
/// are read at the same sample).
#[test]
fn python_frames_are_shown_once_beside_perf_trampolines() {
    if !bpf_usable() {
        return;
    }
    // Whole: from _start through the 31 calls of `deep`, each shown once.
    let Some((ours, err)) = python_known_profile(12, "perf", &[], chain_frame_of) else {
        return;
    };
    assert!(!err.contains("trampolines"), "{err}");
    for (s, _) in &ours {
        assert!(
            !s.iter().any(|f| f.starts_with("py::")),
            "a trampoline beside the frames it called: {}",
            s.join(";")
        );
    }
}

#[test]
fn node_without_a_perf_flag_is_told_what_it_needs() {
    let Some(node) = runtime("node", SKIP_NODE) else {
        return;
    };
    let dir = tmp();
    let out = dir.path().join("js.frec");
    let node = node.to_string_lossy().into_owned();
    let cmd = [node.as_str(), "--allow-natives-syntax", PROGRAM, "100"];
    let Some(o) = record_in(Some(dir.path()), &out, &[], &cmd) else {
        return;
    };
    // Most samples are in optimized JS: far above the 1% the advice needs.
    let err = stderr(&o);
    let (line, said) = advice_line(&err, "of the samples of node (");
    assert!(
        line.ends_with("that no perf map or jitdump named: run node with --perf-basic-prof --interpreted-frames-native-stack (or --perf-prof)"),
        "{line}"
    );
    // Its share counts every sample with an unnamed JIT frame anywhere in
    // its stack, of node's samples: what fold shows (within a point).
    let stacks = fold(&out, &["--per-process"]);
    let node: Vec<_> = stacks
        .into_iter()
        .filter(|(s, _)| s[0].starts_with("node-"))
        .collect();
    let shown = share(&node, |s| s.iter().any(|f| f.starts_with("[anon]")));
    assert!(
        (shown - said).abs() <= 1.0,
        "said {said}%, fold shows {shown:.1}%: {line}"
    );
}

const JAVA_PROGRAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/programs/KnownProfile.java"
);

/// KnownProfile.java recorded with `java` and `flags` (run in `dir`, where
/// the runtime writes its map or dump, removed before folding: the names
/// must come from the recording), its shares checked against 50/30/20 and
/// its leaves named; `None` where Java is missing and skipped.
fn java_known_profile(dir: &std::path::Path, flags: &[&str]) -> Option<serde_json::Value> {
    let (Some(javac), Some(java)) = (runtime("javac", SKIP_JAVA), runtime("java", SKIP_JAVA))
    else {
        return None;
    };
    let _machine = measuring()?;
    let built = std::process::Command::new(javac)
        .arg("-d")
        .arg(dir)
        .arg(JAVA_PROGRAM)
        .output()
        .expect("run javac");
    assert!(built.status.success(), "javac: {}", stderr(&built));
    let out = dir.join("java.frec");
    let java = java.to_string_lossy().into_owned();
    let classes = dir.to_string_lossy().into_owned();
    let mut cmd = vec![
        java.as_str(),
        "-XX:+PreserveFramePointer",
        "-XX:CompileCommand=quiet",
        "-XX:CompileCommand=dontinline,KnownProfile::*",
    ];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&["-cp", classes.as_str(), "KnownProfile", "300"]);
    let o = record_in(Some(dir), &out, &[], &cmd)?;
    remove_jit_files(&out, Some(dir));
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    no_setup_advice(&o);
    let stacks = fold(&out, &[]);
    // The map names a method with its return type (`int
    // KnownProfile.fa(int)`), the agent with its signature
    // (`KnownProfile.fa(I)I`).
    let in_fn = |name: &'static str| {
        move |s: &[String]| {
            s.iter()
                .any(|f| f.contains(&format!("KnownProfile.{name}(")))
        }
    };
    let ours: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| in_fn("fa")(s) || in_fn("fb")(s) || in_fn("fc")(s))
        .cloned()
        .collect();
    let n: u64 = ours.iter().map(|s| s.1).sum();
    assert!(n > 500, "only {n} samples in fa, fb or fc");
    for (name, want) in [("fa", 50.0), ("fb", 30.0), ("fc", 20.0)] {
        let got = share(&ours, in_fn(name));
        assert!(
            (got - want).abs() <= MARGIN,
            "{name} {got:.1}% of {n} samples, {want}% expected"
        );
    }
    let anon_leaf = share(&ours, |s| s.last().is_some_and(|f| f.starts_with("[anon]")));
    assert!(anon_leaf < 1.0, "{anon_leaf:.1}% of the leaves unnamed");
    Some(info_json(&out))
}

#[test]
fn java_functions_are_named_from_the_map_it_writes_at_exit() {
    let dir = tmp();
    let flags = ["-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit"];
    let Some(info) = java_known_profile(dir.path(), &flags) else {
        return;
    };
    // The map is written at exit: `info` counts its names as found at the end.
    assert!(
        info["jit_frames"]["at_end"].as_u64().unwrap_or(0) > 0,
        "{info}"
    );
}

const JITDUMP_AGENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/programs/jitdump-agent.c"
);

/// A JVMTI agent (`tests/programs/jitdump-agent.c`, built here with the
/// JDK's headers) writes each compiled method to a jitdump as the JVM
/// announces it: read while recording, its loads name the methods by the
/// time of each sample (perf's own agent is the bench's row; it needs the
/// Linux source).
#[test]
fn java_functions_are_named_from_a_jitdump_an_agent_writes() {
    let Some(java) = runtime("java", SKIP_JAVA) else {
        return;
    };
    let home = std::fs::canonicalize(&java)
        .ok()
        .and_then(|j| Some(j.parent()?.parent()?.to_path_buf()))
        .expect("java's home (the directory above its bin/)");
    let include = home.join("include");
    if !include.join("jvmti.h").is_file() {
        skip_or_fail(
            SKIP_JAVA,
            format!(
                "no jvmti.h under {} (a JDK, not only a JRE, is needed)",
                include.display()
            ),
        );
        return;
    }
    let dir = tmp();
    let source = std::fs::read_to_string(JITDUMP_AGENT).expect("read jitdump-agent.c");
    let (inc, inc_linux) = (
        format!("-I{}", include.display()),
        format!("-I{}", include.join("linux").display()),
    );
    let agent = crate::common::compile_c(
        dir.path(),
        "libjitdump-agent.so",
        &source,
        &["-shared", "-fPIC", &inc, &inc_linux, PROGRAMS_INCLUDE],
    );
    let flag = format!("-agentpath:{}", agent.display());
    let Some(info) = java_known_profile(dir.path(), &[flag.as_str()]) else {
        return;
    };
    assert!(
        info["jit_frames"]["jitdump"].as_u64().unwrap_or(0) > 0,
        "{info}"
    );
}

/// Where the C programs find `jitdump-writer.h`, their shared jitdump writer.
const PROGRAMS_INCLUDE: &str = concat!("-I", env!("CARGO_MANIFEST_DIR"), "/tests/programs");

const JIT_REUSE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/jit-reuse.c");

/// A small C program writes two functions in turn at one address, each
/// announced by a jitdump load before it runs (`tests/programs/jit-reuse.c`:
/// 24 phases of 40 ms, `run_a` calling `jit_a`, `run_b` calling `jit_b`).
/// Every sample in the code under `run_a` must be named `jit_a`, under
/// `run_b` `jit_b`: 0 named by the wrong load, in dwarf and fp mode. The
/// code runs ≈ 1 s (≈ 900 samples at 999 Hz); bound 300 named.
#[test]
fn code_written_twice_at_one_address_is_named_by_the_load_in_force() {
    let Some(_machine) = measuring() else {
        return;
    };
    let dir = tmp();
    let source = std::fs::read_to_string(JIT_REUSE).expect("read jit-reuse.c");
    let bin = crate::common::compile_c(
        dir.path(),
        "jit-reuse",
        &source,
        &[
            "-O1",
            "-fno-omit-frame-pointer",
            "-fno-inline",
            PROGRAMS_INCLUDE,
        ],
    );
    for mode in ["dwarf", "fp"] {
        let out = dir.path().join(format!("reuse-{mode}.frec"));
        let Some(o) = record_in(
            Some(dir.path()),
            &out,
            &["-g", mode],
            &[bin.to_str().unwrap()],
        ) else {
            return;
        };
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        remove_jit_files(&out, Some(dir.path()));
        let stacks = fold(&out, &[]);
        let (mut right, mut wrong, mut unnamed) = (0, 0, 0);
        for (s, n) in &stacks {
            for (caller, own, other) in [("run_a", "jit_a", "jit_b"), ("run_b", "jit_b", "jit_a")] {
                let Some(at) = s.iter().position(|f| f == caller) else {
                    continue;
                };
                let below = &s[at + 1..];
                if below.iter().any(|f| f == own) {
                    right += n;
                } else if below.iter().any(|f| f == other) {
                    wrong += n;
                } else if below.iter().any(|f| f.starts_with("[anon]")) {
                    unnamed += n;
                }
            }
        }
        assert_eq!(
            wrong, 0,
            "{mode}: {wrong} samples named by the other load ({right} right)"
        );
        assert!(
            right >= 300 && unnamed * 50 <= right,
            "{mode}: {right} named, {unnamed} unnamed: {}",
            stderr(&o)
        );
    }
}

/// javac is a JVM behind a launcher of its own: its advice spells the
/// JVM's flags as javac takes them (`-J-XX:…`), not as java does, and
/// counts every sample with unnamed JIT code anywhere in its stack, of
/// javac's own samples.
#[test]
fn javac_is_told_the_flags_in_its_own_spelling() {
    let Some(javac) = runtime("javac", SKIP_JAVA) else {
        return;
    };
    let dir = tmp();
    let out = dir.path().join("javac.frec");
    let javac = javac.to_string_lossy().into_owned();
    let classes = dir.path().join("classes");
    let cmd = [
        javac.as_str(),
        "-d",
        classes.to_str().unwrap(),
        JAVA_PROGRAM,
    ];
    let Some(o) = record_in(Some(dir.path()), &out, &[], &cmd) else {
        return;
    };
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("of the samples of javac ("))
        .unwrap_or_else(|| panic!("no advice for javac: {err}"));
    assert!(
        line.ends_with("run it with -J-XX:+PreserveFramePointer -J-XX:+UnlockDiagnosticVMOptions -J-XX:+DumpPerfMapAtExit"),
        "{line}"
    );
}

/// java with its perf map but without `-XX:+PreserveFramePointer`: most of
/// its stacks are cut in JIT code (its frames keep no frame pointer), and
/// the warning says which flag keeps them — never a larger `--stack-size`
/// than the largest there is (the default copy is it).
#[test]
fn java_without_frame_pointers_is_told_the_flag_that_keeps_them() {
    let (Some(javac), Some(java)) = (runtime("javac", SKIP_JAVA), runtime("java", SKIP_JAVA))
    else {
        return;
    };
    let dir = tmp();
    let built = std::process::Command::new(javac)
        .arg("-d")
        .arg(dir.path())
        .arg(JAVA_PROGRAM)
        .output()
        .expect("run javac");
    assert!(built.status.success(), "javac: {}", stderr(&built));
    let out = dir.path().join("java.frec");
    let java = java.to_string_lossy().into_owned();
    let classes = dir.path().to_string_lossy().into_owned();
    let cmd = [
        java.as_str(),
        "-XX:+UnlockDiagnosticVMOptions",
        "-XX:+DumpPerfMapAtExit",
        "-cp",
        classes.as_str(),
        "KnownProfile",
        "200",
    ];
    let Some(o) = record_in(Some(dir.path()), &out, &[], &cmd) else {
        return;
    };
    remove_jit_files(&out, Some(dir.path()));
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("of user stacks were cut short"))
        .unwrap_or_else(|| panic!("no word of cut stacks: {err}"));
    assert!(line.contains("-XX:+PreserveFramePointer"), "{line}");
    assert!(!line.contains("a larger --stack-size"), "{line}");
}

/// Runs the program given (argv[1]) from a memfd, as container runtimes
/// run their own binary.
const MEMFD_EXEC: &str = r#"
import os, sys
fd = os.memfd_create("flamerec-test", 0)
with open(sys.argv[1], "rb") as f:
    os.write(fd, f.read())
os.execv(f"/proc/self/fd/{fd}", sys.argv[1:])
"#;

/// An executable run from a memfd is the ELF image it holds, not JIT code:
/// its functions are named and no runtime is told to write a perf map.
/// cpu-mix spends its time in its three work functions; the Python that
/// starts it takes under 2% of the samples, and a loaded machine slows
/// both alike, so 80% of all samples ending in one of them holds with a
/// wide margin (taken for JIT code, none is named).
#[test]
fn an_executable_run_from_a_memfd_is_named_not_taken_for_jit() {
    let Some(py) = python(11) else { return };
    let dir = tmp();
    let script = dir.path().join("memfd-exec.py");
    std::fs::write(&script, MEMFD_EXEC).expect("write the script");
    let bin = sample_bin(Sample::CpuMix, FramePointers::No);
    let out = dir.path().join("memfd.frec");
    let cmd = [
        py.to_str().expect("utf-8 path"),
        script.to_str().expect("utf-8 path"),
        bin.to_str().expect("utf-8 path"),
        "--units",
        "100000",
    ];
    let Some(o) = record_in(None, &out, &[], &cmd) else {
        return;
    };
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    no_setup_advice(&o);
    let stacks = fold(&out, &[]);
    let named = share(&stacks, |s| {
        s.last().is_some_and(|leaf| leaf.starts_with("cpu_mix_"))
    });
    let unnamed = share(&stacks, |s| s.iter().any(|f| f.starts_with("memfd:")));
    assert!(
        named >= 80.0 && unnamed < 1.0,
        "{named:.1}% in cpu-mix's work functions, {unnamed:.1}% with unnamed memfd frames\n{err}"
    );
}

/// Records the known-profile program under node kept in its interpreter
/// (`--no-opt --no-sparkplug`: what a short script or cold code runs in)
/// with `flags`; the output, the stacks, and how many stacks the
/// recording counts cut.
fn interpreted_node(flags: &[&str]) -> Option<(std::process::Output, Stacks, u64)> {
    let node = runtime("node", SKIP_NODE)?;
    let dir = tmp();
    let out = dir.path().join("interpreted.frec");
    let node = node.to_string_lossy().into_owned();
    let mut cmd = vec![
        node.as_str(),
        "--allow-natives-syntax",
        "--no-opt",
        "--no-sparkplug",
    ];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&[PROGRAM, "40"]);
    let o = record_in(Some(dir.path()), &out, &[], &cmd)?;
    remove_jit_files(&out, Some(dir.path()));
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let cut = info_json(&out)["truncated_stacks"].as_u64().unwrap_or(0);
    Some((o, fold(&out, &[]), cut))
}

/// node with a perf map but without `--interpreted-frames-native-stack`
/// runs its interpreted functions under V8's one interpreter entry: it is
/// told so, with the share `fold` shows (counted on the same samples, so
/// within a point), and the flag it is told names those functions.
#[test]
fn node_is_told_the_flag_that_names_its_interpreted_functions() {
    let entry = |s: &[String]| s.iter().any(|f| f == "Builtins_InterpreterEntryTrampoline");
    let Some((o, stacks, _)) = interpreted_node(&["--perf-basic-prof"]) else {
        return;
    };
    let err = stderr(&o);
    let (line, said) = advice_line(&err, "ran interpreted JavaScript");
    assert!(
        line.ends_with("run node with --interpreted-frames-native-stack to name its functions"),
        "{line}"
    );
    let shown = share(&stacks, entry);
    assert!(
        (said - shown).abs() <= 1.0,
        "said {said:.1}%, fold shows {shown:.1}%"
    );
    // Followed, the advice names them: no sample through the entry, and
    // the program's functions named in the stacks that reach them (those
    // unwound to `_start`; a sample in a bytecode handler, which runs in
    // its function's frame without one of its own, stops there: about 40%
    // here, a limit of its own). The program runs fa, fb and fc all along:
    // start-up and the collector take about 2% of the whole stacks.
    let Some((o, stacks, _)) =
        interpreted_node(&["--perf-basic-prof", "--interpreted-frames-native-stack"])
    else {
        return;
    };
    let err = stderr(&o);
    assert!(!err.contains("ran interpreted JavaScript"), "{err}");
    assert!(share(&stacks, entry) < 1.0, "{err}");
    let whole: Stacks = stacks
        .into_iter()
        .filter(|(s, _)| s.get(1).is_some_and(|f| f == "_start"))
        .collect();
    let named = share(&whole, |s| {
        s.iter()
            .any(|f| matches!(js_function(f), Some("fa" | "fb" | "fc")))
    });
    assert!(named >= 90.0, "{named:.1}% of whole stacks in fa, fb or fc");
}

/// `npm run` starts the node that runs a package's script: the advice is
/// spelled for the command given (`NODE_OPTIONS`, which npm passes on to
/// that node), and followed it names the script's functions. The program
/// runs 100 units, about as long as npm takes to start: 60% of the samples
/// fell in fa, fb or fc followed (0% before, all `[anon]`), so 35% leaves
/// a wide margin for a loaded machine, which slows both alike.
#[test]
fn npm_is_told_the_node_options_that_name_its_script() {
    let Some(npm) = runtime("npm", SKIP_NODE) else {
        return;
    };
    let dir = tmp();
    let script = format!("node --allow-natives-syntax {PROGRAM} 100");
    let package = serde_json::json!({
        "name": "known-profile",
        "version": "1.0.0",
        "private": true,
        "scripts": { "bench": script },
    });
    std::fs::write(dir.path().join("package.json"), package.to_string()).expect("write");
    let npm = npm.to_string_lossy().into_owned();
    let run = |env: &[&str], name: &str| {
        let out = dir.path().join(name);
        let mut cmd = vec!["env"];
        cmd.extend_from_slice(env);
        cmd.extend_from_slice(&[npm.as_str(), "run", "--silent", "bench"]);
        let o = record_in(Some(dir.path()), &out, &[], &cmd)?;
        remove_jit_files(&out, None);
        assert!(o.status.success(), "record failed: {}", stderr(&o));
        Some((stderr(&o), fold(&out, &[])))
    };
    let Some((err, _)) = run(&[], "npm.frec") else {
        return;
    };
    let (line, _) = advice_line(&err, "of the samples of node");
    let options = "--perf-basic-prof --interpreted-frames-native-stack";
    assert!(
        line.ends_with(&format!("run it with NODE_OPTIONS='{options}'")),
        "{line}"
    );
    let Some((err, stacks)) = run(&[&format!("NODE_OPTIONS={options}")], "followed.frec") else {
        return;
    };
    assert!(!err.contains("ran JIT code that no perf map"), "{err}");
    let named = share(&stacks, |s| {
        s.iter()
            .any(|f| matches!(js_function(f), Some("fa" | "fb" | "fc")))
    });
    assert!(
        named >= 35.0,
        "{named:.1}% of samples in fa, fb or fc\n{err}"
    );
}

/// A sample in code without unwind rules is stepped by a guess: node's
/// bytecode handlers (no rules in node's binary) ended 1,500 of 6,185
/// stacks at one frame as if whole. Every stack that stops there is now
/// counted cut: the recording's cut stacks are at least its one-frame
/// user stacks of node (other threads start at `clone3`, whole).
#[test]
fn a_stack_ended_by_a_guess_is_counted_cut() {
    let Some((_, stacks, cut)) = interpreted_node(&[]) else {
        return;
    };
    let one_frame: u64 = stacks
        .iter()
        .filter(|(s, _)| s.len() == 2 && s[1].starts_with("Builtins_"))
        .map(|s| s.1)
        .sum();
    assert!(one_frame > 100, "{one_frame} samples in a handler alone");
    assert!(
        cut >= one_frame,
        "{cut} counted cut, {one_frame} one-frame stacks"
    );
}
