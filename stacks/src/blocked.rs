//! The stack of a thread that is off CPU, taken without stopping it: the
//! kernel stack from /proc/PID/task/TID/stack, the user stack pointer and
//! program counter from /proc/PID/task/TID/syscall, and the stack memory
//! from there up.
//!
//! A thread that is off CPU cannot change its registers or its stack, so
//! the three reads agree as long as it stays off CPU throughout. The
//! scheduler's counts (`schedstat`: time on CPU, times scheduled) and the
//! syscall line are read before and after: unchanged means it did not run
//! in between. If it ran, the capture is done once more; if it ran again,
//! the stack is kept and marked as possibly mixed.
//!
//! The frame pointer is not among what /proc gives, so unwinding starts
//! from ip and sp alone (see `crate::resolve`).

use std::io;
use std::time::Instant;

use flamerec_unwind::UserRegs;

use crate::stackmem;
use flamerec_perf::procfs::{self, KernelLine, Mappings, SyscallFile};

/// A user stack: the registers to start from and the memory above sp.
#[derive(Debug, Clone)]
pub(crate) struct UserStack {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer, when known (not from /proc).
    pub bp: Option<u64>,
    /// The stack from `sp` up.
    pub bytes: Vec<u8>,
}

impl UserStack {
    /// A stack taken with all three registers known.
    pub(crate) fn with_regs(regs: UserRegs, bytes: Vec<u8>) -> Self {
        UserStack {
            ip: regs.ip,
            sp: regs.sp,
            bp: Some(regs.bp),
            bytes,
        }
    }
}

/// What reading an off-CPU thread gave.
#[derive(Debug)]
pub(crate) enum Blocked {
    /// The thread is on a CPU (or waiting for one) after all.
    Running,
    /// Its stack.
    Taken(Taken),
}

/// The parts of an off-CPU thread's stack.
#[derive(Debug)]
pub(crate) struct Taken {
    /// The kernel stack, or why it could not be read.
    pub kernel: io::Result<Vec<KernelLine>>,
    /// The user stack (`None`: the thread has no user part), or why it
    /// could not be read.
    pub user: Option<io::Result<UserStack>>,
    /// The thread stayed off CPU while it was read.
    pub stable: bool,
    /// Nanoseconds the reads took.
    pub took_ns: u64,
}

/// Reads the stack of thread `tid` of `pid`, which was off CPU when
/// listed. Fails only when the thread is gone or its syscall file cannot
/// be read at all.
pub(crate) fn take(
    pid: u32,
    tid: u32,
    kernel_thread: bool,
    maps: &mut Mappings,
) -> io::Result<Blocked> {
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let before = procfs::schedstat(pid, tid).ok();
        let call = procfs::syscall_file(pid, tid)?;
        let SyscallFile::Blocked { sp, pc, .. } = call else {
            return Ok(Blocked::Running);
        };
        let kernel = procfs::kernel_stack(pid, tid);
        // Kernel threads show zeros; so does a thread with no user context.
        let user = (!kernel_thread && sp != 0 && pc != 0).then(|| {
            let mut bytes = Vec::new();
            stackmem::copy(pid, sp, maps, &mut bytes).map(|()| UserStack {
                ip: pc,
                sp,
                bp: None,
                bytes,
            })
        });
        let after = procfs::schedstat(pid, tid).ok();
        let again = procfs::syscall_file(pid, tid)?;
        let stable = again == call && (before.is_none() || before == after);
        attempt += 1;
        if stable || attempt == 2 {
            return Ok(Blocked::Taken(Taken {
                kernel,
                user,
                stable,
                took_ns: started.elapsed().as_nanos() as u64,
            }));
        }
    }
}
