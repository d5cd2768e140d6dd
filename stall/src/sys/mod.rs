//! Every system call of this crate that needs `unsafe`: the thread id, the
//! wake-up pipe, `poll` with the events each descriptor reported, `tgkill`,
//! and (in [`signal`]) the stack-capture signal handler with the table it
//! writes through. perf_event_open and the ring buffers come from
//! `flamerec-perf` and are re-exported here, so the crate has one `sys`.
//!
//! Each item is a safe wrapper; callers never see a raw pointer. Nothing
//! here allocates or locks on a path a signal handler runs.

pub(crate) mod signal;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub(crate) use flamerec_perf::sys::{
    enable, monotonic_ns, page_size, perf_event_open, read_remote, Counter, EventConfig, RingBuffer,
};

/// The kernel's id of the calling thread.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    tid as u32
}

/// A pipe whose both ends are non-blocking and close on exec: (read, write).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes one byte to a non-blocking pipe; a full pipe already wakes its
/// reader, so that error is ignored like any other.
pub(crate) fn wake(fd: BorrowedFd<'_>) {
    let b = 1u8;
    // SAFETY: writes one byte from a live local to a descriptor `fd` keeps open.
    unsafe { libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1) };
}

/// Reads a non-blocking pipe until it is empty.
pub(crate) fn drain_pipe(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reads into a live local buffer of the length given.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
    }
}

/// What `poll` said about one descriptor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ready {
    /// The other side is gone: for a per-thread perf event, the thread exited.
    pub(crate) hangup: bool,
}

/// Waits until one of `fds` is readable or hung up, or `timeout_ms` passes
/// (-1: no limit); fills `ready` (same length) with what each reported.
pub(crate) fn poll(
    fds: &[BorrowedFd<'_>],
    timeout_ms: i32,
    ready: &mut Vec<Ready>,
) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs that
    // lives across the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    ready.clear();
    if r < 0 {
        let e = io::Error::last_os_error();
        ready.resize(fds.len(), Ready::default());
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(())
        } else {
            Err(e)
        };
    }
    ready.extend(pfds.iter().map(|p| Ready {
        hangup: p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
    }));
    Ok(())
}

/// Sends `sig` to thread `tid` of this process.
pub(crate) fn tgkill(tid: u32, sig: i32) -> io::Result<()> {
    let pid = std::process::id() as libc::pid_t;
    // SAFETY: tgkill takes plain integers; a wrong tid fails with ESRCH.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid as libc::pid_t, sig) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The real-time signal range of this libc: (SIGRTMIN, SIGRTMAX).
pub(crate) fn realtime_signals() -> (i32, i32) {
    (libc::SIGRTMIN(), libc::SIGRTMAX())
}

/// The current count of a perf event opened without a read format: for
/// `task-clock`, the nanoseconds its thread has run while it was enabled.
pub(crate) fn read_count(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a live local u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    if n != 8 {
        return Err(if n < 0 {
            io::Error::last_os_error()
        } else {
            io::Error::from(io::ErrorKind::UnexpectedEof)
        });
    }
    Ok(v)
}
