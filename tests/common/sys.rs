//! The one place the tests call the OS directly: stopping one thread of
//! another process for a while, or the next thread it starts before that
//! runs (ptrace), which no command does.

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
        if ptrace(libc::PTRACE_SEIZE, tid, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let stopped = Stopped { tid };
        interrupt(tid)?;
        Ok(stopped)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        ptrace(libc::PTRACE_DETACH, self.tid, 0);
    }
}

/// A thread traced so that the next thread it starts is held stopped
/// before its first instruction, until this is dropped (then both are
/// detached). Made and dropped on the same thread, as [`Stopped`].
pub struct HoldsNextThread {
    tid: i32,
    new: Option<i32>,
}

impl HoldsNextThread {
    /// Traces thread `tid`, which goes on running.
    pub fn seize(tid: u32) -> io::Result<HoldsNextThread> {
        let tid = i32::try_from(tid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        if ptrace(libc::PTRACE_SEIZE, tid, libc::PTRACE_O_TRACECLONE as usize) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(HoldsNextThread { tid, new: None })
    }

    /// Waits until the thread starts another, lets it go on, and returns
    /// the new thread's id once the new thread is held.
    pub fn wait(&mut self) -> io::Result<u32> {
        let tid = self.tid;
        loop {
            let status = wait_stop(tid)?;
            if status >> 8 == libc::SIGTRAP | (libc::PTRACE_EVENT_CLONE << 8) {
                break;
            }
            // Any other stop: a signal, given back.
            ptrace(libc::PTRACE_CONT, tid, libc::WSTOPSIG(status) as usize);
        }
        let mut new: libc::c_ulong = 0;
        // SAFETY: GETEVENTMSG writes one unsigned long to `new`, which
        // lives across the call.
        let r = unsafe {
            libc::ptrace(
                libc::PTRACE_GETEVENTMSG,
                tid,
                std::ptr::null_mut::<libc::c_void>(),
                &mut new as *mut libc::c_ulong,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let new = new as i32;
        self.new = Some(new);
        if ptrace(libc::PTRACE_CONT, tid, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // The new thread, traced from its start, stops before it runs.
        wait_stop(new)?;
        Ok(new as u32)
    }
}

impl Drop for HoldsNextThread {
    fn drop(&mut self) {
        if let Some(new) = self.new {
            ptrace(libc::PTRACE_DETACH, new, 0);
        }
        // Detaching needs the tracee stopped.
        if interrupt(self.tid).is_ok() {
            ptrace(libc::PTRACE_DETACH, self.tid, 0);
        }
    }
}

/// Stops a traced thread and waits until it is stopped.
fn interrupt(tid: i32) -> io::Result<()> {
    if ptrace(libc::PTRACE_INTERRUPT, tid, 0) != 0 {
        return Err(io::Error::last_os_error());
    }
    wait_stop(tid).map(drop)
}

/// The status of traced thread `tid`'s next stop.
fn wait_stop(tid: i32) -> io::Result<i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid int to write; __WALL because the tracee
    // is a thread, not a child process.
    let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
    if r != tid || !libc::WIFSTOPPED(status) {
        return Err(io::Error::other(format!(
            "thread {tid} did not stop (waitpid {r}, status {status:#x})"
        )));
    }
    Ok(status)
}

/// A ptrace request that takes no address and reads no pointer: SEIZE
/// (`data`: options), INTERRUPT, CONT and DETACH (`data`: the signal to
/// deliver, 0 for none).
fn ptrace(request: libc::c_uint, tid: i32, data: usize) -> libc::c_long {
    // SAFETY: these requests read no pointers (addr is null, data is a
    // number); the kernel checks that `tid` exists and may be traced.
    unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            data as *mut libc::c_void,
        )
    }
}

/// The effective user id of the tests.
pub fn euid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}
