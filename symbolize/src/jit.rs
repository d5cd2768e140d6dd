//! JIT symbol maps: `/tmp/perf-PID.map`, the text files that JITs (V8/node
//! `--perf-basic-prof`, the JVM's perf-map-agent, Python 3.12 `-X perf`,
//! LuaJIT, ...) write for perf: one `START SIZE NAME` line per function,
//! START and SIZE in hex.
//!
//! Anonymous frames in a recording carry an absolute address but not the
//! process they were sampled in, so an address is looked up in the maps of
//! every recorded process that has one and named only when all maps that
//! cover it agree (see [`JitMaps::lookup`]).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use flamerec_jit::{PerfMap, Rules};

/// The largest map read (larger ones are read up to it, and said).
const MAX_MAP: u64 = 256 << 20;

/// The perf maps of the recorded processes that have one.
#[derive(Debug, Default)]
pub(crate) struct JitMaps {
    maps: Vec<PerfMap>,
    /// What was refused, one line each (a FIFO, a link, a huge file).
    pub(crate) warnings: Vec<String>,
}

impl JitMaps {
    /// Reads `DIR/perf-PID.map` for each pid with the recorder's reader and
    /// its rules (`flamerec_jit`): never through a symbolic link, never
    /// blocking on a FIFO, a regular file only, bounded. A map's writer is
    /// not known offline: the file's own owner is taken (a recorder knows
    /// the process's uid and checks it). Missing maps are skipped quietly.
    pub(crate) fn load(dir: &Path, pids: &[u32]) -> Self {
        let mut out = JitMaps::default();
        for pid in pids {
            let path = dir.join(format!("perf-{pid}.map"));
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let rules = Rules {
                uid: meta.uid(),
                max_len: MAX_MAP,
                not_before: None,
            };
            let mut map = PerfMap::new(path, rules);
            match map.finish(0) {
                Ok(n) if n > 0 => out.maps.push(map),
                Ok(_) => {}
                Err(e) => out.warnings.push(format!("JIT names: {e}")),
            }
        }
        out
    }

    /// Whether any map was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// The name at `addr` when every map covering it gives the same name
    /// (a map's later line wins over an earlier one at the same address).
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let mut found: Option<&str> = None;
        for name in self
            .maps
            .iter()
            .filter_map(|m| m.lookup(addr, u64::MAX))
            .map(|e| e.name.as_str())
        {
            match found {
                Some(f) if f != name => return None,
                _ => found = Some(name),
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maps(dir: &Path, texts: &[&str]) -> JitMaps {
        let pids: Vec<u32> = (1..=texts.len() as u32).collect();
        for (pid, text) in pids.iter().zip(texts) {
            std::fs::write(dir.join(format!("perf-{pid}.map")), text).unwrap();
        }
        JitMaps::load(dir, &pids)
    }

    #[test]
    fn lines_parse_with_or_without_0x_and_bad_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let m = maps(
            dir.path(),
            &["7f0000001000 40 LazyCompile:~foo a.js:1\n\
               0x7f0000002000 0x10 py::bar:/x.py\n\
               garbage line\n\
               7f0000003000 0 empty\n\
               zz 10 bad\n"],
        );
        assert_eq!(m.lookup(0x7f00_0000_1000), Some("LazyCompile:~foo a.js:1"));
        assert_eq!(m.lookup(0x7f00_0000_103f), Some("LazyCompile:~foo a.js:1"));
        assert_eq!(m.lookup(0x7f00_0000_1040), None);
        assert_eq!(m.lookup(0x7f00_0000_200f), Some("py::bar:/x.py"));
        assert_eq!(m.lookup(0x10), None);
    }

    #[test]
    fn disagreeing_maps_name_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let m = maps(
            dir.path(),
            &["1000 100 one\n", "1000 100 two\n2000 10 three\n"],
        );
        assert_eq!(m.lookup(0x1010), None);
        assert_eq!(m.lookup(0x2000), Some("three"));
        let m = maps(dir.path(), &["1000 100 one\n", "1000 100 one\n"]);
        assert_eq!(m.lookup(0x1010), Some("one"));
        // A later line for the same code wins.
        let m = maps(dir.path(), &["1000 100 old\n1000 100 new\n"]);
        assert_eq!(m.lookup(0x1010), Some("new"));
    }

    /// A FIFO named like a map is refused at once (it never blocks the
    /// fold), and so is a symbolic link, each said once.
    #[test]
    fn a_fifo_or_a_link_named_like_a_map_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("perf-1.map");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "1000 100 secret\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("perf-2.map")).unwrap();
        let started = std::time::Instant::now();
        let m = JitMaps::load(dir.path(), &[1, 2, 3]);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(m.is_empty());
        assert_eq!(m.lookup(0x1010), None);
        assert_eq!(m.warnings.len(), 2, "{:?}", m.warnings);
        assert!(
            m.warnings[0].contains("not a regular file"),
            "{:?}",
            m.warnings
        );
        assert!(
            m.warnings[1].contains("a symbolic link"),
            "{:?}",
            m.warnings
        );
    }
}
