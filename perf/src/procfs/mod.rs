//! What /proc says about processes and threads without stopping them, for
//! the recorder, `flamerec stacks` and the stall library alike: which
//! processes and threads exist, a thread's state, name and start time
//! (`stat`, `comm`), whether and where it blocks (`syscall`: user stack
//! pointer and program counter), its kernel stack (`stack`), whether it ran
//! meanwhile (`schedstat`); a process's mappings (`maps`) and the CPUs
//! (`cpus`); a process's own view of its files, its pid namespace and its
//! cgroup (`view`).
//!
//! Parsing is separate from reading so that every format is tested on text.
//! This module only reads files; it never touches a process's memory.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;

mod cpus;
mod maps;
pub mod view;

pub use cpus::{online_cpus, parse_cpu_list};
pub use maps::{exec_maps, parse_maps, ExecMap, Mappings};

/// `PF_KTHREAD` in the flags of /proc/PID/stat: a kernel thread.
const PF_KTHREAD: u64 = 0x0020_0000;

/// The fields of /proc/PID/task/TID/stat flamerec uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat {
    /// Thread name (comm).
    pub comm: String,
    /// State letter: R, S, D, T, t, Z, X, I, P…
    pub state: char,
    /// Parent process id.
    pub ppid: u32,
    /// A kernel thread (no user space at all).
    pub kernel_thread: bool,
    /// When the thread started, in clock ticks since boot (field 22): tells
    /// a thread from a later one given the same id. `None` when the line
    /// stops before it.
    pub start_time: Option<u64>,
    /// User plus system CPU time, in clock ticks (fields 14 and 15; of the
    /// whole process in /proc/PID/stat). `None` when the line stops before.
    pub cpu_ticks: Option<u64>,
}

impl TaskStat {
    /// Whether the thread sleeps in the kernel (S or D): its kernel stack
    /// is then where it waits.
    pub fn is_blocked(&self) -> bool {
        matches!(self.state, 'S' | 'D')
    }

    /// Whether it is a zombie or dead: nothing left to sample.
    pub fn is_gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses the text of a stat file. The name may hold spaces and `)`, so
/// the fields after it are found from the last `)`.
pub fn parse_stat(text: &str) -> Option<TaskStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 1..)?.split_ascii_whitespace();
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    // pgrp, session, tty_nr, tpgid, then flags.
    let flags: u64 = rest.nth(4)?.parse().ok()?;
    // minflt, cminflt, majflt, cmajflt (fields 10–13), utime and stime.
    let mut number = |n| rest.nth(n).and_then(|v| v.parse::<u64>().ok());
    let utime = number(4);
    let stime = number(0);
    // cutime … itrealvalue (fields 16–21), then starttime.
    let start_time = number(6);
    let cpu_ticks = utime.zip(stime).map(|(u, s)| u + s);
    Some(TaskStat {
        comm,
        state,
        ppid,
        kernel_thread: flags & PF_KTHREAD != 0,
        start_time,
        cpu_ticks,
    })
}

/// Clock ticks per second in /proc's stat files (USER_HZ, 100 on every
/// Linux architecture flamerec runs on).
pub const TICKS_PER_SECOND: u64 = 100;

/// The CPU time (user plus system, every thread, in clock ticks) this
/// process has used so far.
pub fn own_cpu_ticks() -> io::Result<u64> {
    let text = fs::read_to_string("/proc/self/stat")?;
    parse_stat(&text)
        .and_then(|s| s.cpu_ticks)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/self/stat"))
}

/// State and name of thread `tid` of `pid`.
pub fn task_stat(pid: u32, tid: u32) -> io::Result<TaskStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))?;
    parse_stat(&text).ok_or_else(|| malformed("stat", pid, tid))
}

