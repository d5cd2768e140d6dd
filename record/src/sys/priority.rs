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
