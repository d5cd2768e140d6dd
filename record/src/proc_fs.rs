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

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecMap {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset.
    pub pgoff: u64,
    /// Path or pseudo name.
    pub path: String,
}

/// Executable mappings of a process.
pub fn exec_maps(pid: u32) -> Vec<ExecMap> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// Parses the text of /proc/PID/maps, keeping executable mappings.
pub fn parse_maps(text: &str) -> Vec<ExecMap> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let path = it.next().unwrap_or("").trim_start().to_string();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(pgoff)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        if end <= start {
            continue;
        }
        let path = if path.is_empty() {
            "//anon".to_string()
        } else {
            path
        };
        out.push(ExecMap {
            start,
            end,
            pgoff,
            path,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_executable_mappings_with_paths() {
        let text = "55d0c0000000-55d0c0001000 r--p 00000000 fe:01 123 /usr/bin/true\n\
55d0c0001000-55d0c0005000 r-xp 00001000 fe:01 123 /usr/bin/true\n\
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]\n\
7f000000-7f001000 rwxp 00000000 00:00 0 \n\
garbage line\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].path, "/usr/bin/true");
        assert_eq!(maps[0].pgoff, 0x1000);
        assert_eq!(maps[1].path, "[vdso]");
        assert_eq!(maps[2].path, "//anon");
    }

    #[test]
    fn this_process_is_visible() {
        let me = std::process::id();
        assert!(alive(me));
        assert!(threads_of(me).contains(&me));
        assert!(!exec_maps(me).is_empty());
        assert!(all_pids().contains(&me));
    }
}
