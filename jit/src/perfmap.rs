//! A perf map (`/tmp/perf-PID.map`: `START SIZE name` lines, hex) followed
//! while the runtime appends to it.
//!
//! A map has no times, so each line is given one: the time of the last read
//! that did not see it whole. The runtime wrote the line between that read
//! and the one that saw it, before running the code it names; a sample from
//! that window at those addresses ran that code (or code the line replaced
//! at the same addresses, which is rarer than new code at fresh ones). A
//! line names samples from its time on, until a later line covers its
//! addresses. Lines first seen by the read made after the process ended
//! ([`PerfMap::finish`]; Java's `DumpPerfMapAtExit` writes the whole map
//! then) also name samples at any earlier time that no line named.
//!
//! Only complete lines are parsed; the offset after the last one is kept,
//! so each read parses only what was appended. A map rewritten from the
//! start (`jcmd PID Compiler.perfmap`) or replaced by a new file is read
//! again from its start.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::open::{self, OpenError, Rules};
use crate::timeline::Timeline;
use crate::{Error, Refusal, MAX_CODE_LEN};

/// The longest line taken: a longer one is skipped whole.
const MAX_LINE: usize = 64 * 1024;
/// The most read in one go: a large map is read over several calls.
const CHUNK: u64 = 4 * 1024 * 1024;

/// What a perf map line names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// Code start.
    pub start: u64,
    /// Code end (exclusive).
    pub end: u64,
    /// The name as written.
    pub name: String,
}

/// Counts for `info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MapStats {
    /// Lines taken.
    pub lines: u64,
    /// Lines that did not parse (or named a range past [`MAX_CODE_LEN`]).
    pub bad_lines: u64,
    /// Times the file was read again from its start.
    pub rereads: u64,
}

/// How long after finding no map file its path is looked at again.
pub const MISSING_RECHECK_NS: u64 = 1_000_000_000;

/// One process's perf map, followed while it grows.
#[derive(Debug)]
pub struct PerfMap {
    path: PathBuf,
    rules: Rules,
    file: Option<(File, u64, u64)>,
    /// Bytes parsed so far (up to the end of the last complete line).
    offset: u64,
    /// When the last read was made (the time a line seen next is given).
    last_read: u64,
    /// Since when the reads have found no file (in a row).
    missing_since: Option<u64>,
    entries: Vec<MapEntry>,
    /// (start, end, name) → entry index: a line seen again (a map
    /// rewritten from its start) is the same code, not new code.
    known: HashMap<(u64, u64, String), u32>,
    timed: Timeline,
    /// Lines first seen after the process ended, for any earlier time.
    at_end: Timeline,
    finished: bool,
    stopped: bool,
    stats: MapStats,
}

impl PerfMap {
    /// The map at `path`, not yet read; `rules` say which file is taken.
    pub fn new(path: impl Into<PathBuf>, rules: Rules) -> Self {
        PerfMap {
            path: path.into(),
            rules,
            file: None,
            offset: 0,
            last_read: 0,
            missing_since: None,
            entries: Vec::new(),
            known: HashMap::new(),
            timed: Timeline::default(),
            at_end: Timeline::default(),
            finished: false,
            stopped: false,
            stats: MapStats::default(),
        }
    }

