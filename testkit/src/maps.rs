//! The test process's own executable mappings, read by the recorder's
//! parser of /proc/PID/maps ([`flamerec_perf::procfs::exec_maps`]): for
//! unit tests that unwind or name their own code.

use std::path::Path;

pub use flamerec_perf::procfs::ExecMap;

/// The executable mappings of this process now (its binary's code, its
/// libraries', the vdso).
pub fn own_exec_maps() -> Vec<ExecMap> {
    let maps = flamerec_perf::procfs::exec_maps(std::process::id());
    assert!(!maps.is_empty(), "no executable mapping in /proc/self/maps");
    maps
}

/// The executable mapping of the file at `path` in this process (the
/// first, by address); fails the test when there is none.
#[track_caller]
pub fn own_code_mapping(path: &Path) -> ExecMap {
    own_exec_maps()
        .into_iter()
        .find(|m| Path::new(&m.path) == path)
        .unwrap_or_else(|| panic!("no executable mapping of {} here", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> u64 {
        here as *const () as usize as u64
    }

    #[test]
    fn this_binarys_code_holds_its_functions() {
        let exe = std::fs::read_link("/proc/self/exe").expect("this binary's path");
        let code = own_code_mapping(&exe);
        assert!((code.start..code.end).contains(&here()), "{code:x?}");
        assert!(own_exec_maps().iter().any(|m| m.path == "[vdso]"));
    }
}
