//! `flamerec stacks` end to end, on `tests/programs/thread-states.rs`: a
//! process whose threads sit in known states in known functions (one
//! spinning, one in a pipe read, one in nanosleep, one in a futex wait, one
//! 201 frames deep). Each thread's user functions and kernel frames are
//! checked in every output format, with and without frame pointers, and
//! the process must be left running and making progress. Then the bad
//! inputs: unknown ids, a zombie, a kernel thread, flamerec itself, threads
//! that vanish.
//!
//! The running thread is sampled with perf_event_open: where that is
//! refused the test fails naming the cause, unless
//! FLAMEREC_SKIP_PERF_TESTS=1 is set.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::OnceLock;

use crate::common::{
    flamerec, is_root, is_zombie, parse_folded, stderr, wait_child, wait_for, DEADLINE,
};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};
use serde_json::Value;

/// Frames of `ts_recurse` in `ts-deep`'s stack: 200 levels below the first call.
const DEPTH_FRAMES: usize = 201;

/// The threads of thread-states: name, the innermost `ts_` function of its
/// stack, and a piece of a kernel frame name it blocks in (any kernel version).
const THREADS: [(&str, &str, Option<&str>); 5] = [
    ("thread-states", "ts_pipe_reader", Some("pipe_read")),
    ("ts-spin", "ts_spin", None),
    ("ts-sleep", "ts_sleep", Some("nanosleep")),
    ("ts-wait", "ts_wait", Some("futex_wait")),
    ("ts-deep", "ts_deep_sleep", Some("nanosleep")),
];

/// thread-states, compiled with rustc (as the samples are), with or without
/// frame pointers; kept in the test target directory, keyed by a hash of the
/// source and flags, so later runs reuse it.
fn program(fp: bool) -> &'static Path {
    static BUILT: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
    BUILT[usize::from(fp)].get_or_init(|| {
        use std::hash::{Hash, Hasher};
        let source = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/programs/thread-states.rs"
        );
        let text = std::fs::read(source).expect("read thread-states.rs");
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let mut flags = vec![
            "--edition=2021",
            "--crate-type=bin",
            "--crate-name=thread_states",
            "-Copt-level=3",
            "-Cdebuginfo=line-tables-only",
        ];
        if fp {
            flags.push("-Cforce-frame-pointers=yes");
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&rustc, &flags, &text).hash(&mut h);
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let slot = tmp.join(format!("thread-states-{:016x}", h.finish()));
        let binary = slot.join("thread-states");
        if binary.is_file() {
            return binary;
        }
        // Built aside and renamed into place: a concurrent run never sees half a binary.
        let work = tmp.join(format!(
            ".thread-states-{}-{}",
            std::process::id(),
            usize::from(fp)
        ));
        std::fs::create_dir_all(&work).expect("create build dir");
        let out = Command::new(&rustc)
            .args(&flags)
            .arg("-o")
            .arg(work.join("thread-states"))
            .arg(source)
            .output()
            .expect("run rustc");
        assert!(out.status.success(), "rustc failed: {}", stderr(&out));
        if std::fs::rename(&work, &slot).is_err() {
            let _ = std::fs::remove_dir_all(&work);
        }
        assert!(binary.is_file(), "no {}", binary.display());
        binary
    })
}

/// A running thread-states process; killed when dropped.
struct Workload {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Workload {
    fn start(fp: bool, args: &[&str]) -> Self {
        Self::start_as(fp, args, None)
    }

    /// Starts it (as user `uid` if given) and waits until every thread
    /// sits where it should.
    fn start_as(fp: bool, args: &[&str], uid: Option<u32>) -> Self {
        let mut cmd = Command::new(program(fp));
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped());
        if let Some(uid) = uid {
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
        }
        let mut child = cmd.spawn().expect("start thread-states");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let w = Workload {
            child,
            stdin,
            lines,
        };
        assert_eq!(w.line(), "ready");
        let pid = w.pid();
        let tids = w.tids();
        // Blocked in its system call: read (0), clock_nanosleep (230), futex (202).
        for (name, nr) in [
            ("thread-states", "0 "),
            ("ts-sleep", "230 "),
            ("ts-deep", "230 "),
            ("ts-wait", "202 "),
        ] {
            let tid = tids[name];
            wait_for(&format!("{name} to block"), || {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                    .is_ok_and(|s| s.starts_with(nr))
            });
        }
        w
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("a line from thread-states")
    }

