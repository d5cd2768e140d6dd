//! JIT symbol maps: `/tmp/perf-PID.map`, the text files that JITs (V8/node
//! `--perf-basic-prof`, the JVM's perf-map-agent, Python 3.12 `-X perf`,
//! LuaJIT, ...) write for perf: one `START SIZE NAME` line per function,
//! START and SIZE in hex.
//!
//! Anonymous frames in a recording carry an absolute address but not the
//! process they were sampled in, so an address is looked up in the maps of
//! every recorded process that has one and named only when all maps that
//! cover it agree (see [`JitMaps::lookup`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// Lines longer than this are skipped (a symbol name, not a file dump).
const MAX_LINE: u64 = 64 * 1024;

/// One process's map, sorted by start address.
#[derive(Debug, Default)]
struct PerfMap {
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    fn parse<R: BufRead>(mut input: R) -> Self {
        let mut entries = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut input).take(MAX_LINE).read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if let Some(e) = parse_line(&String::from_utf8_lossy(&line)) {
                entries.push(e);
            }
        }
        // Later lines win for the same start (a JIT may reuse code memory).
        entries.reverse();
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        PerfMap { entries }
    }

    fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= addr)
            .checked_sub(1)?;
        let (start, size, name) = self.entries.get(i)?;
        (addr - start < *size).then_some(name.as_str())
    }
}

fn parse_line(line: &str) -> Option<(u64, u64, String)> {
    let line = line.trim_end_matches(['\n', '\r']);
    let mut parts = line.splitn(3, ' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim();
    (size > 0 && !name.is_empty()).then(|| (start, size, name.to_string()))
}

fn hex(s: &str) -> Option<u64> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(s, 16).ok()
}

/// The perf maps of the recorded processes that have one.
#[derive(Debug, Default)]
pub(crate) struct JitMaps {
    maps: Vec<PerfMap>,
}

impl JitMaps {
    /// Reads `DIR/perf-PID.map` for each pid, skipping missing or unreadable ones.
    pub(crate) fn load(dir: &Path, pids: &[u32]) -> Self {
        let maps = pids
            .iter()
            .filter_map(|pid| {
                let file = File::open(dir.join(format!("perf-{pid}.map"))).ok()?;
                file.metadata().ok().filter(|m| m.is_file())?;
                Some(PerfMap::parse(BufReader::new(file)))
            })
            .filter(|m| !m.entries.is_empty())
            .collect();
        JitMaps { maps }
    }

    /// Whether any map was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// The name at `addr` when every map covering it gives the same name.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let mut found: Option<&str> = None;
        for name in self.maps.iter().filter_map(|m| m.lookup(addr)) {
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

    #[test]
    fn lines_parse_with_or_without_0x_and_bad_ones_are_skipped() {
        let text = "7f0000001000 40 LazyCompile:~foo a.js:1\n\
                    0x7f0000002000 0x10 py::bar:/x.py\n\
                    garbage line\n\
                    7f0000003000 0 empty\n\
                    zz 10 bad\n";
        let m = PerfMap::parse(text.as_bytes());
        assert_eq!(m.entries.len(), 2);
        assert_eq!(m.lookup(0x7f00_0000_1000), Some("LazyCompile:~foo a.js:1"));
        assert_eq!(m.lookup(0x7f00_0000_103f), Some("LazyCompile:~foo a.js:1"));
        assert_eq!(m.lookup(0x7f00_0000_1040), None);
        assert_eq!(m.lookup(0x7f00_0000_200f), Some("py::bar:/x.py"));
        assert_eq!(m.lookup(0x10), None);
    }

    #[test]
    fn disagreeing_maps_name_nothing() {
        let a = PerfMap::parse("1000 100 one\n".as_bytes());
        let b = PerfMap::parse("1000 100 two\n2000 10 three\n".as_bytes());
        let same = PerfMap::parse("1000 100 one\n".as_bytes());
        let maps = JitMaps { maps: vec![a, b] };
        assert_eq!(maps.lookup(0x1010), None);
        assert_eq!(maps.lookup(0x2000), Some("three"));
        let a = PerfMap::parse("1000 100 one\n".as_bytes());
        let maps = JitMaps {
            maps: vec![a, same],
        };
        assert_eq!(maps.lookup(0x1010), Some("one"));
    }
}
