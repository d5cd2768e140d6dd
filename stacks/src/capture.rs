//! Taking the stacks of one process's threads, before any naming: each
//! thread by the way its state allows (see the crate docs), with the
//! fallbacks in order. The result holds raw addresses, /proc's kernel
//! lines and stack copies; `crate::resolve` names them.
//!
//! This module decides which way a thread is captured and records what
//! went wrong; it must not name frames or format anything.

use std::io;
use std::time::Instant;

use flamerec_symbolize::live::{exec_maps, ExecMap};

use crate::blocked::{self, Blocked, UserStack};
use crate::ptrace::{self, HoldError};
use crate::report::{Method, ProcessError, ThreadError};
use crate::running::{self, Outcome, PerfAccess};
use crate::{sys, Options, Target};
use flamerec_perf::procfs::{self, KernelLine, Mappings};

/// A thread's stack as taken.
#[derive(Debug)]
pub(crate) struct RawThread {
    pub tid: u32,
    pub name: String,
    pub state: char,
    pub kernel_thread: bool,
    pub how: Method,
    pub held_ns: u64,
    pub capture_ns: u64,
    pub kernel: Kernel,
    pub user: Option<UserStack>,
    pub error: Option<ThreadError>,
}

/// The kernel part of a stack.
#[derive(Debug, Default)]
pub(crate) enum Kernel {
    /// None (user mode, no access, or a thread with no stack).
    #[default]
    None,
    /// Named lines from /proc/PID/task/TID/stack.
    Lines(Vec<KernelLine>),
    /// Addresses from a perf callchain, leaf first.
    Addrs(Vec<u64>),
}

/// A process's threads as taken, and its executable mappings.
#[derive(Debug)]
pub(crate) struct RawProcess {
    pub pid: u32,
    pub name: String,
    pub exec: Vec<ExecMap>,
    pub threads: Vec<RawThread>,
    pub error: Option<ProcessError>,
}

/// What the capture learned about its privileges, for the notes.
#[derive(Debug, Default)]
pub(crate) struct Access {
    pub perf: PerfAccess,
    /// /proc/PID/task/TID/stack was refused.
    pub kernel_stack_refused: bool,
    /// Some user stack memory (or syscall file) was refused.
    pub memory_refused: bool,
}

/// Takes the stacks of `target`'s threads.
pub(crate) fn process(target: &Target, opts: &Options, access: &mut Access) -> RawProcess {
    let pid = target.pid;
    let mut raw = RawProcess {
        pid,
        name: String::new(),
        exec: Vec::new(),
        threads: Vec::new(),
        error: None,
    };
    let leader = match procfs::task_stat(pid, pid) {
        Ok(s) => s,
        Err(e) => {
            raw.error = Some(gone_or_unreadable(pid, &e));
            return raw;
        }
    };
    raw.name = leader.comm.clone();
    let tids = match &target.tids {
        Some(t) => t.clone(),
        None => match procfs::threads_of(pid) {
            Ok(t) => t,
            Err(e) => {
                raw.error = Some(gone_or_unreadable(pid, &e));
                return raw;
            }
        },
    };
    if matches!(leader.state, 'Z' | 'X') && tids == [pid] {
        raw.error = Some(ProcessError::Zombie {
            pid,
            ppid: leader.ppid,
        });
        return raw;
    }
    raw.exec = exec_maps(pid);
    let mut maps = Mappings::of(pid).unwrap_or_default();
    let own = (std::process::id() == pid).then(sys::gettid);
    let mut running = Vec::new();
    for tid in tids {
        let mut t = RawThread {
            tid,
            name: String::new(),
            state: '?',
            kernel_thread: false,
            how: Method::None,
            held_ns: 0,
            capture_ns: 0,
            kernel: Kernel::None,
            user: None,
            error: None,
        };
        match procfs::task_stat(pid, tid) {
            Err(_) => t.error = Some(ThreadError::Vanished { tid }),
            Ok(stat) => {
                t.name = stat.comm;
                t.state = stat.state;
                t.kernel_thread = stat.kernel_thread;
                if own == Some(tid) {
                    t.error = Some(ThreadError::Capturing { tid });
                } else if matches!(stat.state, 'Z' | 'X') {
                    t.error = Some(ThreadError::Zombie { tid });
                } else if stat.state == 'R' || !take_blocked(pid, &mut t, &mut maps, access) {
                    running.push(raw.threads.len());
                }
            }
        }
        raw.threads.push(t);
    }
    if !running.is_empty() {
        take_running(
            pid,
            &mut raw.threads,
            &running,
            opts,
            &mut maps,
            access,
            own.is_some(),
        );
    }
    if raw
        .threads
        .iter()
        .any(|t| matches!(t.error, Some(ThreadError::Vanished { .. })))
        && !procfs::alive(pid)
    {
        raw.error = Some(ProcessError::Exited { pid });
    }
    raw
}

fn gone_or_unreadable(pid: u32, e: &io::Error) -> ProcessError {
    if procfs::is_gone(e) {
        ProcessError::Exited { pid }
    } else {
        ProcessError::Unreadable {
            pid,
            reason: e.to_string(),
        }
    }
}

