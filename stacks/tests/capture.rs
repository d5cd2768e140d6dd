//! The capture library on real threads: threads of this test process (off
//! CPU and running), a child that spins (held with ptrace when perf is
//! off), and the bad inputs whose timing the command line cannot control:
//! a thread or process that goes away between listing and capture, a
//! zombie, a kernel thread, flamerec's own process.
//!
//! perf_event_open must work here; with FLAMEREC_SKIP_PERF_TESTS=1 the
//! checks that need it are skipped with a message.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use flamerec_stacks::{
    capture, stacks, targets, FrameKind, Method, Options, ProcessError, Target, TargetError,
    Thread, ThreadError,
};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};

/// Generous: the VM running the tests is shared and busy.
const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `cond` until it holds; panics with `what` after [`DEADLINE`].
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn is_root() -> bool {
    flamerec_perf::sys::is_root()
}

/// The state letter of thread `tid` of `pid`.
fn state(pid: u32, tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// The id of the calling thread.
fn this_tid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .expect("/proc/thread-self names the thread")
}

/// Starts a thread running `body` and returns its id.
fn thread_running(body: fn()) -> u32 {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        tx.send(this_tid()).expect("send tid");
        body();
    });
    rx.recv_timeout(DEADLINE).expect("thread started")
}

#[inline(never)]
fn stacks_test_sleeper() {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
        std::hint::black_box(());
    }
}