    /// The map of process `pid` in `/tmp`.
    pub fn for_pid(pid: u32, rules: Rules) -> Self {
        Self::new(format!("/tmp/perf-{pid}.map"), rules)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counts so far.
    pub fn stats(&self) -> MapStats {
        self.stats
    }

    /// Reads what was appended since the last call; `now` is the time of
    /// this read on the samples' clock. Returns the number of new lines.
    /// A missing file is not an error (the runtime may not have written it
    /// yet). A refusal or a read error is returned once; the map then stops
    /// following and keeps what it read.
    ///
    /// Once there has been no file for [`MISSING_RECHECK_NS`], the path is
    /// looked at only that long after the last look: a process followed for
    /// its anonymous executable memory that never writes a map cost a
    /// `stat` per drain round (5% of an always-on recorder's loop), while a
    /// runtime that writes one does so as it starts (`python -X perf`: its
    /// first trampoline, within milliseconds), so its first second is
    /// looked at as often as asked. Lines found are given the time of the
    /// last look, as always: before the file existed, nothing it names was
    /// written.
    pub fn poll(&mut self, now: u64) -> Result<usize, Error> {
        let waits = self.missing_since.is_some_and(|first| {
            now.saturating_sub(first) >= MISSING_RECHECK_NS
                && now < self.last_read.saturating_add(MISSING_RECHECK_NS)
        });
        if self.stopped || waits {
            return Ok(0);
        }
        let since = self.last_read;
        self.last_read = now;
        match self.read_new(since, false) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.stopped = true;
                Err(e)
            }
        }
    }

    /// The read made after the process ended: what it adds also names
    /// samples at any earlier time that no line named. Later calls read
    /// nothing.
    pub fn finish(&mut self, now: u64) -> Result<usize, Error> {
        if self.finished {
            return Ok(0);
        }
        self.finished = true;
        let since = self.last_read;
        self.last_read = now;
        if self.stopped {
            return Ok(0);
        }
        self.stopped = true;
        self.read_new(since, true)
    }

    /// The entry naming `addr` at `time`.
    pub fn lookup(&self, addr: u64, time: u64) -> Option<&MapEntry> {
        self.timed
            .lookup(addr, time)
            .or_else(|| self.at_end.lookup(addr, 0))
            .and_then(|s| self.entries.get(s.id as usize))
    }

    /// Every entry first read at the end ([`PerfMap::finish`]) that covers
    /// `addr`, whatever the time: for frames that carry no time.
    pub fn at_end_covering(&self, addr: u64) -> impl Iterator<Item = &MapEntry> {
        self.at_end
            .covering(addr)
            .filter_map(|s| self.entries.get(s.id as usize))
    }

    /// Every entry that ever covered `addr`, whatever the time.
    pub fn entries_covering(&self, addr: u64) -> impl Iterator<Item = &MapEntry> {
        self.timed
            .covering(addr)
            .filter_map(|s| self.entries.get(s.id as usize))
    }

    /// Every entry taken so far, in the order read; [`PerfMap::poll`] says
    /// how many are new.
    pub fn entries(&self) -> &[MapEntry] {
        &self.entries
    }

    /// The entries whose names are not yet replaced, by start.
    pub fn current(&self) -> impl Iterator<Item = &MapEntry> {
        self.timed
            .open()
            .filter_map(|s| self.entries.get(s.id as usize))
    }

    fn read_new(&mut self, since: u64, at_end: bool) -> Result<usize, Error> {
        let path = self.path.clone();
        let refused = |reason| Error::Refused {
            path: path.clone(),
            reason,
        };
        let io = |source| Error::Io {
            path: path.clone(),
            source,
        };
        // A different file at the path (the map replaced): start over on it.
        let at_path = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => Some((m.dev(), m.ino())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        // `last_read` is this read's time.
        self.missing_since = match at_path {
            None => self.missing_since.or(Some(self.last_read)),
            Some(_) => None,
        };
        let same = matches!((&self.file, at_path), (Some((_, d, i)), Some(p)) if (*d, *i) == p);
        if !same {
            let Some(_) = at_path else { return Ok(0) };
            let file = match open::open(&self.path, self.rules) {
                Ok(f) => f,
                Err(OpenError::Refused(r)) => return Err(refused(r)),
                Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
                Err(OpenError::Io(e)) => return Err(io(e)),
            };
            let meta = file.metadata().map_err(io)?;
            if self.file.is_some() {
                self.stats.rereads += 1;
            }
            self.file = Some((file, meta.dev(), meta.ino()));
            self.offset = 0;
        }
        let Some((file, dev, ino)) = self.file.take() else {
            return Ok(0);
        };
        let read = self.read_lines(&file, since, at_end);
        self.file = Some((file, dev, ino));
        let (added, len) = read.map_err(io)?;
        if len > self.rules.max_len {
            return Err(refused(Refusal::TooLarge {
                limit: self.rules.max_len,
            }));
        }
        Ok(added)
    }

    /// Reads and parses the complete lines past the offset: the lines
    /// added and the file's size.
    fn read_lines(
        &mut self,
        file: &File,
        since: u64,
        at_end: bool,
    ) -> std::io::Result<(usize, u64)> {
        let len = file.metadata()?.len();
        if len < self.offset {
            // Rewritten from the start.
            self.offset = 0;
            self.stats.rereads += 1;
        }
        let readable = len.min(self.rules.max_len);
        let mut added = 0;
        let mut bytes = Vec::new();
        loop {
            let want = (readable - self.offset).min(CHUNK);
            if want == 0 {
                break;
            }
            bytes.resize(want as usize, 0);
            let got = file.read_at(&mut bytes, self.offset)?;
            bytes.truncate(got);
            if got == 0 {
                break;
            }
            let (used, n) = self.parse(&bytes, since, at_end);
            added += n;
            if used == 0 {
                break;
            }
            self.offset += used as u64;
        }
        let rest = readable.saturating_sub(self.offset) as usize;
        if at_end && rest > 0 && rest <= MAX_LINE {
            // The process is gone: a last line without its newline is whole.
            let mut tail = vec![0; rest];
            file.read_exact_at(&mut tail, self.offset)?;
            tail.push(b'\n');
            let (used, n) = self.parse(&tail, since, at_end);
            added += n;
            self.offset += used.saturating_sub(1) as u64;
        }
        Ok((added, len))
    }

    /// Parses the complete lines of `bytes`: returns the bytes used (up to
    /// the end of the last complete line, or past a line too long to take)
    /// and the number of lines added.
    fn parse(&mut self, bytes: &[u8], since: u64, at_end: bool) -> (usize, usize) {
        let mut used = 0;
        let mut added = 0;
        while let Some(nl) = bytes[used..].iter().position(|&b| b == b'\n') {
            let line = &bytes[used..used + nl];
            used += nl + 1;
            if line.len() > MAX_LINE {
                self.stats.bad_lines += 1;
                continue;
            }
            match parse_line(line) {
                Some(e) => {
                    if self.add(e, since, at_end) {
                        added += 1;
                    }
                }
                None if line.iter().all(u8::is_ascii_whitespace) => {}
                None => self.stats.bad_lines += 1,
            }
        }
        if used == 0 && bytes.len() > MAX_LINE {
            // No newline in a line longer than any taken: skip what there is.
            self.stats.bad_lines += 1;
            used = bytes.len();
        }
        (used, added)
    }

    fn add(&mut self, e: MapEntry, since: u64, at_end: bool) -> bool {
        let key = (e.start, e.end, e.name.clone());
        if let Some(&id) = self.known.get(&key) {
            // The same line again: still the same code, unless other code
            // replaced it meanwhile.
            let current = self.timed.lookup(e.start, u64::MAX - 1).map(|s| s.id);
            if current == Some(id) {
                return false;
            }
        }
        let Ok(id) = u32::try_from(self.entries.len()) else {
            return false;
        };
        self.timed.insert(e.start, e.end, since, id);
        if at_end {
            self.at_end.insert(e.start, e.end, 0, id);
        }
        self.known.insert(key, id);
        self.entries.push(e);
        self.stats.lines += 1;
        true
    }
}