    /// Thread ids by name, the lowest id for a name: a thread just started
    /// bears its creator's name until it sets its own.
    fn tids(&self) -> HashMap<String, u32> {
        let pid = self.pid();
        let mut all: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("task dir")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        all.sort_unstable();
        let mut tids = HashMap::new();
        for tid in all {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")) {
                tids.entry(name.trim().to_string()).or_insert(tid);
            }
        }
        tids
    }

    /// The spinner's count, asked through the pipe the main thread reads.
    fn progress(&mut self) -> u64 {
        self.stdin.write_all(b"\n").expect("write to thread-states");
        self.stdin.flush().expect("flush");
        let line = self.line();
        line.strip_prefix("progress ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
    }

    /// Not stopped, not traced, and the spinner counts on.
    fn assert_running_on(&mut self, before: u64) {
        let pid = self.pid();
        for (name, tid) in self.tids() {
            let state = flamerec_perf::procfs::task_stat(pid, tid).map(|s| s.state);
            assert!(!matches!(state, Ok('T' | 't')), "{name} is stopped");
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        assert!(status.contains("TracerPid:\t0\n"), "{status}");
        wait_for("the spinner to count on", || self.progress() > before);
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `flamerec ARGS`, failing the test if it takes longer than [`DEADLINE`]
/// (a capture must never hang, whatever it is given).
fn run(cmd: &mut Command) -> Output {
    use std::io::Read;
    // Its events hold callchains: not beside a test that needs none open.
    let _running = crate::common::workload();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flamerec");
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = wait_child(&mut child, "flamerec");
    Output {
        status,
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

fn stacks(args: &[&str]) -> Output {
    run(flamerec().arg("stacks").args(args))
}

fn stacks_json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = stacks(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

fn names<'a>(t: &'a Value, kind: &str) -> Vec<&'a str> {
    t["frames"]
        .as_array()
        .expect("frames")
        .iter()
        .filter(|f| f["kind"] == kind)
        .map(|f| f["name"].as_str().expect("name"))
        .collect()
}

/// The thread named `name` in a report of one process.
fn thread<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["processes"][0]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no thread {name} in {report:#}"))
}

/// Whether the report sampled the running thread with perf; panics naming
/// the cause when it did not, unless FLAMEREC_SKIP_PERF_TESTS=1.
fn perf_sampled(report: &Value) -> bool {
    let spin = thread(report, "ts-spin");
    if spin["how"] == "perf-sample" {
        return true;
    }
    let why = format!(
        "ts-spin was not sampled with perf: {spin:#}; notes: {}",
        report["notes"]
    );
    skip_or_fail(
        SKIP_PERF,
        format!("perf_event_open is not usable here: {why}"),
    );
    false
}

/// Every thread of thread-states has its function, kernel frames and a
/// whole stack.
fn check_threads(report: &Value) {
    assert_eq!(report["schema"], "flamerec-stacks/1");
    for (name, function, kernel) in THREADS {
        let t = thread(report, name);
        assert!(t["error"].is_null(), "{name}: {t:#}");
        assert_eq!(t["truncated"], false, "{name}: {t:#}");
        let user = names(t, "user");
        let innermost = user.iter().find(|n| n.starts_with("ts_"));
        assert_eq!(innermost, Some(&function), "{name}: {user:#?}");
        // Whole: down to the thread's entry.
        let entry = user.last().copied().unwrap_or_default();
        assert!(
            entry == "_start" || entry.contains("clone"),
            "{name}: {user:#?}"
        );
        if let Some(kernel) = kernel {
            assert_eq!(t["how"], "syscall-file", "{name}: {t:#}");
            assert_eq!(t["held_ns"], 0);
            if is_root() {
                let k = names(t, "kernel");
                assert!(k.iter().any(|n| n.contains(kernel)), "{name}: {k:#?}");
            }
        }
    }
    let spin = thread(report, "ts-spin");
    assert_ne!(spin["frames"].as_array().map(Vec::len), Some(0), "{spin:#}");
    if spin["how"] == "perf-sample" {
        assert_eq!(spin["held_ns"], 0);
        // The sample's leaf is in the spin loop (an inlined helper at most).
        let leaf = spin["frames"]
            .as_array()
            .and_then(|f| {
                f.iter()
                    .find(|f| f["kind"] == "user" && f["inlined"] == false)
            })
            .and_then(|f| f["name"].as_str());
        assert_eq!(leaf, Some("ts_spin"), "{spin:#}");
    }
    let deep = names(thread(report, "ts-deep"), "user");
    let at = deep
        .iter()
        .position(|n| *n == "ts_deep_sleep")
        .expect("ts_deep_sleep");
    let run = deep[at + 1..]
        .iter()
        .take_while(|n| **n == "ts_recurse")
        .count();
    assert_eq!(run, DEPTH_FRAMES, "{deep:#?}");
}

fn check_states_and_functions(fp: bool) {
    let mut w = Workload::start(fp, &[]);
    let pid = w.pid().to_string();
    for round in 0..3 {
        let before = w.progress();
        let report = stacks_json(&[&pid]);
        if round == 0 && !perf_sampled(&report) {
            return;
        }
        check_threads(&report);
        w.assert_running_on(before);
    }
}

#[test]
fn every_thread_shows_its_state_and_functions_without_frame_pointers() {
    check_states_and_functions(false);
}

#[test]
fn every_thread_shows_its_state_and_functions_with_frame_pointers() {
    check_states_and_functions(true);
}

#[test]
fn json_follows_the_schema() {
    let w = Workload::start(false, &[]);
    let report = stacks_json(&[&w.pid().to_string()]);
    assert_eq!(report["schema"], "flamerec-stacks/1");
    assert!(report["capture_ns"].as_u64().is_some_and(|n| n > 0));
    assert!(report["notes"].is_array() && report["errors"].is_array());
    let p = &report["processes"][0];
    assert_eq!(p["pid"], w.pid());
    assert_eq!(p["name"], "thread-states");
    assert!(p["error"].is_null());
    let threads = p["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 5);
    let states = ["R", "S", "D", "T", "t", "Z", "X", "I"];
    let ways = [
        "perf-sample",
        "syscall-file",
        "stack-file",
        "ptrace",
        "none",
    ];
    for t in threads {
        assert!(t["tid"].is_u64() && t["name"].is_string(), "{t:#}");
        assert!(states.contains(&t["state"].as_str().unwrap_or("")), "{t:#}");
        assert!(
            t["state_name"].is_string() && t["kernel_thread"] == false,
            "{t:#}"
        );
        assert!(ways.contains(&t["how"].as_str().unwrap_or("")), "{t:#}");
        assert!(t["held_ns"].is_u64() && t["capture_ns"].is_u64(), "{t:#}");
        assert!(t["truncated"].is_boolean(), "{t:#}");
        assert!(t["error"].is_null() || t["error"].is_string(), "{t:#}");
        let frames = t["frames"].as_array().expect("frames");
        // Leaf first: kernel frames, then user frames.
        let first_user = frames
            .iter()
            .position(|f| f["kind"] == "user")
            .unwrap_or(frames.len());
        for (i, f) in frames.iter().enumerate() {
            assert!(f["name"].is_string() && f["module"].is_string(), "{f:#}");
            assert!(f["inlined"].is_boolean(), "{f:#}");
            let kind = if i < first_user { "kernel" } else { "user" };
            assert_eq!(f["kind"], kind, "{t:#}");
        }
    }
    assert_eq!(thread(&report, "ts-sleep")["state"], "S");
}

#[test]
fn text_has_a_header_line_per_thread_and_one_frame_per_line() {
    let mut w = Workload::start(false, &[]);
    let tids = w.tids();
    let before = w.progress();
    let out = stacks(&["-v", &w.pid().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.starts_with(&format!("process {} thread-states\n", w.pid())),
        "{text}"
    );
    let (body, summary) = text
        .split_once("\n\ncaptured ")
        .expect("-v ends with the capture time");
    assert!(
        summary.starts_with("5 threads of 1 process in "),
        "{summary}"
    );
    for (name, function, _) in THREADS {
        let header = format!("thread {} {name} ", tids[name]);
        let block: Vec<&str> = body
            .split("\nthread ")
            .map(str::trim_end)
            .find(|b| format!("thread {b}").starts_with(&header))
            .unwrap_or_else(|| panic!("no block for {name} in\n{text}"))
            .lines()
            .collect();
        assert!(block[0].contains(" held "), "{}", block[0]);
        assert!(
            block[1..].iter().all(|l| l.starts_with("  #")),
            "{block:#?}"
        );
        assert!(
            block
                .iter()
                .any(|l| l.contains(&format!(" {function}  thread-states"))),
            "{block:#?}"
        );
    }
    assert!(text.contains("syscall-file in "), "{text}");
    w.assert_running_on(before);
}

#[test]
fn folded_is_one_census_line_per_thread() {
    let w = Workload::start(false, &[]);
    let out = stacks(&["--folded", &w.pid().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines = parse_folded(&text);
    assert_eq!(lines.len(), 5, "{text}");
    for (name, function, kernel) in THREADS {
        let (frames, count) = lines
            .iter()
            .find(|(f, _)| f.len() > 2 && f[0] == "thread-states" && f[1] == name)
            .unwrap_or_else(|| panic!("no line for {name}:\n{text}"));
        let line = frames.join(";");
        assert_eq!(*count, 1, "{line}");
        assert!(frames.iter().any(|f| f == function), "{line}");
        if let (Some(kernel), true) = (kernel, is_root()) {
            // Kernel frames are marked, and come after (below) the user ones.
            let k = frames
                .iter()
                .position(|f| f.contains(kernel) && f.ends_with("_[k]"));
            let u = frames.iter().position(|f| *f == function);
            assert!(k.is_some() && k > u, "{line}");
        }
    }
}

#[test]
fn a_thread_id_shows_that_thread_alone() {
    let w = Workload::start(false, &[]);
    let tid = w.tids()["ts-wait"];
    let report = stacks_json(&[&tid.to_string()]);
    let p = &report["processes"][0];
    assert_eq!(p["pid"], w.pid());
    let threads = p["threads"].as_array().expect("threads");
    assert_eq!(threads.len(), 1, "{report:#}");
    assert_eq!(threads[0]["tid"], tid);
    assert!(names(&threads[0], "user").contains(&"ts_wait"));
}

#[test]
fn an_unknown_pid_alone_is_a_one_line_error_and_beside_others_a_line() {
    // Above the largest pid_max Linux allows (2^22).
    let unknown = "4194305";
    let out = stacks(&[unknown]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr(&out),
        "flamerec: error: no stack could be taken: 4194305: no such process or thread\n"
    );
    let w = Workload::start(false, &[]);
    let out = stacks(&[unknown, &w.pid().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("flamerec: 4194305: no such process or thread\n"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ts_wait"), "{text}");
}

#[test]
fn a_zombie_is_named_and_nothing_else_is_printed() {
    let mut child = Command::new("true").spawn().expect("start true");
    let pid = child.id();
    wait_for("true to exit", || is_zombie(pid));
    let out = stacks(&[&pid.to_string()]);
    child.wait().expect("reap");
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("flamerec: error: no stack could be taken: process ")
            && err.contains("is a zombie")
            && err.contains(&format!("parent {}", std::process::id())),
        "{err}"
    );
}

#[test]
fn a_kernel_thread_shows_its_kernel_stack_only() {
    let comm = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    if comm.trim() != "kthreadd" {
        eprintln!("skipped: pid 2 is not kthreadd in this pid namespace ({comm:?})");
        return;
    }
    let out = stacks(&["2"]);
    if !is_root() {
        // Nothing to be had: the kernel stack file is root's.
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("need root"), "{}", stderr(&out));
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "process 2 kthreadd");
    assert!(
        lines[1].starts_with("thread 2 kthreadd ") && lines[1].ends_with(" kernel thread"),
        "{text}"
    );
    assert!(
        lines[2..]
            .iter()
            .all(|l| l.ends_with("  [kernel.kallsyms]")),
        "{text}"
    );
    assert!(lines.iter().any(|l| l.contains(" kthreadd  ")), "{text}");
}

#[test]
fn flamerec_itself_is_refused_with_a_line_and_without_a_deadlock() {
    let bin = env!("CARGO_BIN_EXE_flamerec");
    // The shell's pid becomes flamerec's at exec.
    let out = run(Command::new("sh").args(["-c", r#"exec "$0" stacks $$"#, bin]));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with("flamerec: error: no stack could be taken: "),
        "{err}"
    );
    assert!(err.contains("that is flamerec itself"), "{err}");
    let w = Workload::start(false, &[]);
    let script = format!(r#"exec "$0" stacks $$ {}"#, w.pid());
    let out = run(Command::new("sh").args(["-c", &script, bin]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("that is flamerec itself"),
        "{}",
        stderr(&out)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ts_sleep"));
}

#[test]
fn threads_that_vanish_during_the_capture_get_a_line_and_the_rest_is_shown() {
    let mut w = Workload::start(false, &["--churn"]);
    let pid = w.pid().to_string();
    wait_for("ts-churn to be named", || w.tids().contains_key("ts-churn"));
    // Threads that stay; the others are brief (named ts-brief, or ts-churn
    // for the moment before they name themselves).
    let stable: Vec<u32> = w
        .tids()
        .into_iter()
        .filter(|(n, _)| n != "ts-brief")
        .map(|(_, t)| t)
        .collect();
    let mut vanished = 0;
    for _ in 0..5 {
        let before = w.progress();
        let report = stacks_json(&[&pid]);
        for t in report["processes"][0]["threads"]
            .as_array()
            .expect("threads")
        {
            match t["error"].as_str() {
                None => assert!(!t["frames"].as_array().expect("frames").is_empty(), "{t:#}"),
                Some(e) if e.ends_with("exited during the capture") => {
                    // Only the brief threads may go; a line says so.
                    let tid = t["tid"].as_u64().expect("tid") as u32;
                    assert!(!stable.contains(&tid), "{t:#}");
                    vanished += 1;
                }
                Some(e) => {
                    // ts-churn wakes every few microseconds and may run
                    // while it is read: said, and shown anyway.
                    assert!(e.ends_with("frames may mix two moments"), "{t:#}");
                    assert_ne!(t["frames"].as_array().map(Vec::len), Some(0), "{t:#}");
                }
            }
        }
        for (name, ..) in THREADS {
            assert!(thread(&report, name)["error"].is_null());
        }
        w.assert_running_on(before);
    }
    eprintln!("{vanished} ts-brief threads vanished during 5 captures");
}

#[test]
fn without_privileges_user_stacks_are_shown_and_the_missing_part_named_once() {
    if !is_root() {
        eprintln!("skipped: needs root to run the workload and flamerec as another user");
        return;
    }
    const NOBODY: u32 = 65534;
    let mut w = Workload::start_as(false, &[], Some(NOBODY));
    let before = w.progress();
    let home = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::chown(home.path(), Some(NOBODY), Some(NOBODY)).expect("chown");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flamerec"));
    cmd.env("HOME", home.path())
        .args(["stacks", &w.pid().to_string()]);
    std::os::unix::process::CommandExt::uid(&mut cmd, NOBODY);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let notes: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("flamerec: note: "))
        .collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains("no kernel frames") && notes[0].contains("root"),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for (_, function, _) in THREADS {
        assert!(
            text.contains(&format!(" {function}  thread-states")),
            "{function}:\n{text}"
        );
    }
    w.assert_running_on(before);
}
