//! Helpers shared by the end-to-end tests: run the `flamerec` binary,
//! record (failing with the cause when perf_event_open is unusable, unless
//! FLAMEREC_SKIP_PERF_TESTS=1), fold and read `info --json`.
#![allow(dead_code)]

pub mod sys;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flamerec_samples::{build, frame_is, FramePointers, Sample};

/// The binary under test. Its HOME is a directory of the test build, so
/// fold's default symbol cache never touches the user's.
pub fn flamerec() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flamerec"));
    c.env("HOME", concat!(env!("CARGO_TARGET_TMPDIR"), "/home"));
    c
}

/// A fresh temporary directory.
pub fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// What a run printed on stderr.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Records `cmd` into `out`; `None` when perf tests are skipped.
pub fn record(out: &Path, extra: &[&str], cmd: &[&str]) -> Option<Output> {
    let o = flamerec()
        .arg("record")
        .arg("-q")
        .arg("-o")
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run flamerec");
    let err = stderr(&o);
    if err.contains("perf_event_open") {
        if std::env::var("FLAMEREC_SKIP_PERF_TESTS").as_deref() == Ok("1") {
            eprintln!("skipped (FLAMEREC_SKIP_PERF_TESTS=1): {err}");
            return None;
        }
        panic!("perf_event_open is not usable here, so this test cannot record: {err}");
    }
    Some(o)
}

/// Folded stacks of a recording as (frames root first, count).
pub fn fold(path: &Path, extra: &[&str]) -> Vec<(Vec<String>, u64)> {
    let o = flamerec()
        .arg("fold")
        .args(extra)
        .arg(path)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "fold failed: {}", stderr(&o));
    parse_folded(&String::from_utf8(o.stdout).expect("utf-8 folded output"))
}

/// Folded lines (as `flamerec fold` writes them) as (frames root first, count).
pub fn parse_folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').expect("`stack count` line");
            (
                stack.split(';').map(str::to_owned).collect(),
                count.parse().expect("count"),
            )
        })
        .collect()
}

/// Runs `flamerec ARGS` with `input` on its standard input.
pub fn flamerec_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = flamerec()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run flamerec");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    // Written from a thread: flamerec may stop reading early (an error).
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("wait for flamerec");
    let _ = writer.join();
    out
}

