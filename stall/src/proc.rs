//! What /proc says about this process's own threads: names, the mapping of
//! a thread's stack, start times (to tell a thread from a later one with
//! the same id), scheduler state and, where readable (root), the kernel
//! stack of a blocked thread. The parsing is `flamerec_perf::procfs`'s;
//! this module only asks it about the calling process, and every failure
//! is an `Option`.

use flamerec_perf::procfs::{self, Mappings};

fn me() -> u32 {
    std::process::id()
}

/// A thread's name, or `None` when it is gone.
pub(crate) fn thread_name(tid: u32) -> Option<String> {
    procfs::comm_of(me(), tid).ok()
}

/// The mapping that holds `addr` (an address on the calling thread's
/// stack): the thread's stack, `(start, end)`.
pub(crate) fn mapping_of(addr: u64) -> Option<(u64, u64)> {
    Mappings::of(me()).ok()?.holding(addr)
}

/// The thread's start time (clock ticks since boot), or `None` when gone.
pub(crate) fn start_time(tid: u32) -> Option<u64> {
    procfs::task_stat(me(), tid).ok()?.start_time
}

/// Whether the thread sleeps in the kernel (state S or D): then its
/// kernel stack is where it waits.
pub(crate) fn is_blocked(tid: u32) -> bool {
    procfs::task_stat(me(), tid).is_ok_and(|s| s.is_blocked())
}

/// The kernel stack of a thread, leaf first, names without offsets; `None`
/// when unreadable (not root, or the kernel lacks it).
pub(crate) fn kernel_stack(tid: u32) -> Option<Vec<String>> {
    let lines = procfs::kernel_stack(me(), tid).ok()?;
    Some(lines.into_iter().map(|l| l.name).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_is_described() {
        let tid = crate::sys::gettid();
        assert!(thread_name(tid).is_some());
        assert!(start_time(tid).is_some());
        let local = 0u8;
        let (lo, hi) = mapping_of(&local as *const u8 as u64).expect("stack mapping");
        assert!(lo < hi);
        assert!(start_time(u32::MAX).is_none());
    }
}
