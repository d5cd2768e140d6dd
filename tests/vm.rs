//! Recording on other kernels, in a VM: deferred user callchains on Linux
//! 7.2 (`-g fp,defer`), and what users of older kernels get on Debian
//! bookworm's 6.1 (the fallback to plain frame pointers, saying why).
//!
//! Each test boots one kernel with `vm/run` (qemu, TCG; it installs qemu and
//! busybox-static as root when missing and fetches the kernel package from
//! Debian through a private apt configuration, see vm/README.md), records
//! `vm/guest/deep-fp` — a static frame-pointer program with a 400-frame CPU
//! path and a 400-frame system-call path — in the guest, and checks on the
//! host what came back: the recording's figures from `info --json`, and its
//! stacks folded here, against the program's construction and against the
//! guest's own fold of the same file.
//!
//! Without qemu, the kernel package or gcc these tests fail with the cause;
//! `FLAMEREC_SKIP_VM_TESTS=1` skips them (saying so on stderr).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::common::{fold, gcc, parse_folded};
use flamerec_testkit::{skip_or_fail, skipping, SKIP_VM};

/// Frames of each descent below `deep_run`, as built (see deep-fp.c).
const DEPTH: usize = 400;
/// Seconds the guest program runs per recording. Under TCG on a busy
/// 2-core host this is a few hundred samples at 999 Hz, each path's share
/// tens of percent: the minimum counts below hold with a wide margin.
const SECONDS: &str = "1.5";

/// Ring pages per CPU (2 MiB; the fp default is 512 KiB). The guest's
/// vCPUs are host threads: on a busy host the recorder's vCPU can stall for
/// longer than a default ring lasts with 400-frame stacks (3 KiB a record),
/// and a lost deferred record leaves its samples unmatched. Stitching, not
/// ring sizing, is what these tests are about.
const RING_PAGES: u32 = 512;

/// Whether the VM tests are skipped (FLAMEREC_SKIP_VM_TESTS=1, said on
/// stderr). Without it they run, and fail with the cause where no VM can.
fn skip() -> bool {
    let skip = skipping(SKIP_VM);
    if skip {
        skip_or_fail(SKIP_VM, "this test boots Linux under qemu");
    }
    skip
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// deep-fp, built static with frame pointers by the system's gcc.
fn deep_fp(dir: &Path) -> PathBuf {
    let out = dir.join("deep-fp");
    let src = repo().join("vm/guest/deep-fp.c");
    gcc(
        dir,
        &[
            "-O1",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
            "-static",
            "-o",
            &out.to_string_lossy(),
            &src.to_string_lossy(),
        ],
    );
    out
}

/// Boots `kernel`, runs `script` in the guest; returns the directory its
/// $OUT came back into, and the console output.
fn boot(kernel: &str, smp: u32, script: &str, name: &str) -> (PathBuf, String) {
    // One guest at a time: two TCG guests on a 2-core host would each run
    // at half speed, and the margins above assume one.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("vm-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let program = deep_fp(&dir);
    let script_path = dir.join("guest.sh");
    std::fs::write(&script_path, script).unwrap();
    let out = dir.join("out");
    let flamerec = env!("CARGO_BIN_EXE_flamerec");
    let run = Command::new(repo().join("vm/run"))
        .args([
            "--kernel",
            kernel,
            "--timeout",
            "240",
            "--smp",
            &smp.to_string(),
        ])
        .arg("--out")
        .arg(&out)
        .arg("--add")
        .arg(format!("{flamerec}=/flamerec"))
        .arg("--add")
        .arg(format!("{}=/deep-fp", program.display()))
        .arg(&script_path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run vm/run: {e}"));
    let console = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        run.status.success(),
        "the VM run on {kernel} failed ({}):\n{console}",
        run.status
    );
    (out, console)
}

/// The guest script: record deep-fp with each mode, keep what record said,
/// its info and its fold in the guest.
fn script(modes: &[&str]) -> String {
    let mut s = String::from("cd /tmp\n");
    for m in modes {
        let n = m.replace(',', "-");
        s.push_str(&format!(
            "/flamerec record -q -g {m} --mmap-pages {RING_PAGES} -o $OUT/{n}.frec -- /deep-fp {DEPTH} {SECONDS} 2> $OUT/{n}.stderr\n\
             cat $OUT/{n}.stderr\n\
             /flamerec info --json $OUT/{n}.frec > $OUT/{n}.info.json\n\
             /flamerec fold $OUT/{n}.frec > $OUT/{n}.guest.folded\n"
        ));
    }
    s
}

fn info(out: &Path, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join(format!("{name}.info.json"))).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}.info.json: {e}: {text}"))
}

