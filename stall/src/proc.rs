//! What `/proc/self` says about this process's threads: names, stack
//! mappings, start times (to tell a thread from a later one with the same
//! id), scheduler state and, where readable (root), the kernel stack of a
//! blocked thread. Reads files only; every failure is an `Option`.

use std::fs;

/// A thread's name, or `None` when it is gone.
pub(crate) fn thread_name(tid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/self/task/{tid}/comm")).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// The mapping that holds `addr` (an address on the calling thread's
/// stack): the thread's stack, `(start, end)`.
pub(crate) fn mapping_of(addr: u64) -> Option<(u64, u64)> {
    let maps = fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let range = line.split_whitespace().next()?;
        let (a, b) = range.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        (start <= addr && addr < end).then_some((start, end))
    })
}

/// Fields after the command name of `/proc/self/task/TID/stat`: the name
/// may hold spaces and parentheses, so split after its last `)`.
fn stat_fields(tid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The thread's start time (clock ticks since boot), or `None` when gone.
pub(crate) fn start_time(tid: u32) -> Option<u64> {
    // Field 22 of stat; the fields after the name start at field 3.
    stat_fields(tid)?.get(22 - 3)?.parse().ok()
}

/// Whether the thread sleeps in the kernel (state S or D): then its
/// kernel stack is where it waits.
pub(crate) fn is_blocked(tid: u32) -> bool {
    stat_fields(tid)
        .and_then(|f| f.first().cloned())
        .is_some_and(|s| s == "S" || s == "D")
}

/// The kernel stack of a thread from `/proc/self/task/TID/stack`, leaf
/// first, names without offsets; `None` when unreadable (not root, or the
/// kernel lacks it).
pub(crate) fn kernel_stack(tid: u32) -> Option<Vec<String>> {
    let s = fs::read_to_string(format!("/proc/self/task/{tid}/stack")).ok()?;
    Some(parse_kernel_stack(&s))
}

/// Parses lines like `[<0>] pipe_read+0x2c2/0x3f0`.
fn parse_kernel_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let sym = l.split_whitespace().nth(1)?;
            let name = sym.split('+').next().unwrap_or(sym);
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
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

    #[test]
    fn kernel_stack_lines_become_names() {
        let text = "[<0>] pipe_read+0x2c2/0x3f0\n[<0>] vfs_read+0xbb/0x360\n\ngarbage\n";
        assert_eq!(parse_kernel_stack(text), ["pipe_read", "vfs_read"]);
    }
}
