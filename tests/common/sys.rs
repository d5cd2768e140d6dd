//! The one place the tests call the OS directly: stopping one thread of
//! another process for a while (ptrace), which no command does.

use std::io;

/// One thread, stopped by ptrace until this is dropped (then detached and
/// running again). Made and dropped on the same thread: ptrace answers
/// only the thread that attached.
pub struct Stopped {
    tid: i32,
}

impl Stopped {
    /// Stops thread `tid` (of any process; needs the right to trace it)
    /// and waits until it is stopped. Its other threads go on running.
    pub fn thread(tid: u32) -> io::Result<Stopped> {
        let tid = i32::try_from(tid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if ptrace(libc::PTRACE_SEIZE, tid) != 0 {
            return Err(io::Error::last_os_error());
        }
        let stopped = Stopped { tid };
        if ptrace(libc::PTRACE_INTERRUPT, tid) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut status = 0;
        // SAFETY: `status` is a valid int to write; __WALL because the
        // tracee is a thread, not a child process.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        if r != tid || !libc::WIFSTOPPED(status) {
            return Err(io::Error::other(format!(
                "thread {tid} did not stop (waitpid {r}, status {status:#x})"
            )));
        }
        Ok(stopped)
    }
}

/// A ptrace request that takes no address and no data: SEIZE (no
/// options), INTERRUPT, DETACH (no signal delivered).
fn ptrace(request: libc::c_uint, tid: i32) -> libc::c_long {
    // SAFETY: these requests read no pointers (addr and data are null);
    // the kernel checks that `tid` exists and may be traced.
    unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        ptrace(libc::PTRACE_DETACH, self.tid);
    }
}

/// The effective user id of the tests.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}