/// Folds a recording here, on the host.
fn fold_on_host(frec: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_flamerec"))
        .arg("fold")
        .arg(frec)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Samples on the exit path (a kernel frame in `exit_group` or `do_exit`),
/// with user frames or without; and the folded lines of the other samples
/// that have kernel frames only.
fn exit_path(frec: &Path) -> (u64, Vec<String>) {
    let (mut exiting, mut other) = (0, Vec::new());
    for (stack, n) in fold(frec, &["--kernel-suffix"]) {
        let frames = &stack[1..];
        let kernel = |f: &String| f.ends_with("_[k]");
        // Taken on the system call entry, before the call is dispatched:
        // without a user part, it is in a call that never returned to user
        // space, which for deep-fp only exit_group is (seen once beside two
        // busy loops: `entry_SYSCALL_64_after_hwframe;do_syscall_64`).
        let entry = ["entry_SYSCALL_64_after_hwframe_[k]", "do_syscall_64_[k]"];
        if frames
            .iter()
            .any(|f| kernel(f) && (f.contains("exit_group") || f.starts_with("do_exit")))
            || (!frames.is_empty() && frames.iter().all(|f| entry.contains(&f.as_str())))
        {
            exiting += n;
        } else if !frames.is_empty() && frames.iter().all(kernel) {
            other.push(format!("{} {n}", stack.join(";")));
        }
    }
    (exiting, other)
}

/// How the samples' stacks compare with deep-fp's construction.
#[derive(Debug, Default)]
struct Shapes {
    /// Samples in a leaf whose stack below main is exactly the construction.
    whole_cpu: u64,
    whole_sys: u64,
    /// ... of those, with kernel frames (in the read system call).
    sys_in_kernel: u64,
    /// Samples on the way down or up (no leaf): their descend frames.
    partial: u64,
    /// Samples in a leaf one descend frame short: taken on the leaf's first
    /// or last instructions, before it saved the frame pointer or after it
    /// restored it, when a frame-pointer walk skips the caller. Under TCG
    /// a timer interrupt lands only between translated blocks, such as a
    /// function's entry, so these are a few per run.
    prologue: u64,
    /// Samples in a leaf whose stack is not the construction, by shape.
    wrong: BTreeMap<String, u64>,
    /// Samples outside main (program start and exit).
    outside: u64,
    total: u64,
}

fn shapes(folded: &str) -> Shapes {
    let mut s = Shapes::default();
    for (frames, n) in parse_folded(folded) {
        s.total += n;
        let Some(main) = frames.iter().position(|f| f == "main") else {
            s.outside += n;
            continue;
        };
        let below = &frames[main + 1..];
        let leaf = below.iter().position(|f| f.ends_with("_leaf"));
        let Some(leaf) = leaf else {
            let descends = below.iter().filter(|f| f.contains("_descend")).count();
            if descends <= DEPTH {
                s.partial += n;
            } else {
                *s.wrong.entry(shape(below)).or_default() += n;
            }
            continue;
        };
        let path = if below[leaf] == "deep_cpu_leaf" {
            "deep_cpu_descend"
        } else {
            "deep_sys_descend"
        };
        let starts = below.first().is_some_and(|f| f == "deep_run");
        let whole = starts && leaf == DEPTH + 1 && below[1..leaf].iter().all(|f| f == path);
        let short = starts && leaf == DEPTH && below[1..leaf].iter().all(|f| f == path);
        let kernel = below.len() > leaf + 1;
        match (whole, path) {
            (true, "deep_cpu_descend") => s.whole_cpu += n,
            (true, _) => {
                s.whole_sys += n;
                s.sys_in_kernel += u64::from(kernel) * n;
            }
            (false, _) if short => s.prologue += n,
            (false, _) => *s.wrong.entry(shape(below)).or_default() += n,
        }
    }
    s
}

/// A stack below main in short: runs of one frame as `name×count`.
fn shape(frames: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < frames.len() {
        let mut j = i;
        while j < frames.len() && frames[j] == frames[i] {
            j += 1;
        }
        out.push(if j - i > 1 {
            format!("{}×{}", frames[i], j - i)
        } else {
            frames[i].to_string()
        });
        i = j;
    }
    out.join(";")
}

/// Stacks whole and as built: every leaf sample's stack is the
/// construction (but for the few a frame-pointer walk cuts one short at a
/// leaf's entry or exit, see `Shapes::prologue`), both paths were sampled
/// (the system call's in the kernel too), and the host folds the file to
/// what the guest folded.
fn assert_whole(out: &Path, name: &str) -> Shapes {
    let host = fold_on_host(&out.join(format!("{name}.frec")));
    let guest = std::fs::read_to_string(out.join(format!("{name}.guest.folded"))).unwrap();
    assert_eq!(
        host, guest,
        "{name}: the host folds the recording differently from the guest"
    );
    let s = shapes(&host);
    assert!(
        s.wrong.is_empty(),
        "{name}: stacks in a leaf that are not deep-fp's construction: {:?} ({s:?})",
        s.wrong
    );
    let leaves = s.whole_cpu + s.whole_sys;
    assert!(
        s.prologue * 50 <= leaves.max(100),
        "{name}: more leaf samples one frame short than a leaf's entry and exit explain \
         (2% of leaf samples): {s:?}"
    );
    // Margins: each path is roughly half the run (hundreds of samples);
    // 20 each is far below what a loaded host gives, far above none.
    assert!(
        s.whole_cpu >= 20,
        "{name}: too few whole CPU-path stacks: {s:?}"
    );
    assert!(
        s.whole_sys >= 20,
        "{name}: too few whole system-call stacks: {s:?}"
    );
    assert!(
        s.sys_in_kernel >= 10,
        "{name}: too few system-call samples in the kernel with their user stack: {s:?}"
    );
    // Start-up and exit outside main: 2–8% of a run under TCG (the dynamic
    // part of start-up is slow there); a quarter is far from either.
    assert!(s.outside * 4 <= s.total, "{name}: {s:?}");
    s
}

#[test]
fn deferred_callchains_on_linux_7_2_are_whole_and_every_cookie_matched_but_at_exit() {
    if skip() {
        return;
    }
    // Two CPUs: the thread moves between them, so a sample and its user
    // part are often in different rings.
    let (out, console) = boot("7.2", 2, &script(&["fp,defer", "fp"]), "7.2");
    assert!(console.contains("Linux 7.2"), "not 7.2:\n{console}");

    let i = info(&out, "fp-defer");
    assert_eq!(i["call_graph"], "fp,defer", "{i}");
    assert_eq!(i["user_stacks"], "deferred", "{i}");
    // 0 lost: a 2 MiB ring holds ≈ 650 records of ≈ 3 KiB, ≈ 0.65 s of one
    // vCPU's samples, far longer than a busy host stalls the recorder's vCPU
    // (54 records were lost with 512 KiB; see RING_PAGES).
    assert_eq!(i["lost_samples"], 0, "{i}");
    // Every sample gets its user part, but for samples taken while the
    // process exits: a task leaving in exit_group never returns to user
    // space, so the kernel walks no user stack for a cookie (unmatched).
    // It defers nothing for a task on its way out (no cookie): such a
    // sample was seen with its user stack walked at once (`_Exit` under
    // do_exit, whole but not stitched), and once the task has dropped its
    // memory there is none. A few samples of a run, all on the exit path;
    // no other sample keeps kernel frames only.
    assert_eq!(i["deferred"]["orphan_records"], 0, "{i}");
    let (stitched, samples) = (
        i["deferred"]["stitched"].as_u64().unwrap(),
        i["samples"].as_u64().unwrap(),
    );
    let without_user = samples - stitched;
    let (exiting, other) = exit_path(&out.join("fp-defer.frec"));
    assert!(
        other.is_empty(),
        "samples without their user part outside the exit path: {other:?} ({i})"
    );
    assert!(
        without_user <= exiting,
        "more samples without a deferred user part than on the exit path: {i}"
    );
    // The exit path is a short stretch of the guest's CPU (≈ 1 sample at
    // 999 Hz). A busy host that stalls the vCPU meanwhile adds one overdue
    // timer interrupt per stall, not one sample per missed period (the
    // cpu-clock timer fires once and moves on), so 5 allows a few stalls
    // inside an exit.
    assert!(without_user <= 5, "{i}");
    assert_eq!(i["truncated_stacks"], 0, "{i}");
    let s = assert_whole(&out, "fp-defer");
    eprintln!("7.2 fp,defer: {s:?}");

    // Plain fp in the same boot: whole too, because flamerec raised the
    // kernel's cap (127) for the recording, and said so.
    let stderr = std::fs::read_to_string(out.join("fp.stderr")).unwrap();
    assert!(
        stderr.contains("kernel.perf_event_max_stack raised from 127 to 1024"),
        "{stderr}"
    );
    assert!(!stderr.contains("could not be set back"), "{stderr}");
    let i = info(&out, "fp");
    assert_eq!(i["user_stacks"], "frame-pointers", "{i}");
    assert_eq!(i["lost_samples"], 0, "{i}");
    let s = assert_whole(&out, "fp");
    eprintln!("7.2 fp: {s:?}");
}

#[test]
fn linux_6_1_falls_back_to_frame_pointers_and_says_why() {
    if skip() {
        return;
    }
    let (out, console) = boot("6.1", 1, &script(&["fp,defer"]), "6.1");
    assert!(console.contains("Linux 6.1"), "not 6.1:\n{console}");
    let stderr = std::fs::read_to_string(out.join("fp-defer.stderr")).unwrap();
    let why: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not offer deferred user callchains"))
        .collect();
    assert_eq!(why.len(), 1, "one line saying why: {stderr}");
    assert!(why[0].contains("Linux 6.1"), "{stderr}");
    let i = info(&out, "fp-defer");
    assert_eq!(i["call_graph"], "fp", "{i}");
    assert_eq!(i["user_stacks"], "frame-pointers", "{i}");
    assert_eq!(i["lost_samples"], 0, "{i}");
    let s = assert_whole(&out, "fp-defer");
    eprintln!("6.1 fp (fallback): {s:?}");
}
