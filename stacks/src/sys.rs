//! The system calls of this crate that need `unsafe`: ptrace (seize,
//! interrupt, wait, read registers, detach) and the calling thread's id.
//! perf events and remote memory reads come from `flamerec-perf`.
//!
//! Each item is a safe wrapper over one call; the rules that make holding a
//! thread safe (detach on every path) live in `crate::ptrace`.

use std::io;

use flamerec_unwind::UserRegs;

/// The id of the calling thread.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    tid as u32
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Becomes the tracer of thread `tid` without stopping it or sending it a
/// signal (`PTRACE_SEIZE`, no options: the thread is not killed if the
/// tracer exits, only let go).
pub(crate) fn seize(tid: u32) -> io::Result<()> {
    // SAFETY: PTRACE_SEIZE takes no pointers (addr 0, data 0 = no options);
    // the kernel checks that `tid` exists and may be traced.
    check(unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid as libc::pid_t, 0usize, 0usize) })
}

/// Asks a seized thread to stop (`PTRACE_INTERRUPT`): it traps at its next
/// return to user space; a system call it blocks in is restarted later.
pub(crate) fn interrupt(tid: u32) -> io::Result<()> {
    // SAFETY: PTRACE_INTERRUPT takes no pointers; it only affects a thread
    // this thread traces, which the kernel checks.
    check(unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid as libc::pid_t, 0usize, 0usize) })
}

/// What a traced thread did, from `waitpid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Nothing yet.
    Pending,
    /// Stopped. `signal` is the signal it was about to receive (to be passed
    /// on at detach), 0 for a ptrace trap or group stop.
    Stopped {
        /// Signal to deliver when letting go.
        signal: i32,
    },
    /// It exited or was killed.
    Gone,
}

/// Checks, without blocking, whether traced thread `tid` stopped or exited.
pub(crate) fn wait_nohang(tid: u32) -> io::Result<Wait> {
    let mut status: libc::c_int = 0;
    // SAFETY: `status` is a valid int to write to for the duration of the
    // call; __WALL waits for threads of another process we trace.
    let r = unsafe {
        libc::waitpid(
            tid as libc::pid_t,
            &mut status,
            libc::__WALL | libc::WNOHANG,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        // No such child any more: it exited and was reaped by its process.
        return if e.raw_os_error() == Some(libc::ECHILD) {
            Ok(Wait::Gone)
        } else {
            Err(e)
        };
    }
    if r == 0 {
        return Ok(Wait::Pending);
    }
    if libc::WIFSTOPPED(status) {
        let sig = libc::WSTOPSIG(status);
        let event = status >> 16;
        // A ptrace trap or group stop carries no signal to deliver; a
        // signal-delivery stop carries the signal the thread was getting.
        let signal = if event != 0 || sig == libc::SIGTRAP {
            0
        } else {
            sig
        };
        return Ok(Wait::Stopped { signal });
    }
    Ok(Wait::Gone)
}

/// The user registers of a stopped traced thread.
pub(crate) fn regs(tid: u32) -> io::Result<UserRegs> {
    // SAFETY: user_regs_struct is plain integers; all-zero is a valid value.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct to `data`, which
    // points at `r`, valid for writes for the duration of the call.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGS,
            tid as libc::pid_t,
            0usize,
            &mut r as *mut libc::user_regs_struct,
        )
    })?;
    Ok(UserRegs {
        ip: r.rip,
        sp: r.rsp,
        bp: r.rbp,
        bx: Some(r.rbx),
    })
}

/// Lets a stopped traced thread go, delivering `signal` (0: none).
pub(crate) fn detach(tid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: PTRACE_DETACH takes the signal number as its data argument,
    // no pointers.
    check(unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            tid as libc::pid_t,
            0usize,
            signal as usize,
        )
    })
}