#[inline(never)]
fn stacks_test_spinner() {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn one_thread(pid: u32, tid: u32, opts: &Options) -> Thread {
    let report = capture(
        &[Target {
            pid,
            tids: Some(vec![tid]),
        }],
        opts,
    );
    assert_eq!(report.processes.len(), 1);
    let p = &report.processes[0];
    assert!(p.error.is_none(), "{:?}", p.error);
    assert_eq!(p.threads.len(), 1);
    p.threads[0].clone()
}

fn user_names(t: &Thread) -> Vec<&str> {
    t.frames
        .iter()
        .filter(|f| f.kind == FrameKind::User)
        .map(|f| f.name.as_str())
        .collect()
}

#[test]
fn an_off_cpu_thread_of_this_process_is_read_without_stopping_it() {
    let me = std::process::id();
    let tid = thread_running(stacks_test_sleeper);
    // Off CPU in its sleep: the syscall file shows clock_nanosleep (230).
    wait_for("the sleeper to sleep", || {
        std::fs::read_to_string(format!("/proc/{me}/task/{tid}/syscall"))
            .is_ok_and(|s| s.starts_with("230 "))
    });
    let t = one_thread(me, tid, &Options::default());
    assert_eq!(t.how, Method::SyscallFile, "{t:?}");
    assert_eq!(t.held_ns, 0);
    assert!(!t.truncated, "{t:#?}");
    let user = user_names(&t);
    assert!(
        user.iter().any(|n| n.ends_with("stacks_test_sleeper")),
        "{user:#?}"
    );
    if is_root() {
        assert!(
            t.frames
                .iter()
                .any(|f| f.kind == FrameKind::Kernel && f.name.contains("nanosleep")),
            "{t:#?}"
        );
    }
}

#[test]
fn a_running_thread_of_this_process_is_sampled_where_it_runs() {
    let me = std::process::id();
    let tid = thread_running(stacks_test_spinner);
    wait_for("the spinner to run", || state(me, tid) == Some('R'));
    let t = one_thread(me, tid, &Options::default());
    if t.how != Method::PerfSample {
        skip_or_fail(
            SKIP_PERF,
            format!("perf_event_open is not usable here: {t:#?}"),
        );
        return;
    }
    assert_eq!(t.held_ns, 0);
    let user = user_names(&t);
    assert!(
        user.iter().any(|n| n.ends_with("stacks_test_spinner")),
        "{user:#?}"
    );
    assert!(!t.truncated, "{t:#?}");
}

/// A child that spins in user space until dropped.
struct Spinner(Child);

impl Spinner {
    fn start() -> Self {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("start sh");
        let pid = child.id();
        wait_for("sh to spin", || state(pid, pid) == Some('R'));
        Spinner(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// User CPU ticks so far.
    fn utime(&self) -> u64 {
        let pid = self.pid();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let rest = stat.rsplit_once(") ").expect("stat format").1;
        rest.split_whitespace()
            .nth(11)
            .and_then(|v| v.parse().ok())
            .expect("utime")
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn without_perf_a_running_thread_is_held_with_ptrace_briefly_and_let_go() {
    let spinner = Spinner::start();
    let pid = spinner.pid();
    let opts = Options {
        perf: false,
        ..Options::default()
    };
    for _ in 0..3 {
        let t = one_thread(pid, pid, &opts);
        assert_eq!(t.how, Method::Ptrace, "{t:#?}");
        assert!(t.held_ns > 0, "{t:?}");
        assert!(!t.frames.is_empty(), "{t:#?}");
        assert!(t.frames.iter().all(|f| f.kind == FrameKind::User), "{t:#?}");
        // Let go: not stopped, not traced, and it runs on.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        assert!(status.contains("TracerPid:\t0\n"), "{status}");
        assert!(!matches!(state(pid, pid), Some('t' | 'T')), "{status}");
        let before = spinner.utime();
        wait_for("the spinner to run on", || spinner.utime() > before);
    }
}

#[test]
fn without_perf_and_ptrace_a_running_thread_is_named_without_a_stack() {
    let spinner = Spinner::start();
    let pid = spinner.pid();
    let opts = Options {
        perf: false,
        ptrace: false,
        sample_wait: Duration::from_millis(20),
        ..Options::default()
    };
    let t = one_thread(pid, pid, &opts);
    if t.how == Method::SyscallFile {
        // It happened to be off CPU (preempted into a sleep) at the recheck.
        return;
    }
    assert_eq!(t.how, Method::None, "{t:#?}");
    assert!(t.frames.is_empty());
    let e = t.error.expect("a reason").to_string();
    assert!(e.contains("running") && e.contains("ptrace is off"), "{e}");
}

#[test]
fn a_thread_that_exits_before_its_capture_is_reported_as_vanished() {
    let me = std::process::id();
    let (tx, rx) = mpsc::channel();
    let brief = std::thread::spawn(move || tx.send(this_tid()).expect("send tid"));
    let tid = rx.recv_timeout(DEADLINE).expect("tid");
    brief.join().expect("join");
    wait_for("the thread to be gone", || state(me, tid).is_none());
    let t = one_thread(me, tid, &Options::default());
    assert!(
        matches!(t.error, Some(ThreadError::Vanished { .. })),
        "{t:?}"
    );
    assert!(t.frames.is_empty());
}

#[test]
fn a_process_that_exits_between_listing_and_capture_is_reported_as_exited() {
    let mut child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("start sleep");
    let pid = child.id();
    let (found, errors) = targets(&[pid]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(found, [Target { pid, tids: None }]);
    child.kill().expect("kill");
    child.wait().expect("reap");
    let report = capture(&found, &Options::default());
    let p = &report.processes[0];
    assert!(
        matches!(p.error, Some(ProcessError::Exited { .. })),
        "{p:?}"
    );
    assert!(!report.has_frames());
    // The same with the thread list taken first.
    let mut child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("start sleep");
    let pid = child.id();
    let listed = [Target {
        pid,
        tids: Some(vec![pid]),
    }];
    child.kill().expect("kill");
    child.wait().expect("reap");
    let report = capture(&listed, &Options::default());
    let p = &report.processes[0];
    assert!(
        matches!(p.error, Some(ProcessError::Exited { .. })),
        "{p:?}"
    );
}

#[test]
fn a_zombie_has_no_stacks_and_says_who_should_reap_it() {
    let mut child = Command::new("true").spawn().expect("start true");
    let pid = child.id();
    wait_for("true to exit", || state(pid, pid) == Some('Z'));
    let report = stacks(&[pid], &Options::default());
    child.wait().expect("reap");
    let p = &report.processes[0];
    match &p.error {
        Some(ProcessError::Zombie { ppid, .. }) => assert_eq!(*ppid, std::process::id()),
        other => panic!("{other:?}"),
    }
    assert!(!report.has_frames());
}

#[test]
fn a_kernel_thread_has_a_kernel_part_only() {
    // kthreadd is pid 2 wherever the kernel has its own pid namespace here.
    let comm = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    if comm.trim() != "kthreadd" {
        eprintln!("skipped: pid 2 is not kthreadd in this pid namespace ({comm:?})");
        return;
    }
    let report = stacks(&[2], &Options::default());
    let t = &report.processes[0].threads[0];
    assert!(t.kernel_thread, "{t:?}");
    assert!(
        t.frames.iter().all(|f| f.kind == FrameKind::Kernel),
        "{t:#?}"
    );
    if is_root() {
        assert_eq!(t.how, Method::StackFile, "{t:#?}");
        assert!(t.frames.iter().any(|f| f.name == "kthreadd"), "{t:#?}");
        assert!(t.error.is_none(), "{t:?}");
    } else {
        assert!(
            report.notes.iter().any(|n| n.contains("need root")),
            "{report:?}"
        );
    }
}

#[test]
fn flamerec_itself_and_unknown_ids_give_no_target() {
    let me = std::process::id();
    let (found, errors) = targets(&[me, u32::MAX, this_tid()]);
    assert!(found.is_empty(), "{found:?}");
    assert!(matches!(errors[0], TargetError::IsSelf { id } if id == me));
    assert!(matches!(errors[1], TargetError::NotFound { id } if id == u32::MAX));
    assert!(matches!(errors[2], TargetError::IsSelf { .. }));
    // Capturing this process by hand leaves out the calling thread.
    let report = capture(
        &[Target {
            pid: me,
            tids: Some(vec![this_tid()]),
        }],
        &Options::default(),
    );
    let t = &report.processes[0].threads[0];
    assert!(
        matches!(t.error, Some(ThreadError::Capturing { .. })),
        "{t:?}"
    );
}

#[test]
fn an_id_asked_twice_is_one_target() {
    let mut child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("start sleep");
    let pid = child.id();
    let (found, errors) = targets(&[pid, pid]);
    child.kill().expect("kill");
    child.wait().expect("reap");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(found, [Target { pid, tids: None }]);
}
