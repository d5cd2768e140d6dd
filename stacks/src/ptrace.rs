//! The last resort for a running thread that perf could not sample: stop it
//! with ptrace, read its registers and stack, let it go.
//!
//! `PTRACE_SEIZE` attaches without a signal and `PTRACE_INTERRUPT` stops the
//! thread at its next return to user space; nothing else of the process
//! stops. The hold is measured from the last moment the thread was seen
//! still running to the end of the detach: an upper bound of the stop.
//!
//! Letting go happens on every path: a [`Tracee`] guard detaches when it is
//! dropped (errors and panics included), passing on any signal the thread
//! was about to receive. If flamerec itself dies while holding a thread
//! (Ctrl-C, SIGKILL), the kernel detaches its tracees as it exits and they
//! run on; since the attach sends no SIGSTOP, nothing is left stopped. A
//! thread that does not stop before the deadline (busy in the kernel) is
//! waited for a little longer and detached if it stops; otherwise its
//! pending stop is cleared by the kernel when flamerec exits.

use std::io;
use std::time::{Duration, Instant};

use crate::blocked::UserStack;
use crate::stackmem;
use crate::sys::{self, Wait};
use flamerec_perf::procfs::Mappings;

/// A thread held with ptrace and what was read from it.
#[derive(Debug)]
pub(crate) struct Held {
    /// Its user registers and stack.
    pub user: UserStack,
    /// Nanoseconds it was stopped, at most.
    pub held_ns: u64,
}

/// Why a thread could not be held.
#[derive(Debug)]
pub(crate) enum HoldError {
    /// It exited.
    Gone,
    /// ptrace was refused or failed.
    Failed(io::Error),
    /// It did not stop before the deadline.
    NoStop,
}

/// A seized thread; detached when dropped.
struct Tracee {
    tid: u32,
    /// Set once it stopped: the signal to pass on when detaching.
    stopped: Option<i32>,
    /// The last moment it was seen not stopped yet: the hold began after.
    running_at: Instant,
}

impl Tracee {
    /// Waits until the thread stops or exits, or `deadline` passes.
    fn wait_stop(&mut self, deadline: Instant) -> Result<(), HoldError> {
        let started = Instant::now();
        loop {
            let now = Instant::now();
            match sys::wait_nohang(self.tid).map_err(HoldError::Failed)? {
                Wait::Stopped { signal } => {
                    self.stopped = Some(signal);
                    return Ok(());
                }
                Wait::Gone => return Err(HoldError::Gone),
                Wait::Pending if now >= deadline => return Err(HoldError::NoStop),
                Wait::Pending => {
                    self.running_at = now;
                    // A running thread stops within microseconds: look again
                    // at once, then, if it is slow (busy in the kernel), less often.
                    if now - started < BUSY_POLL {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
        }
    }
}

/// How long the wait for a stop polls without sleeping.
const BUSY_POLL: Duration = Duration::from_millis(20);

impl Drop for Tracee {
    fn drop(&mut self) {
        if self.stopped.is_none() {
            // A stop may still come (the interrupt is pending): give it a
            // moment so that it is not left stopped until flamerec exits.
            let _ = self.wait_stop(Instant::now() + LATE_STOP);
        }
        if let Some(signal) = self.stopped {
            let _ = sys::detach(self.tid, signal);
        }
    }
}

/// How much longer a thread that missed the deadline is waited for.
const LATE_STOP: Duration = Duration::from_millis(200);

/// Stops thread `tid` of `pid`, reads its registers and stack, and lets it
/// go, waiting at most `wait` for it to stop.
pub(crate) fn hold(
    pid: u32,
    tid: u32,
    maps: &mut Mappings,
    wait: Duration,
) -> Result<Held, HoldError> {
    sys::seize(tid).map_err(|e| match e.raw_os_error() {
        Some(libc::ESRCH) => HoldError::Gone,
        _ => HoldError::Failed(e),
    })?;
    let mut tracee = Tracee {
        tid,
        stopped: None,
        running_at: Instant::now(),
    };
    sys::interrupt(tid).map_err(HoldError::Failed)?;
    tracee.wait_stop(Instant::now() + wait)?;
    let regs = sys::regs(tid).map_err(HoldError::Failed)?;
    let mut bytes = Vec::new();
    let copied = stackmem::copy(pid, regs.sp, maps, &mut bytes);
    let running_at = tracee.running_at;
    drop(tracee);
    // At most this long: it stopped after it was last seen running.
    let held_ns = running_at.elapsed().as_nanos() as u64;
    copied.map_err(HoldError::Failed)?;
    Ok(Held {
        user: UserStack::with_regs(regs, bytes),
        held_ns,
    })
}
