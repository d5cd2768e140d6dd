//! Names travel with the recording: a program compiled here (C with inlined
//! functions) is recorded, then deleted along with the symbol cache, and its
//! recordings still fold and diff to the same names — also when it is
//! deleted while it runs, since names are looked up while recording.
//!
//! Tests that record need perf_event_open. Where it is denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{compile_c, descendant, flamerec, stderr, tmp, wait_for, workload};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};

const PROGRAM: &str = r#"
#include <stdint.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) uint64_t names_inner(uint64_t x) {
    for (int i = 0; i < 1000; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static inline __attribute__((always_inline)) uint64_t names_middle(uint64_t x) {
    return names_inner(x ^ 0x9e37);
}

__attribute__((noinline)) uint64_t names_leaf(uint64_t x) {
    return names_middle(x) + 1;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 300000;
    uint64_t x = 1;
    for (long i = 0; i < n; i++)
        x = names_leaf(x);
    return (int)(x & 1);
}
"#;

/// Compiles the program into `dir` with gcc (-O2 -g: DWARF in the binary).
fn compile(dir: &Path, name: &str) -> PathBuf {
    compile_c(dir, name, PROGRAM, &["-O2", "-g"])
}

/// `flamerec` with its symbol cache under `home`.
fn flamerec_at(home: &Path) -> Command {
    let mut c = flamerec();
    c.env("HOME", home);
    c
}

/// The skip rule for a recording that perf_event_open refused (its
/// stderr `err`).
fn perf_denied(err: &str) {
    skip_or_fail(
        SKIP_PERF,
        format!("perf_event_open is not usable here, so this test cannot record: {err}"),
    );
}

/// Records `cmd`; `None` when perf tests are skipped.
fn record(home: &Path, out: &Path, extra: &[&str], cmd: &[&str]) -> Option<Output> {
    let _running = workload();
    let o = flamerec_at(home)
        .args(["record", "-q", "-o"])
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run flamerec record");
    let err = stderr(&o);
    if err.contains("perf_event_open") {
        perf_denied(&err);
        return None;
    }
    assert!(
        o.status.success() || o.status.code() == Some(1),
        "record: {err}"
    );
    Some(o)
}

/// Starts recording `bin N` into `out`, stderr piped.
fn start_recording(home: &Path, out: &Path, bin: &Path, n: &str) -> Child {
    flamerec_at(home)
        .args(["record", "-q", "-o"])
        .arg(out)
        .arg("--")
        .arg(bin)
        .arg(n)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start flamerec record")
}

fn fold(home: &Path, path: &Path, extra: &[&str]) -> (String, String) {
    let o = flamerec_at(home)
        .arg("fold")
        .args(extra)
        .arg(path)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "fold failed: {}", stderr(&o));
    let err = stderr(&o);
    (String::from_utf8(o.stdout).expect("utf-8"), err)
}

fn info_symbols(home: &Path, path: &Path) -> String {
    let o = flamerec_at(home)
        .args(["info", "--json"])
        .arg(path)
        .output()
        .expect("run flamerec info");
    assert!(o.status.success(), "info: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    v["symbols"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_recording_folds_to_the_same_names_after_its_binary_and_cache_are_gone() {
    let dir = tmp();
    let home = dir.path().join("home");
    let bin = compile(dir.path(), "names-prog");
    let (embedded, bare) = (dir.path().join("e.frec"), dir.path().join("b.frec"));
    let prog = bin.to_str().unwrap();
    let Some(_) = record(&home, &embedded, &[], &[prog]) else {
        return;
    };
    record(&home, &bare, &["--no-embed-symbols"], &[prog]).expect("second recording");
    assert_eq!(info_symbols(&home, &embedded), "embedded");
    assert_eq!(info_symbols(&home, &bare), "none");

    let (a, _) = fold(&home, &embedded, &[]);
    let (from_binaries, _) = fold(&home, &embedded, &["--resymbolize", "--no-cache"]);
    assert_eq!(
        a, from_binaries,
        "names from the file differ from the binaries'"
    );
    assert!(
        a.contains(";names_leaf;names_middle;names_inner "),
        "inlined frames expanded:\n{a}"
    );

    // A damaged names section: a warning, and names from the binaries.
    let mut bytes = std::fs::read(&embedded).expect("read the recording");
    let damaged = dir.path().join("damaged.frec");
    let at = bytes.len() - 3;
    bytes[at] ^= 0x55;
    std::fs::write(&damaged, &bytes).expect("write the damaged copy");
    let (d, warnings) = fold(&home, &damaged, &["--no-cache"]);
    assert!(
        warnings.contains("names embedded in the recording are damaged"),
        "{warnings}"
    );
    assert_eq!(a, d);
    assert_eq!(info_symbols(&home, &damaged), "partial");

    std::fs::remove_file(&bin).expect("delete the program");
    std::fs::remove_dir_all(&home).expect("empty the symbol cache");
    let (b, warnings) = fold(&home, &embedded, &[]);
    assert_eq!(a, b, "fold after deleting the binary differs");
    assert!(!warnings.contains("warning"), "{warnings}");

    // Without embedded names the program's frames are addresses now, and
    // one warning says why.
    let (c, warnings) = fold(&home, &bare, &[]);
    assert!(c.contains("names-prog+0x"), "{c}");
    assert!(!c.contains("names_leaf"), "{c}");
    assert!(warnings.contains("missing"), "{warnings}");
}

/// The GNU build id of `bin`, in hex, as `readelf -n` prints it.
fn build_id(bin: &Path) -> String {
    let o = Command::new("readelf")
        .arg("-n")
        .arg(bin)
        .output()
        .unwrap_or_else(|e| {
            panic!("this test reads build ids with readelf (binutils), which is missing: {e}")
        });
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}: {text}", bin.display()))
        .to_string()
}