/// The process that thread (or process) `id` belongs to, from the `Tgid:`
/// line of its status file.
pub fn tgid_of(id: u32) -> io::Result<u32> {
    let text = fs::read_to_string(format!("/proc/{id}/status"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| malformed("status", id, id))
}

/// Thread ids of a process, ascending.
pub fn threads_of(pid: u32) -> io::Result<Vec<u32>> {
    numbered_entries(&format!("/proc/{pid}/task"))
}

/// Every process id, ascending.
pub fn all_pids() -> io::Result<Vec<u32>> {
    numbered_entries("/proc")
}

fn numbered_entries(dir: &str) -> io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// `roots` and every process below them now, from each process's parent
/// in /proc.
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in all_pids().unwrap_or_default() {
        if let Ok(s) = task_stat(p, p) {
            children.entry(s.ppid).or_default().push(p);
        }
    }
    let mut seen: HashSet<u32> = roots.iter().copied().collect();
    let mut out = roots.to_vec();
    let mut i = 0;
    while let Some(&p) = out.get(i) {
        for &c in children.get(&p).into_iter().flatten() {
            // A parent read after its pid was reused cannot loop.
            if seen.insert(c) {
                out.push(c);
            }
        }
        i += 1;
    }
    out.sort_unstable();
    out
}

/// The name of thread `tid` of `pid` (its `comm`).
pub fn comm_of(pid: u32, tid: u32) -> io::Result<String> {
    let name = fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))?;
    Ok(name.trim_end_matches('\n').to_string())
}

/// Whether process `pid` exists and is not a zombie (a zombie has no
/// threads left to sample).
pub fn alive(pid: u32) -> bool {
    task_stat(pid, pid).is_ok_and(|s| !s.is_gone())
}

/// What /proc/PID/task/TID/syscall says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallFile {
    /// The thread is on a CPU or waiting for one: no registers to be had.
    Running,
    /// The thread is off CPU; `nr` is the system call it blocks in (`None`
    /// when it blocks outside one, e.g. stopped by a signal).
    Blocked {
        /// System call number.
        nr: Option<u64>,
        /// User stack pointer.
        sp: u64,
        /// User program counter (after the `syscall` instruction).
        pc: u64,
    },
}

/// Parses the text of a syscall file: `running`, `-1 SP PC`, or
/// `NR ARG1 … ARG6 SP PC` (numbers after the first in hex).
pub fn parse_syscall(text: &str) -> Option<SyscallFile> {
    let text = text.trim();
    if text == "running" {
        return Some(SyscallFile::Running);
    }
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    let (nr, sp, pc) = match fields.as_slice() {
        ["-1", sp, pc] => (None, hex(sp)?, hex(pc)?),
        [nr, _, _, _, _, _, _, sp, pc] => (Some(nr.parse().ok()?), hex(sp)?, hex(pc)?),
        _ => return None,
    };
    Some(SyscallFile::Blocked { nr, sp, pc })
}

/// The syscall file of thread `tid` of `pid`.
pub fn syscall_file(pid: u32, tid: u32) -> io::Result<SyscallFile> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))?;
    parse_syscall(&text).ok_or_else(|| malformed("syscall", pid, tid))
}

/// One line of a kernel stack file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelLine {
    /// Function name, without the offset.
    pub name: String,
    /// The kernel module it lies in, if not the kernel image.
    pub module: Option<String>,
}

/// Parses the text of a stack file: `[<0>] do_nanosleep+0x43/0x130 [mod]`,
/// leaf first.
pub fn parse_kernel_stack(text: &str) -> Vec<KernelLine> {
    text.lines()
        .filter_map(|line| {
            let rest = line.trim().split_once("] ").map_or(line.trim(), |(_, r)| r);
            let mut parts = rest.split_ascii_whitespace();
            let symbol = parts.next()?;
            let name = symbol.split_once('+').map_or(symbol, |(n, _)| n);
            if name.is_empty() {
                return None;
            }
            let module = parts
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string());
            Some(KernelLine {
                name: name.to_string(),
                module,
            })
        })
        .collect()
}

/// The kernel stack of thread `tid` of `pid` (root only; empty while the
/// thread runs).
pub fn kernel_stack(pid: u32, tid: u32) -> io::Result<Vec<KernelLine>> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stack"))?;
    Ok(parse_kernel_stack(&text))
}

