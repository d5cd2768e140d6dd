//! The recorder's scheduling priority.

use std::io;

/// Nice value the draining thread asks for: enough to be scheduled ahead of
/// the workload's threads on a machine whose every core they keep busy.
const RECORDER_NICE: i32 = -5;

/// Raises the calling thread's priority to [`RECORDER_NICE`] unless it is
/// already higher; only that thread (and threads it starts later) — on Linux
/// nice is per thread, so a command started before keeps its own. Refused
/// without CAP_SYS_NICE, which the caller may ignore.
pub fn raise_recorder_priority() -> io::Result<()> {
    // SAFETY: getpriority and setpriority take plain integers; who = 0 is
    // the calling thread. getpriority may return -1 as a value: errno is
    // cleared first and checked.
    unsafe {
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, 0);
        if now == -1 && *libc::__errno_location() != 0 {
            return Err(io::Error::last_os_error());
        }
        if now <= RECORDER_NICE {
            return Ok(());
        }
        if libc::setpriority(libc::PRIO_PROCESS, 0, RECORDER_NICE) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Nice value of the threads that name frames while recording: they run
/// when the workload leaves a core idle.
const NAMER_NICE: i32 = 19;

/// Lowers the calling thread's priority to [`NAMER_NICE`] (threads it
/// starts later inherit it). Lowering needs no privilege; raising it back
/// ([`restore_namer_priority`]) does.
pub fn lower_namer_priority() -> io::Result<()> {
    // SAFETY: setpriority takes plain integers; who = 0 is the calling thread.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, NAMER_NICE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets every thread of this process at [`NAMER_NICE`] to the calling
/// thread's nice value: the naming threads, once the user waits for them.
/// Threads they start meanwhile are caught by another pass (a few at most).
pub fn restore_namer_priority() {
    // SAFETY: getpriority takes plain integers; who = 0 is the calling
    // thread. -1 is a valid value and also the error return: on error the
    // threads are set to -1, which is no lower than they were meant to be.
    let to = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    for _ in 0..4 {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        let mut raised = 0;
        for tid in tasks
            .flatten()
            .filter_map(|t| t.file_name().to_str()?.parse::<u32>().ok())
        {
            // SAFETY: as above, with a thread id of this process as `who`;
            // a thread gone meanwhile makes the calls fail, which is fine.
            unsafe {
                let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
                if nice == NAMER_NICE && libc::setpriority(libc::PRIO_PROCESS, tid, to) == 0 {
                    raised += 1;
                }
            }
        }
        if raised == 0 {
            return;
        }
    }
}
