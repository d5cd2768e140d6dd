//! /proc/PID/maps: every mapping's range (to bound a stack read by the
//! mapping that holds it) and the executable mappings with their files (to
//! turn addresses into (module, file offset)). The one parser of the file.

use std::fs;
use std::io;

/// One line of /proc/PID/maps.
struct Line<'a> {
    start: u64,
    end: u64,
    exec: bool,
    pgoff: u64,
    /// The path or pseudo name, empty for anonymous memory.
    path: &'a str,
}

fn parse_line(line: &str) -> Option<Line<'_>> {
    let mut it = line.splitn(6, ' ');
    let (range, perms, off, _dev, _inode) =
        (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    let (a, b) = range.split_once('-')?;
    let (start, end) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    (start < end).then_some(Line {
        start,
        end,
        exec: perms.contains('x'),
        pgoff: u64::from_str_radix(off, 16).ok()?,
        path: it.next().unwrap_or("").trim_start(),
    })
}

/// Address ranges of every mapping of a process (not only executable ones:
/// thread stacks are anonymous read-write memory).
#[derive(Debug, Clone, Default)]
pub struct Mappings(Vec<(u64, u64)>);

impl Mappings {
    /// The mappings of `pid` now.
    pub fn of(pid: u32) -> io::Result<Self> {
        Ok(Self::parse(&fs::read_to_string(format!(
            "/proc/{pid}/maps"
        ))?))
    }

    /// Parses the text of /proc/PID/maps.
    pub fn parse(text: &str) -> Self {
        let mut ranges: Vec<(u64, u64)> = text
            .lines()
            .filter_map(parse_line)
            .map(|l| (l.start, l.end))
            .collect();
        ranges.sort_unstable();
        Mappings(ranges)
    }

    /// The end of the mapping that holds `addr`: a stack is read from its
    /// pointer up to there at most.
    pub fn end_of(&self, addr: u64) -> Option<u64> {
        self.holding(addr).map(|(_, end)| end)
    }

    /// The mapping that holds `addr`, as `(start, end)`.
    pub fn holding(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.0.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        let (start, end) = self.0[i];
        (addr < end).then_some((start, end))
    }
}

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecMap {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Path, or a pseudo name (`[vdso]`, `//anon` for memory without one).
    pub path: String,
}

/// Executable mappings of a process; empty when it is gone or unreadable.
pub fn exec_maps(pid: u32) -> Vec<ExecMap> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|t| parse_maps(&t))
        .unwrap_or_default()
}

/// Parses the text of /proc/PID/maps, keeping executable mappings.
pub fn parse_maps(text: &str) -> Vec<ExecMap> {
    text.lines()
        .filter_map(parse_line)
        .filter(|l| l.exec)
        .map(|l| ExecMap {
            start: l.start,
            end: l.end,
            pgoff: l.pgoff,
            path: if l.path.is_empty() {
                "//anon".to_string()
            } else {
                l.path.to_string()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_holding_an_address() {
        let m = Mappings::parse(
            "7f0000000000-7f0000800000 rw-p 00000000 00:00 0 \n\
             7fff51d3f000-7fff51d60000 rw-p 00000000 00:00 0     [stack]\n",
        );
        assert_eq!(m.end_of(0x7fff_51d5_0000), Some(0x7fff_51d6_0000));
        assert_eq!(m.end_of(0x7f00_0000_0000), Some(0x7f00_0080_0000));
        assert_eq!(m.end_of(0x7f00_0080_0000), None);
        assert_eq!(m.end_of(0x10), None);
        assert_eq!(
            m.holding(0x7fff_51d5_0000),
            Some((0x7fff_51d3_f000, 0x7fff_51d6_0000))
        );
    }

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
}