pub fn info_json(path: &Path) -> serde_json::Value {
    let o = flamerec()
        .args(["info", "--json"])
        .arg(path)
        .output()
        .expect("run flamerec info");
    assert!(o.status.success(), "info failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("info --json is JSON")
}

/// Share (0–100) of samples whose stack satisfies `pred`.
pub fn share(stacks: &[(Vec<String>, u64)], pred: impl Fn(&[String]) -> bool) -> f64 {
    let total: u64 = stacks.iter().map(|s| s.1).sum();
    let hit: u64 = stacks.iter().filter(|s| pred(&s.0)).map(|s| s.1).sum();
    hit as f64 * 100.0 / total.max(1) as f64
}

pub fn sample_bin(s: Sample, fp: FramePointers) -> PathBuf {
    build(s, fp).unwrap_or_else(|e| panic!("cannot build sample {s}: {e}"))
}

/// Whether perf_event_open works here; panics naming the cause when it does
/// not, unless FLAMEREC_SKIP_PERF_TESTS=1 (then `false`).
pub fn perf_usable() -> bool {
    let dir = tmp();
    record(&dir.path().join("probe.frec"), &["-g", "fp"], &["true"]).is_some()
}

/// Sum of the counts of folded stacks.
pub fn total(stacks: &[(Vec<String>, u64)]) -> u64 {
    stacks.iter().map(|s| s.1).sum()
}

/// Kernel functions where a sample lands when the timer catches a thread
/// being switched out or back in (preemption, interrupt return). How many
/// there are depends on how often the machine preempts the workload — 0%
/// of one run and 4% of another in a full CI run — which is load, not
/// attribution.
pub const TASK_SWITCH_LEAVES: [&str; 6] = [
    "irqentry_exit_to_user_mode",
    "finish_task_switch",
    "__schedule",
    "schedule",
    "preempt_schedule",
    "asm_sysvec_apic_timer_interrupt",
];

/// Whether a (leaf) frame is one of [`TASK_SWITCH_LEAVES`], compiler
/// suffixes (`.isra.0`) aside.
pub fn is_task_switch(frame: &str) -> bool {
    TASK_SWITCH_LEAVES
        .iter()
        .any(|t| frame == *t || frame.strip_prefix(t).is_some_and(|r| r.starts_with('.')))
}

/// The stacks whose leaf is not a task switch. Shares of what is left are
/// the workload's own split: a task switch interrupts whatever the thread
/// was running, so leaving those samples out takes from every function in
/// proportion, where counting them would lower every user function's self
/// share by as much as the machine is busy.
pub fn without_task_switches(stacks: &[(Vec<String>, u64)]) -> Vec<(Vec<String>, u64)> {
    stacks
        .iter()
        .filter(|(s, _)| !s.last().is_some_and(|f| is_task_switch(f)))
        .cloned()
        .collect()
}

/// Asserts a sample's expected shares (self: leaf frame; total: anywhere in
/// the stack, once per sample) within `flamerec_samples::TOLERANCE_PCT`
/// points, of the samples that are not task switches (see
/// [`without_task_switches`]).
pub fn assert_expected_shares(stacks: &[(Vec<String>, u64)], sample: Sample) {
    let stacks = &without_task_switches(stacks);
    for e in sample.expected() {
        let got = match e.kind {
            flamerec_samples::ShareKind::SelfPct => share(stacks, |s| {
                s.last().is_some_and(|f| frame_is(f, e.function))
            }),
            flamerec_samples::ShareKind::TotalPct => {
                share(stacks, |s| s.iter().any(|f| frame_is(f, e.function)))
            }
        };
        assert!(
            e.matches(got),
            "{sample} {}: {got:.1}% measured, {}% expected",
            e.function,
            e.pct
        );
    }
}

/// How long [`wait_for`] waits: generous, the machine running the tests is
/// shared and busy. A condition that never comes fails the test; a slow one
/// only makes it slower.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `cond` until it holds; panics naming `what` after [`DEADLINE`].
/// What a test waits for instead of sleeping a fixed time, which a busy
/// machine can outlast.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What /proc/PID/stat says of a process.
#[derive(Debug, Clone)]
pub struct ProcStat {
    pub comm: String,
    pub ppid: u32,
    /// User and system CPU time, in clock ticks (1/100 s).
    pub cpu_ticks: u64,
}

/// /proc/PID/stat of `pid`, `None` once it is gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = text.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_owned();
    // Fields after the name: state, ppid, ... utime (14th of the line), stime (15th).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(ProcStat {
        comm,
        ppid: u32::try_from(num(1)?).ok()?,
        cpu_ticks: num(11)? + num(12)?,
    })
}

/// A live process named `comm` (after its exec) among the descendants of
/// `root`.
pub fn descendant(root: u32, comm: &str) -> Option<u32> {
    let pids = std::fs::read_dir("/proc").ok()?;
    pids.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&pid| {
            let Some(stat) = proc_stat(pid) else {
                return false;
            };
            if stat.comm != comm {
                return false;
            }
            let mut up = stat.ppid;
            // Bounded: a pid reused into a loop cannot hang the test.
            for _ in 0..64 {
                if up == root {
                    return true;
                }
                match proc_stat(up) {
                    Some(s) if up > 1 => up = s.ppid,
                    _ => return false,
                }
            }
            false
        })
}

/// `cmd` run through `taskset` on one CPU: every process and thread it
/// starts shares that CPU, taking turns in slices of a few milliseconds.
/// Successive calls take the CPUs this test process may use in turn.
///
/// Tests pin where that keeps what they measure from depending on the rest
/// of the machine's work, each saying why. Two reasons: shares of CPU time
/// split across tasks, where a CPU slower than the other (a busy SMT
/// sibling, a host stealing one vCPU) charges its tasks more time for the
/// same work, while on one CPU a change of speed reaches each task alike;
/// and the recorder's proof that a deep stack is still live, which needs
/// the sampled thread to be sampled again soon, as turns on one CPU
/// guarantee. Records of several CPUs' rings are still merged by the tests
/// that do not pin.
pub fn on_one_cpu(cmd: &[&str]) -> Vec<String> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let cpus = allowed_cpus();
    let cpu = cpus[NEXT.fetch_add(1, Ordering::Relaxed) % cpus.len()];
    ["taskset", "-c", &cpu.to_string()]
        .into_iter()
        .chain(cmd.iter().copied())
        .map(str::to_owned)
        .collect()
}

/// The CPUs this process may run on (`Cpus_allowed_list` of
/// /proc/self/status, as `0-1,4`); CPU 0 when it cannot be read.
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("0");
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<u32>(), hi.parse::<u32>()) {
            cpus.extend(lo..=hi);
        }
    }
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}
