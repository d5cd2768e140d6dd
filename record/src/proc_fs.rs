//! What /proc says about processes that run before recording starts: their
//! threads, names and executable mappings (for `--pid` and `--all-cpus`).

use std::fs;

/// Thread ids of a process.
pub fn threads_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

/// Every process id.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

/// The name of a thread.
pub fn comm_of(pid: u32, tid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

/// Whether a process still exists.
pub fn alive(pid: u32) -> bool {
    // A zombie has no more threads to sample: count it as gone.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

pub use flamerec_symbolize::live::exec_maps;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_visible() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(threads_of(me).contains(&me));
        assert!(!exec_maps(me).is_empty());
        assert!(all_pids().contains(&me));
    }
}