/// One line: `START SIZE name`, both numbers hex with or without `0x`.
fn parse_line(line: &[u8]) -> Option<MapEntry> {
    let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    let mut parts = line.splitn(3, ' ');
    let start = hex(parts.next()?)?;
    let size = hex(parts.next()?)?;
    let name = parts.next()?.trim();
    if size == 0 || size > MAX_CODE_LEN || name.is_empty() {
        return None;
    }
    Some(MapEntry {
        start,
        end: start.checked_add(size)?,
        name: name.to_string(),
    })
}

fn hex(s: &str) -> Option<u64> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(s, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn rules() -> Rules {
        Rules {
            uid: open::process_uid(std::process::id()).expect("uid"),
            max_len: 1 << 20,
            not_before: None,
        }
    }

    #[test]
    fn lines_parse_with_and_without_0x_and_bad_ones_are_skipped() {
        assert_eq!(
            parse_line(b"7f00 1b py::a:/x.py"),
            Some(MapEntry {
                start: 0x7f00,
                end: 0x7f1b,
                name: "py::a:/x.py".into()
            })
        );
        assert_eq!(
            parse_line(b"0x10 0x2 JS:*f a b.js:1:2").map(|e| e.end),
            Some(0x12)
        );
        assert_eq!(parse_line(b"10 0 zero"), None);
        assert_eq!(parse_line(b"zz 2 x"), None);
        assert_eq!(parse_line(b"ffffffffffffffff 2 wraps"), None);
        assert_eq!(parse_line(b"10 2"), None);
    }

    #[test]
    fn a_growing_map_is_read_line_by_line_and_each_line_names_from_the_read_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-1.map");
        let mut f = File::create(&path).expect("create");
        let mut m = PerfMap::new(&path, rules());
        f.write_all(b"1000 100 first\n2000 10").expect("write");
        assert_eq!(m.poll(100).expect("poll"), 1);
        // The second line is not whole yet.
        assert!(m.lookup(0x2000, 150).is_none());
        f.write_all(b"0 second\n1000 100 again\n").expect("write");
        assert_eq!(m.poll(200).expect("poll"), 2);
        let name = |m: &PerfMap, a, t| m.lookup(a, t).map(|e| e.name.clone());
        // `first` was seen by the read at 100: it names from the start.
        assert_eq!(name(&m, 0x1010, 50).as_deref(), Some("first"));
        // `again` replaced it, from the read before the one that saw it.
        assert_eq!(name(&m, 0x1010, 99).as_deref(), Some("first"));
        assert_eq!(name(&m, 0x1010, 100).as_deref(), Some("again"));
        assert_eq!(name(&m, 0x2005, 100).as_deref(), Some("second"));
        assert_eq!(name(&m, 0x2005, 99), None);
        assert_eq!(m.poll(300).expect("poll"), 0);
        assert_eq!(m.stats().lines, 3);
    }

    #[test]
    fn a_map_read_only_at_the_end_names_what_no_earlier_line_covered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-1.map");
        let mut m = PerfMap::new(&path, rules());
        assert_eq!(m.poll(100).expect("no map yet"), 0);
        std::fs::write(&path, b"1000 100 during\n").expect("write");
        assert_eq!(m.poll(200).expect("poll"), 1);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("append");
        // Written at exit, the last line without its newline.
        f.write_all(b"1000 100 at-exit\n3000 10 only-at-exit")
            .expect("write");
        let end = 900;
        assert_eq!(m.finish(end).expect("finish"), 2);
        let name = |a, t| m.lookup(a, t).map(|e| e.name.clone());
        assert_eq!(name(0x3000, 10).as_deref(), Some("only-at-exit"));
        assert_eq!(name(0x1000, 150).as_deref(), Some("during"));
        // Before `during` was seen nothing timed named 0x1000: the map at
        // exit does.
        assert_eq!(name(0x1000, 50).as_deref(), Some("at-exit"));
        assert_eq!(name(0x1000, end + 50).as_deref(), Some("at-exit"));
        assert_eq!(m.finish(end + 100).expect("again"), 0);
        let at_end: Vec<&str> = m.at_end_covering(0x1000).map(|e| e.name.as_str()).collect();
        assert_eq!(at_end, ["at-exit"]);
        assert_eq!(m.entries().len(), 3);
        assert_eq!(m.entries_covering(0x1000).count(), 2);
    }

    #[test]
    fn a_path_without_a_map_for_a_second_is_looked_at_once_a_second() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-1.map");
        let mut m = PerfMap::new(&path, rules());
        let second = MISSING_RECHECK_NS;
        // Its first second: looked at each time.
        assert_eq!(m.poll(100).expect("no map yet"), 0);
        assert_eq!(m.poll(200).expect("no map yet"), 0);
        let last = 250 + second;
        assert_eq!(m.poll(last).expect("no map a second on"), 0);
        std::fs::write(&path, b"1000 100 late\n").expect("write");
        assert_eq!(m.poll(last + 50).expect("not looked at"), 0);
        assert_eq!(m.poll(last + second).expect("looked at"), 1);
        // Given the time of the last look, which found nothing.
        let name = |t| m.lookup(0x1000, t).map(|e| e.name.clone());
        assert_eq!(name(last).as_deref(), Some("late"));
        assert_eq!(name(last - 1), None);
    }

    #[test]
    fn a_map_rewritten_from_its_start_adds_only_what_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-1.map");
        std::fs::write(&path, b"1000 100 a\n2000 100 b\n").expect("write");
        let mut m = PerfMap::new(&path, rules());
        assert_eq!(m.poll(10).expect("poll"), 2);
        // Replaced by a new, shorter file (jcmd Compiler.perfmap).
        let tmp = dir.path().join("new");
        std::fs::write(&tmp, b"2000 100 b\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert_eq!(m.poll(20).expect("poll"), 0);
        assert_eq!(m.stats().rereads, 1);
        assert_eq!(m.current().count(), 2);
    }

    #[test]
    fn hostile_maps_stop_with_a_reason_and_keep_what_was_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("perf-1.map");
        let mut big = b"1000 100 kept\n".to_vec();
        let mut m = PerfMap::new(
            &path,
            Rules {
                max_len: 64,
                ..rules()
            },
        );
        std::fs::write(&path, &big).expect("write");
        assert_eq!(m.poll(1).expect("small"), 1);
        big.resize(big.len() + MAX_LINE + 10, b'x');
        std::fs::write(&path, &big).expect("write");
        let err = m.poll(2).expect_err("too large");
        assert!(
            matches!(
                err,
                Error::Refused {
                    reason: Refusal::TooLarge { limit: 64 },
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(m.poll(3).expect("stopped"), 0);
        assert_eq!(m.lookup(0x1000, 5).map(|e| e.name.as_str()), Some("kept"));
        // A line longer than any taken is skipped, and what follows is read.
        let path2 = dir.path().join("perf-2.map");
        let mut long = vec![b'y'; MAX_LINE + 1];
        long.extend_from_slice(b"\n5000 10 after\n");
        std::fs::write(&path2, &long).expect("write");
        let mut m2 = PerfMap::new(&path2, rules());
        assert_eq!(m2.poll(1).expect("poll"), 1);
        assert_eq!(m2.stats().bad_lines, 1);
    }
}
