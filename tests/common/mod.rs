//! Helpers shared by the end-to-end tests: run the `flamerec` binary,
//! record (failing with the cause when perf_event_open is unusable, unless
//! FLAMEREC_SKIP_PERF_TESTS=1), fold and read `info --json`.
#![allow(dead_code)]

pub mod sys;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use flamerec_perf::procfs::{self, TaskStat};
use flamerec_samples::{build, frame_is, FramePointers, Sample};
use flamerec_testkit::{skip_or_fail, SKIP_BPF, SKIP_PERF};

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

/// Every workload the tests record runs under a shared hold of this lock;
/// a test that measures shares, losses or timing holds it alone ([`alone`])
/// for its whole run, so it never runs beside another test's workload (a
/// pipeline sample drifted 6 points from perf's when another test ran
/// beside it). The suite is one binary whose tests run in parallel.
static WORKLOADS: RwLock<()> = RwLock::new(());

thread_local! {
    /// This thread's test holds [`WORKLOADS`] alone.
    static ALONE: Cell<bool> = const { Cell::new(false) };
}

/// The whole machine for one measuring test, until dropped.
pub struct Alone(#[allow(dead_code)] RwLockWriteGuard<'static, ()>);

impl Drop for Alone {
    fn drop(&mut self) {
        ALONE.with(|a| a.set(false));
    }
}

/// Waits until no other test runs a workload, and keeps them waiting until
/// the guard is dropped. A failed test poisons the lock; the next one may
/// still run alone.
pub fn alone() -> Alone {
    let guard = WORKLOADS.write().unwrap_or_else(PoisonError::into_inner);
    ALONE.with(|a| a.set(true));
    Alone(guard)
}

/// For a test that measures shares, losses or cut stacks: the machine to
/// itself ([`alone`]) once perf events are known to work; `None` when perf
/// tests are skipped (see [`perf_usable`]).
pub fn measuring() -> Option<Alone> {
    let alone = alone();
    perf_usable().then_some(alone)
}

/// Held while a workload runs: shared with other tests' workloads, and
/// nothing to wait for when this thread's test runs [`alone`].
pub fn workload() -> Option<RwLockReadGuard<'static, ()>> {
    (!ALONE.with(Cell::get)).then(|| WORKLOADS.read().unwrap_or_else(PoisonError::into_inner))
}

/// Records `cmd` into `out`; `None` when perf tests are skipped.
pub fn record(out: &Path, extra: &[&str], cmd: &[&str]) -> Option<Output> {
    record_in(None, out, extra, cmd)
}

