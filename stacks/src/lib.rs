//! Every thread's kernel and user stack of running processes, now, running
//! threads included: the library behind `flamerec stacks`.
//!
//! # How each thread is captured
//!
//! The process keeps running. Each thread's state is read from
//! /proc/PID/task/TID/stat, then:
//!
//! - **Off CPU** (sleeping, blocked, stopped): the kernel stack from
//!   /proc/PID/task/TID/stack (root only), the user stack pointer and program
//!   counter from /proc/PID/task/TID/syscall, and the stack memory from there
//!   up (`process_vm_readv`), unwound with DWARF CFI. The scheduler's counts
//!   are read before and after: a thread that ran meanwhile is read again
//!   (method `syscall-file`; `stack-file` for kernel threads).
//! - **Running** (on a CPU or waiting for one): a burst of `cpu-clock`
//!   samples of that thread alone, every 100 µs of its CPU time, of which the
//!   first is kept: the kernel's callchain, the user registers and a copy of
//!   the user stack, all from one moment (`perf-sample`). /proc has nothing
//!   for these: the kernel stack file is empty and the syscall file says
//!   `running`.
//! - A running thread that gives no sample within [`Options::sample_wait`] is
//!   read the off-CPU way if it stopped running meanwhile; otherwise, unless
//!   [`Options::ptrace`] is off, it is stopped with ptrace (seize, interrupt,
//!   registers, stack, detach), for a hold that is measured (`ptrace`).
//!
//! Only ptrace stops anything, and only that thread, only for the copy.
//! Why not stop every thread and read them all with ptrace: stopping
//! interrupts the system call a thread blocks in, and some calls
//! (`epoll_wait`, `semop`, `sigtimedwait`; see signal(7)) then return
//! `EINTR` to the program; the non-stopping way changes nothing the program
//! can see.
//!
//! Naming happens after the capture (see [`capture`]).
//!
//! # JSON output, schema `flamerec-stacks/1`
//!
//! [`Report`] serialized (`serde_json::to_string`):
//!
//! ```text
//! { "schema": "flamerec-stacks/1",
//!   "capture_ns": u64,             // wall time of the capture, naming excluded
//!   "notes": [str],                // what is missing everywhere and how to get it
//!   "errors": [ { "id": u32, "error": str } ],   // ids that gave no process
//!   "processes": [ {
//!     "pid": u32, "name": str,
//!     "error": str | null,         // exited during the capture, zombie, unreadable
//!     "threads": [ {
//!       "tid": u32, "name": str,
//!       "state": "R" | "S" | "D" | "T" | "t" | "Z" | "I" | …,   // when the capture began
//!       "state_name": "running" | "sleeping" | "disk sleep" | …,
//!       "kernel_thread": bool,
//!       "how": "perf-sample" | "syscall-file" | "stack-file" | "ptrace" | "none",
//!       "held_ns": u64,            // how long the thread was stopped: 0 unless ptrace
//!       "capture_ns": u64,         // how long taking this thread took
//!       "truncated": bool,         // the user part stops short of the thread's entry
//!       "error": str | null,       // vanished, no sample, no user stack, ran meanwhile
//!       "frames": [ {              // leaf first: kernel frames, then user frames
//!         "name": str,             // `module+0xOFFSET` when unknown
//!         "module": str,           // `libc.so.6`, `[kernel.kallsyms]`, `[xfs]`
//!         "kind": "kernel" | "user",
//!         "inlined": bool } ] } ] } ] }
//! ```
//!
//! This crate does not parse command lines or print; `flamerec`'s
//! `stacks` subcommand does, through [`render`].
#![deny(unsafe_code)]

mod blocked;
mod capture;
mod ptrace;
pub mod render;
mod report;
mod resolve;
mod running;
mod stackmem;
#[allow(unsafe_code)]
mod sys;

use flamerec_perf::procfs;
use std::time::{Duration, Instant};

pub use flamerec_symbolize::NameOptions;
pub use report::{
    state_name, Frame, FrameKind, Method, Process, ProcessError, Report, TargetError, Thread,
    ThreadError, SCHEMA,
};

/// How to capture and name.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long to wait for a running thread's perf sample (default 500 ms:
    /// on a busy machine a runnable thread may wait that long for a CPU).
    pub sample_wait: Duration,
    /// Sample running threads with perf (default true).
    pub perf: bool,
    /// Stop a running thread with ptrace when perf gives nothing (default
    /// true). Off: such a thread is shown without a stack.
    pub ptrace: bool,
    /// How frames are named: inlined functions expanded, the symbol cache
    /// (none by default), debug file roots.
    pub names: NameOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sample_wait: Duration::from_millis(500),
            perf: true,
            ptrace: true,
            names: NameOptions::default(),
        }
    }
}