#[test]
fn names_are_embedded_while_recording_so_a_program_deleted_midway_keeps_them() {
    let dir = tmp();
    let home = dir.path().join("home");
    let bin = compile(dir.path(), "names-gone");
    let cache_file = home
        .join(".cache/flamerec/symbols-v3")
        .join(format!("{}.sym", build_id(&bin)));
    let out = dir.path().join("gone.frec");
    // The program runs until it is killed below.
    let _running = workload();
    let mut rec = start_recording(&home, &out, &bin, "1000000000000");
    // The recorder hands new frames to its naming threads every 250 ms, and
    // a binary's thread writes the symbol cache as soon as it has read it:
    // no fixed wait, so a busy machine only makes it slower.
    wait_for("the recorder to name the running program's frames", || {
        cache_file.exists() || rec.try_wait().ok().flatten().is_some()
    });
    if !cache_file.exists() {
        let o = rec.wait_with_output().expect("wait for flamerec record");
        let err = stderr(&o);
        if err.contains("perf_event_open") {
            return perf_denied(&err);
        }
        panic!("the recorder ended before it named the program's frames: {err}");
    }
    std::fs::remove_file(&bin).expect("delete the running program");
    std::fs::remove_dir_all(&home).expect("empty the symbol cache");
    let prog = descendant(rec.id(), "names-gone").expect("the program still runs");
    let killed = Command::new("kill")
        .arg(prog.to_string())
        .status()
        .expect("run kill");
    assert!(killed.success(), "kill {prog}");
    let o = rec.wait_with_output().expect("wait for flamerec record");
    let err = stderr(&o);
    assert!(!err.contains("missing"), "{err}");
    assert_eq!(info_symbols(&home, &out), "embedded", "{err}");
    let (folded, warnings) = fold(&home, &out, &[]);
    assert!(
        folded.contains(";names_leaf;names_middle;names_inner "),
        "names of the deleted program, inlined frames expanded:\n{folded}"
    );
    assert!(!warnings.contains("missing"), "{warnings}");
}

#[test]
fn a_diff_of_embedded_recordings_is_the_same_after_the_binaries_are_gone() {
    let dir = tmp();
    let home = dir.path().join("home");
    let bin = compile(dir.path(), "names-diff");
    let (base, new) = (dir.path().join("base.frec"), dir.path().join("new.frec"));
    let prog = bin.to_str().unwrap();
    let Some(_) = record(&home, &base, &[], &[prog]) else {
        return;
    };
    record(&home, &new, &[], &[prog, "450000"]).expect("second recording");
    let diff = |out: &Path| {
        let o = flamerec_at(&home)
            .arg("diff")
            .arg("--json")
            .arg(out)
            .arg(&base)
            .arg(&new)
            .output()
            .expect("run flamerec diff");
        assert!(o.status.success(), "diff: {}", stderr(&o));
        std::fs::read_to_string(out).expect("diff JSON")
    };
    let before = diff(&dir.path().join("before.json"));
    assert!(before.contains("names_inner"), "{before}");
    std::fs::remove_file(&bin).expect("delete the program");
    std::fs::remove_dir_all(&home).expect("empty the symbol cache");
    let after = diff(&dir.path().join("after.json"));
    assert_eq!(before, after);
}

#[test]
fn a_recorder_killed_midway_keeps_the_names_it_learned() {
    let dir = tmp();
    let home = dir.path().join("home");
    let bin = compile(dir.path(), "names-killed");
    let out = dir.path().join("k.frec");
    let _running = workload();
    let mut child = start_recording(&home, &out, &bin, "20000000");
    // Names go into the chunks as the lookup returns them (about a second
    // after their frames appear): wait until the file holds some (the
    // program runs ≈ 20 s, and is killed once they are there).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        if std::fs::metadata(&out).is_ok_and(|m| m.len() > 0)
            && info_symbols(&home, &out) == "partial"
        {
            break;
        }
        assert!(Instant::now() < deadline, "no names reached the file");
        std::thread::sleep(Duration::from_millis(100));
    }
    let running = child.try_wait().expect("poll flamerec").is_none();
    child.kill().expect("kill -9 flamerec");
    let o = child.wait_with_output().expect("reap flamerec");
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("perf_event_open") {
        return perf_denied(&err);
    }
    assert!(running, "flamerec ended before it was killed: {err}");
    // The recorded program outlives flamerec: stop it too.
    let _ = Command::new("pkill")
        .arg("-KILL")
        .arg("-f")
        .arg(&bin)
        .status();
    // No names section (no end record), names in the chunks.
    assert_eq!(info_symbols(&home, &out), "partial");
    // The binary gone, the names come from the file.
    std::fs::remove_file(&bin).expect("remove the binary");
    let (folded, warnings) = fold(&home, &out, &["--no-cache"]);
    assert!(warnings.contains("truncated"), "{warnings}");
    assert!(folded.contains("names_leaf"), "{folded}");
}