/// [`record`], with the command run in `cwd` (runtimes write files there).
pub fn record_in(cwd: Option<&Path>, out: &Path, extra: &[&str], cmd: &[&str]) -> Option<Output> {
    let mut c = flamerec();
    if let Some(dir) = cwd {
        c.current_dir(dir);
    }
    let running = workload();
    let o = c
        .arg("record")
        .arg("-q")
        .arg("-o")
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run flamerec");
    drop(running);
    let err = stderr(&o);
    if err.contains("perf_event_open") {
        skip_or_fail(
            SKIP_PERF,
            format!("perf_event_open is not usable here, so this test cannot record: {err}"),
        );
        return None;
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

/// Folded stacks, root first, with their counts.
pub type Stacks = Vec<(Vec<String>, u64)>;

/// Parses folded text (`frame;frame COUNT` lines) with the input layer's
/// own parser (through the test kit): distinct stacks, sorted, their
/// frames root first. A line it rejects fails the test.
pub use flamerec_testkit::folded::frames as parse_folded;

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

/// Compiles the C program `source` into `dir/name` with gcc and `flags`;
/// panics naming the cause when gcc is missing or fails.
pub fn compile_c(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let file = format!("{name}.c");
    std::fs::write(dir.join(&file), source).expect("write the C source");
    let args: Vec<&str> = flags.iter().copied().chain(["-o", name, &file]).collect();
    gcc(dir, &args);
    dir.join(name)
}

/// A runtime the tests need (`node`, `python3.13`): its path on PATH, or
/// `None` when it is missing and `skip_var` is `1` (said on stderr); a
/// missing runtime fails the test naming the cause otherwise.
pub fn runtime(name: &str, skip_var: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip_or_fail(
            skip_var,
            format!("{name} is not on PATH, so this test cannot run it"),
        );
    }
    found
}

/// Removes what JIT runtimes wrote for the processes of recording `out`:
/// `/tmp/perf-PID.map`, and `jit-PID.dump` in `dumps` (their working
/// directory). Folding after this shows the names the recording embeds.
pub fn remove_jit_files(out: &Path, dumps: Option<&Path>) {
    for (stack, _) in fold(out, &["--per-process"]) {
        let root = stack.first().map_or("", String::as_str);
        let Some(pid) = root.rsplit('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
        if let Some(dir) = dumps {
            let _ = std::fs::remove_file(dir.join(format!("jit-{pid}.dump")));
        }
    }
}

/// `dd` copying `blocks` blocks of 64 KiB of zeros to /dev/null, recorded
/// with `extra` flags and folded: a workload whose time is nearly all in
/// the kernel's read of /dev/zero. `None` when perf tests are skipped.
pub fn record_dd(dir: &Path, blocks: u32, extra: &[&str]) -> Option<Stacks> {
    let out = dir.join("dd.frec");
    let count = format!("count={blocks}");
    let cmd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=64k", &count];
    let o = record(&out, extra, &cmd)?;
    assert!(o.status.success(), "{}", stderr(&o));
    Some(fold(&out, &[]))
}

/// flamerec run as `nobody` (from root) with `args` and `home` as its
/// home (a directory nobody can write); one at a time: the
/// kernel's locked-memory budget for ring buffers is per user
/// (`kernel.perf_event_mlock_kb`), and two recordings of one user at once
/// were refused.
pub fn as_nobody(home: &Path, args: &[&str]) -> Output {
    unprivileged(
        &["--reuid=65534", "--regid=65534", "--clear-groups"],
        home,
        args,
    )
}

/// flamerec run as root without capabilities but CAP_IPC_LOCK (its rings):
/// where the kernel refuses BPF (no CAP_BPF, CAP_PERFMON or CAP_SYS_ADMIN)
/// while root's files (pyenv's CPythons) stay readable. One at a time with
/// [`as_nobody`]'s recordings.
pub fn without_capabilities(home: &Path, args: &[&str]) -> Output {
    let drop = ["--bounding-set=-all,+ipc_lock", "--inh-caps=-all"];
    unprivileged(&drop, home, args)
}

fn unprivileged(setpriv: &[&str], home: &Path, args: &[&str]) -> Output {
    // The workload lock first: a test that has the machine to itself
    // ([`measuring`]) may run one of these while holding it.
    let _running = workload();
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    std::process::Command::new("setpriv")
        .args(setpriv)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_flamerec"))
        .args(args)
        .env("HOME", home)
        .output()
        .expect("setpriv (util-linux) runs")
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

/// Waits for `child` to end; after [`DEADLINE`] kills it and fails the
/// test naming `what`.
pub fn wait_child(child: &mut Child, what: &str) -> ExitStatus {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// /proc/PID/stat of `pid` (the process's whole CPU time), `None` once it
/// is gone: flamerec's own parser.
pub fn proc_stat(pid: u32) -> Option<TaskStat> {
    procfs::parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether `pid` has ended and not been reaped (or is gone).
pub fn is_zombie(pid: u32) -> bool {
    proc_stat(pid).is_none_or(|s| s.is_gone())
}

/// The CPU time `pid` has used, in clock ticks (0 when it cannot say).
pub fn cpu_ticks(pid: u32) -> u64 {
    proc_stat(pid).and_then(|s| s.cpu_ticks).unwrap_or(0)
}

/// Whether the tests run as root.
pub fn is_root() -> bool {
    sys::euid() == 0
}

/// Whether BPF programs can be loaded (as root), else the cause unless
/// FLAMEREC_SKIP_BPF_TESTS=1 (then `false`): Python frames are read with
/// BPF.
pub fn bpf_usable() -> bool {
    if is_root() {
        return true;
    }
    skip_or_fail(
        SKIP_BPF,
        "Python frames are read with BPF, which needs root: run the tests as root",
    );
    false
}

/// Compiles C with the system's gcc in `dir` (`args` as gcc takes them);
/// a missing gcc or a failed build fails the test, naming it.
pub fn gcc(dir: &Path, args: &[&str]) {
    let out = Command::new("gcc")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("this test compiles C with gcc, which is missing: {e}"));
    assert!(out.status.success(), "gcc {args:?}: {}", stderr(&out));
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
    let mut cpus = flamerec_perf::procfs::parse_cpu_list(list);
    if cpus.is_empty() {
        cpus.push(0);
    }
    cpus
}

/// A process killed when dropped (a busy loop must not outlive a failed
/// assertion).
pub struct Busy(pub Child);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