/// One process to capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Process id.
    pub pid: u32,
    /// Only these threads; `None`: every thread.
    pub tids: Option<Vec<u32>>,
}

/// Turns asked-for ids (process ids, or thread ids of any thread) into the
/// processes to capture, in the order asked, each once. flamerec's own
/// process is refused: its threads are the ones doing the capture.
pub fn targets(ids: &[u32]) -> (Vec<Target>, Vec<TargetError>) {
    let me = std::process::id();
    let mut targets: Vec<Target> = Vec::new();
    let mut errors = Vec::new();
    for &id in ids {
        let pid = match procfs::tgid_of(id) {
            Ok(pid) if pid == me => {
                errors.push(TargetError::IsSelf { id });
                continue;
            }
            Ok(pid) => pid,
            Err(_) => {
                errors.push(TargetError::NotFound { id });
                continue;
            }
        };
        let wanted = (pid != id).then_some(id);
        match targets.iter_mut().find(|t| t.pid == pid) {
            Some(t) => match (&mut t.tids, wanted) {
                (Some(tids), Some(tid)) if !tids.contains(&tid) => tids.push(tid),
                (tids, None) => *tids = None,
                _ => {}
            },
            None => targets.push(Target {
                pid,
                tids: wanted.map(|t| vec![t]),
            }),
        }
    }
    (targets, errors)
}

/// Captures every thread of `targets`, then names the frames. All threads
/// are captured before any naming starts, so the stacks are as close to one
/// moment as the machine allows. flamerec's own process may be a target:
/// every thread but the calling one is captured.
pub fn capture(targets: &[Target], opts: &Options) -> Report {
    let started = Instant::now();
    let mut access = capture::Access::default();
    let raws: Vec<_> = targets
        .iter()
        .map(|t| capture::process(t, opts, &mut access))
        .collect();
    let capture_ns = started.elapsed().as_nanos() as u64;
    let (processes, warnings) = resolve::resolve(raws, opts);
    let mut notes = notes(&access);
    notes.extend(warnings);
    Report {
        schema: SCHEMA,
        capture_ns,
        notes,
        errors: Vec::new(),
        processes,
    }
}

/// [`targets`] then [`capture`]: the stacks of the processes and threads
/// `ids` names, with the ids that named none in [`Report::errors`].
pub fn stacks(ids: &[u32], opts: &Options) -> Report {
    let (targets, errors) = targets(ids);
    let mut report = capture(&targets, opts);
    report.errors = errors;
    report
}

/// One line per kind of missing access, with what would give it.
fn notes(access: &capture::Access) -> Vec<String> {
    let paranoid = || read_trimmed("/proc/sys/kernel/perf_event_paranoid");
    let root = flamerec_perf::sys::is_root();
    let mut notes = Vec::new();
    let mut kernel = Vec::new();
    if access.kernel_stack_refused && !root {
        kernel.push(
            "off-CPU threads' kernel stacks (/proc/PID/task/TID/stack) need root".to_string(),
        );
    }
    if access.perf.kernel_refused && access.perf.refused.is_none() {
        kernel.push(format!(
            "running threads' kernel frames need kernel.perf_event_paranoid <= 1 (it is {}) or root",
            paranoid()
        ));
    }
    if !kernel.is_empty() {
        notes.push(format!("no kernel frames: {}", kernel.join("; ")));
    }
    if let Some(why) = &access.perf.refused {
        notes.push(format!(
            "running threads could not be sampled with perf: perf_event_open was refused \
             ({why}; kernel.perf_event_paranoid is {})",
            paranoid()
        ));
    }
    let refused_to_root = "even to root: the process holds privileges flamerec lacks, \
                           or a security module refuses";
    if access.kernel_stack_refused && root {
        notes.push(format!(
            "some kernel stacks could not be read: refused {refused_to_root}"
        ));
    }
    if access.memory_refused {
        let why = if root {
            format!("refused {refused_to_root}")
        } else {
            // Yama (Ubuntu's default is 1) refuses even one's own processes
            // that are not one's children.
            match read_trimmed("/proc/sys/kernel/yama/ptrace_scope").as_str() {
                "unknown" | "0" => "other users' processes need root".to_string(),
                scope => format!(
                    "kernel.yama.ptrace_scope is {scope}: run as root, or allow your own \
                     processes with `sudo sysctl kernel.yama.ptrace_scope=0`"
                ),
            }
        };
        notes.push(format!("some user stacks could not be read: {why}"));
    }
    notes
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