/// The scheduler's counts for a thread: time on CPU (ns), time waiting for
/// one (ns), and times it was scheduled in. Unchanged between two reads
/// means the thread did not run in between.
pub fn schedstat(pid: u32, tid: u32) -> io::Result<[u64; 3]> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))?;
    let mut it = text.split_ascii_whitespace().map(|v| v.parse::<u64>().ok());
    match (it.next(), it.next(), it.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c))) => Ok([a, b, c]),
        _ => Err(malformed("schedstat", pid, tid)),
    }
}

/// Whether an error means the thread or process no longer exists.
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// Whether an error is a refusal for lack of privileges.
pub fn is_denied(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EPERM)
}

fn malformed(file: &str, pid: u32, tid: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected contents of /proc/{pid}/task/{tid}/{file}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_a_name_holding_parens_and_spaces() {
        let s = parse_stat("42 (a (b) c) S 7 42 42 0 -1 2129984 0 0").unwrap();
        assert_eq!(s.comm, "a (b) c");
        assert_eq!((s.state, s.ppid, s.kernel_thread), ('S', 7, true));
        let s = parse_stat("4352 (thread-states) R 1 4348 32519 0 -1 4194304 129").unwrap();
        assert!(!s.kernel_thread);
        assert_eq!(s.start_time, None);
        assert_eq!(parse_stat("4352 (x"), None);
        let full = "9 (w) S 1 9 9 0 -1 4194560 10 0 0 0 1 2 0 0 20 0 1 0 123456 0 0";
        let s = parse_stat(full).unwrap();
        assert_eq!(s.start_time, Some(123_456));
        assert_eq!(s.cpu_ticks, Some(3));
        assert!(s.is_blocked() && !s.is_gone());
    }

    #[test]
    fn syscall_file_formats() {
        assert_eq!(parse_syscall("running\n"), Some(SyscallFile::Running));
        assert_eq!(
            parse_syscall(
                "230 0x1 0x0 0x7f0328698d68 0x7f0328698d68 0x0 0x0 0x7f0328698d30 0x7f032896d545\n"
            ),
            Some(SyscallFile::Blocked {
                nr: Some(230),
                sp: 0x7f03_2869_8d30,
                pc: 0x7f03_2896_d545
            })
        );
        assert_eq!(
            parse_syscall("-1 0x7ffd0000 0x401000"),
            Some(SyscallFile::Blocked {
                nr: None,
                sp: 0x7ffd_0000,
                pc: 0x40_1000
            })
        );
        assert_eq!(parse_syscall("230 0x1"), None);
        assert_eq!(parse_syscall(""), None);
    }

    #[test]
    fn kernel_stack_lines() {
        let text = "[<0>] futex_do_wait+0x46/0x90\n[<0>] xfs_ilock+0x10/0x20 [xfs]\n\
                    [<ffffffff81000130>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n";
        let lines = parse_kernel_stack(text);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].name, "futex_do_wait");
        assert_eq!(lines[0].module, None);
        assert_eq!(lines[1].module.as_deref(), Some("xfs"));
        assert_eq!(lines[2].name, "entry_SYSCALL_64_after_hwframe");
    }

    #[test]
    fn this_thread_is_running_and_others_are_listed() {
        let me = std::process::id();
        let stat = task_stat(me, me).unwrap();
        assert!(!stat.kernel_thread);
        assert_eq!(tgid_of(me).unwrap(), me);
        assert!(threads_of(me).unwrap().contains(&me));
        assert!(schedstat(me, me).is_ok());
        assert!(alive(me) && !alive(u32::MAX));
        assert!(stat.start_time.is_some());
        assert!(own_cpu_ticks().is_ok());
        assert!(all_pids().unwrap().contains(&me));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let below = descendants(&[me]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            below.contains(&me) && below.contains(&child.id()),
            "{below:?}"
        );
        assert!(!comm_of(me, me).unwrap().is_empty());
        let gone = threads_of(u32::MAX).unwrap_err();
        assert!(is_gone(&gone), "{gone}");
    }
}