/// Captures an off-CPU thread into `t`; false when it turned out to run.
fn take_blocked(pid: u32, t: &mut RawThread, maps: &mut Mappings, access: &mut Access) -> bool {
    let taken = match blocked::take(pid, t.tid, t.kernel_thread, maps) {
        Ok(Blocked::Running) => return false,
        Ok(Blocked::Taken(taken)) => taken,
        Err(e) if procfs::is_gone(&e) => {
            t.error = Some(ThreadError::Vanished { tid: t.tid });
            return true;
        }
        Err(e) => {
            // No syscall file (refused): the kernel stack may still be had.
            if procfs::is_denied(&e) {
                access.memory_refused = true;
            }
            t.error = Some(ThreadError::NoUserStack {
                tid: t.tid,
                reason: e.to_string(),
            });
            if let Ok(lines) = procfs::kernel_stack(pid, t.tid) {
                t.how = Method::StackFile;
                t.kernel = Kernel::Lines(lines);
            } else {
                access.kernel_stack_refused = true;
            }
            return true;
        }
    };
    t.capture_ns = taken.took_ns;
    t.how = if t.kernel_thread {
        Method::StackFile
    } else {
        Method::SyscallFile
    };
    match taken.kernel {
        Ok(lines) => t.kernel = Kernel::Lines(lines),
        Err(e) if procfs::is_gone(&e) => {}
        Err(_) => access.kernel_stack_refused = true,
    }
    match taken.user {
        Some(Ok(user)) => t.user = Some(user),
        Some(Err(e)) => {
            if procfs::is_denied(&e) {
                access.memory_refused = true;
            }
            t.error = Some(ThreadError::NoUserStack {
                tid: t.tid,
                reason: e.to_string(),
            });
        }
        None => {}
    }
    if !taken.stable && t.error.is_none() {
        t.error = Some(ThreadError::Moved { tid: t.tid });
    }
    true
}

/// Captures the running threads `which` (indexes into `threads`): perf
/// samples first; for those that gave none, the off-CPU way if they
/// stopped running meanwhile, else ptrace.
#[allow(clippy::too_many_arguments)]
fn take_running(
    pid: u32,
    threads: &mut [RawThread],
    which: &[usize],
    opts: &Options,
    maps: &mut Mappings,
    access: &mut Access,
    own_process: bool,
) {
    let tids: Vec<u32> = which.iter().map(|&i| threads[i].tid).collect();
    let outcomes = if opts.perf {
        running::sample(pid, &tids, opts.sample_wait, maps, &mut access.perf)
    } else {
        tids.iter()
            .map(|_| Outcome::Failed(io::Error::other("perf sampling is off")))
            .collect()
    };
    for (&i, outcome) in which.iter().zip(outcomes) {
        let t = &mut threads[i];
        let why = match outcome {
            Outcome::Sampled(s) => {
                t.how = Method::PerfSample;
                t.capture_ns = s.after_ns;
                t.kernel = Kernel::Addrs(s.kernel);
                t.user = s.user;
                continue;
            }
            Outcome::Gone => {
                t.error = Some(ThreadError::Vanished { tid: t.tid });
                continue;
            }
            Outcome::NoSample => "no perf sample came".to_string(),
            Outcome::Failed(e) => format!("perf: {e}"),
        };
        fallback(pid, t, why, opts, maps, access, own_process);
    }
}

/// A running thread perf gave nothing for: it may have stopped running
/// meanwhile; else hold it with ptrace, if allowed.
fn fallback(
    pid: u32,
    t: &mut RawThread,
    why: String,
    opts: &Options,
    maps: &mut Mappings,
    access: &mut Access,
    own_process: bool,
) {
    let started = Instant::now();
    match procfs::task_stat(pid, t.tid) {
        Err(_) => {
            t.error = Some(ThreadError::Vanished { tid: t.tid });
            return;
        }
        Ok(s) if s.state != 'R' => {
            if take_blocked(pid, t, maps, access) {
                return;
            }
        }
        Ok(_) => {}
    }
    let no_stack = |t: &mut RawThread, why: String| {
        t.error = Some(ThreadError::NoSample {
            tid: t.tid,
            waited_ms: opts.sample_wait.as_millis() as u64,
            why,
        });
    };
    if !opts.ptrace {
        return no_stack(t, format!("{why}; ptrace is off"));
    }
    if own_process {
        return no_stack(t, format!("{why}; flamerec cannot ptrace its own threads"));
    }
    if t.kernel_thread {
        return no_stack(
            t,
            format!("{why}; a kernel thread cannot be held with ptrace"),
        );
    }
    match ptrace::hold(pid, t.tid, maps, opts.sample_wait) {
        Ok(held) => {
            t.how = Method::Ptrace;
            t.held_ns = held.held_ns;
            t.capture_ns = started.elapsed().as_nanos() as u64;
            t.user = Some(held.user);
        }
        Err(HoldError::Gone) => t.error = Some(ThreadError::Vanished { tid: t.tid }),
        Err(HoldError::NoStop) => no_stack(t, format!("{why}; it did not stop for ptrace")),
        Err(HoldError::Failed(e)) => no_stack(t, format!("{why}; ptrace: {e}")),
    }
}
