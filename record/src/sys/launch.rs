//! Starting the profiled command suspended, so its events can be opened
//! before its first instruction, and waiting for it.
//!
//! The child is forked, blocks on a pipe until the parent has opened the
//! perf events (with enable_on_exec), then calls execve. Everything the
//! child needs is prepared before fork: between fork and exec it only calls
//! async-signal-safe functions (close, read, execve, write, _exit).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitStatus {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid 2-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are new and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A forked child waiting for [`SuspendedChild::start`] before it execs.
pub struct SuspendedChild {
    pid: i32,
    go: Option<OwnedFd>,
    errors: OwnedFd,
}

impl SuspendedChild {
    /// Forks a child that will exec `path` with `argv` and `envp`.
    pub fn spawn(path: &CString, argv: &[CString], envp: &[CString]) -> io::Result<Self> {
        let (go_r, go_w) = pipe_cloexec()?;
        let (err_r, err_w) = pipe_cloexec()?;
        let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_p.push(std::ptr::null());
        let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
        envp_p.push(std::ptr::null());
        let (go_r_fd, go_w_fd, err_w_fd) = (go_r.as_raw_fd(), go_w.as_raw_fd(), err_w.as_raw_fd());
        // SAFETY: fork has no memory-safety preconditions; in the child
        // below only async-signal-safe calls run, on data prepared above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: child process. The pointers in argv_p/envp_p point
            // into CStrings that the fork copied; all calls are
            // async-signal-safe and the child never returns into Rust code.
            unsafe {
                libc::close(go_w_fd);
                let mut byte = 0u8;
                let n = libc::read(go_r_fd, (&mut byte as *mut u8).cast(), 1);
                if n != 1 {
                    // The parent gave up: leave without running the command.
                    libc::_exit(127);
                }
                libc::execve(path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
                let errno = *libc::__errno_location();
                let bytes = errno.to_ne_bytes();
                libc::write(err_w_fd, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127);
            }
        }
        drop(go_r);
        drop(err_w);
        Ok(SuspendedChild {
            pid,
            go: Some(go_w),
            errors: err_r,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets the child exec. Returns the exec error if it failed (the child
    /// has then exited with 127 and is reaped here).
    pub fn start(mut self) -> io::Result<i32> {
        if let Some(go) = self.go.take() {
            let byte = [1u8];
            // SAFETY: writes one byte from a valid buffer to our pipe end.
            unsafe { libc::write(go.as_raw_fd(), byte.as_ptr().cast(), 1) };
        }
        // The error pipe closes on a successful exec (O_CLOEXEC), or carries errno.
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            // SAFETY: reads into the valid remainder of `buf`.
            let n = unsafe {
                libc::read(
                    self.errors.as_raw_fd(),
                    buf[got..].as_mut_ptr().cast(),
                    4 - got,
                )
            };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                break;
            }
            got += n as usize;
        }
        if got == 4 {
            let _ = wait_blocking(self.pid);
            return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf)));
        }
        Ok(self.pid)
    }
}

impl Drop for SuspendedChild {
    fn drop(&mut self) {
        // Never started: closing the go pipe makes the child exit; reap it.
        if self.go.take().is_some() {
            let _ = wait_blocking(self.pid);
        }
    }
}

fn decode(status: i32) -> WaitStatus {
    if libc::WIFSIGNALED(status) {
        WaitStatus::Signaled(libc::WTERMSIG(status))
    } else {
        WaitStatus::Exited(libc::WEXITSTATUS(status))
    }
}

fn wait_blocking(pid: i32) -> io::Result<WaitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid int to write to.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(decode(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps `pid` if it has ended.
pub fn wait_nohang(pid: i32) -> io::Result<Option<WaitStatus>> {
    let mut status = 0;
    // SAFETY: `status` is a valid int to write to.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r == 0 {
        return Ok(None);
    }
    Ok(Some(decode(status)))
}

/// Sends `sig` to `pid`.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
