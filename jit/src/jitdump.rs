//! A jitdump (`jit-PID.dump`) followed while the runtime appends to it,
//! read with the `linux-perf-data` crate's reader, which waits for a record
//! still being written.
//!
//! Each `JIT_CODE_LOAD` names its code from the record's time on, until a
//! later load over the same addresses (a jitdump has no unload record: code
//! freed and its addresses reused shows only as a new load there). The
//! `JIT_CODE_DEBUG_INFO` and `JIT_CODE_UNWINDING_INFO` records before a load
//! belong to it; a `JIT_CODE_MOVE` is a load of the moved code at its new
//! address; `JIT_CODE_CLOSE` ends the dump (nothing after it is read; the
//! code it named stays named: closing the file frees no code).
//!
//! Times: node (`--perf-prof`) and CPython (`-X perf_jit`) stamp records
//! with CLOCK_MONOTONIC, the samples' clock. A dump whose header says
//! `JITDUMP_FLAGS_ARCH_TIMESTAMP` (the CPU's time-stamp counter) is not on
//! that clock: its records are then timed as perf map lines are, by the
//! read before the one that saw them, and [`JitDump::clock`] says so.
//!
//! The reader's own parsers are used where they are bounded by the record;
//! the debug and unwinding records are parsed here: the crate's debug-info
//! parser reserves as many entries as the record claims before checking
//! them, and its unwinding parser puts the `.eh_frame_hdr` first where perf
//! and the runtimes put it last (after the `.eh_frame`).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use linux_perf_data::jitdump::{
    JitCodeLoadRecord, JitCodeMoveRecord, JitDumpRawRecord, JitDumpReader, JitDumpRecordHeader,
    JitDumpRecordType,
};

use crate::open::{self, OpenError, Rules};
use crate::timeline::Timeline;
use crate::{Error, Refusal, MAX_CODE_LEN};

/// `JITDUMP_FLAGS_ARCH_TIMESTAMP`: times are the CPU's time-stamp counter.
const FLAG_ARCH_TIMESTAMP: u64 = 1;
/// The fixed part of the file header.
const HEADER_LEN: usize = 40;
/// The reader's buffer must be larger than the header (it asserts so).
const BUFFER: usize = 64 * 1024;
/// The largest record taken: a V8 code object is well under this.
const MAX_RECORD: u32 = 64 << 20;
/// `EM_X86_64`; CPython 3.13 writes 0 (none), which is taken too.
const EM_X86_64: u32 = 62;

use records::{parse_debug, parse_unwind, PendingLines, Tables};

/// Which clock a dump's times are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// CLOCK_MONOTONIC, the samples' clock: loads are timed by their records.
    Monotonic,
    /// The CPU's time-stamp counter (`JITDUMP_FLAGS_ARCH_TIMESTAMP`): loads
    /// are timed by when they were read, as perf map lines are.
    ArchTimestamp,
}

/// A source line: code from `offset` (from the load's start) on, up to
/// the next entry, is from `line` of file `file` (see [`JitDump::file`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineEntry {
    /// Offset of the first byte of code, from the load's start.
    pub offset: u64,
    /// 1-based line.
    pub line: u32,
    /// Index of the file name.
    pub file: u32,
}

/// The unwind tables the runtime wrote for a load, at the addresses the
/// runtime computed their encodings for: the `.eh_frame` right after the
/// code (aligned to 8), its `.eh_frame_hdr` right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnwindInfo {
    /// The `.eh_frame` bytes.
    pub eh_frame: Arc<Vec<u8>>,
    /// Where they belong.
    pub eh_frame_addr: u64,
    /// The `.eh_frame_hdr` bytes (binary search table), if any.
    pub eh_frame_hdr: Option<Arc<Vec<u8>>>,
    /// Where they belong.
    pub eh_frame_hdr_addr: u64,
}

/// One piece of JIT code as a load (or a move) record gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    /// Code start.
    pub start: u64,
    /// Code end (exclusive).
    pub end: u64,
    /// From when it names its addresses (samples' clock, see [`Clock`]).
    pub time: u64,
    /// The name as written (`JS:*f x.js:1:2`, `py::f:/x.py`).
    pub name: String,
    /// The runtime's index for the code, which moves refer to.
    pub code_index: u64,
    /// Source lines, sorted by offset; empty without a debug record.
    pub lines: Vec<LineEntry>,
    /// Unwind tables, when the runtime wrote some.
    pub unwind: Option<UnwindInfo>,
}

impl Load {
    /// The source line of `addr`, as a file index and a line.
    pub fn line_of(&self, addr: u64) -> Option<LineEntry> {
        let off = addr.checked_sub(self.start)?;
        let i = self.lines.partition_point(|l| l.offset <= off);
        i.checked_sub(1).map(|i| self.lines[i])
    }
}

/// Counts for `info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Load records taken.
    pub loads: u64,
    /// Move records taken.
    pub moves: u64,
    /// Moves of code the dump never loaded.
    pub unknown_moves: u64,
    /// Debug records taken.
    pub debug_infos: u64,
    /// Unwinding records with tables.
    pub unwind_infos: u64,
    /// Records skipped (unknown types, loads of ranges past [`MAX_CODE_LEN`],
    /// debug or unwinding records that did not parse).
    pub skipped: u64,
    /// A close record was read.
    pub closed: bool,
}

/// A `Read` over the file that never reads past `limit` and does not move
/// a shared cursor (positional reads).
#[derive(Debug)]
struct Capped {
    file: File,
    pos: u64,
    limit: u64,
}

impl Read for Capped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.limit.saturating_sub(self.pos);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.pos)?;
        self.pos += got as u64;
        Ok(got)
    }
}

#[derive(Debug)]
struct Following {
    reader: JitDumpReader<Capped>,
    /// The same file, for its size.
    file: File,
}

/// One process's jitdump, followed while it grows.
#[derive(Debug)]
pub struct JitDump {
    path: PathBuf,
    rules: Rules,
    following: Option<Following>,
    stopped: bool,
    clock: Option<Clock>,
    pid: Option<u32>,
    last_read: u64,
    loads: Vec<Load>,
    timeline: Timeline,
    /// Code index → its latest load, for moves.
    by_index: HashMap<u64, u32>,
    files: Vec<String>,
    file_ids: HashMap<String, u32>,
    /// The debug record waiting for its load: (code address, lines).
    pending_lines: Option<PendingLines>,
    /// The unwinding record waiting for its load.
    pending_unwind: Option<Tables>,
    stats: DumpStats,
}

impl JitDump {
    /// The dump at `path` (as the runtime's mmap of it names it), not yet
    /// read; `rules` say which file is taken.
    pub fn new(path: impl Into<PathBuf>, rules: Rules) -> Self {
        JitDump {
            path: path.into(),
            rules,
            following: None,
            stopped: false,
            clock: None,
            pid: None,
            last_read: 0,
            loads: Vec::new(),
            timeline: Timeline::default(),
            by_index: HashMap::new(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            pending_lines: None,
            pending_unwind: None,
            stats: DumpStats::default(),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The clock its times are on, once its header was read.
    pub fn clock(&self) -> Option<Clock> {
        self.clock
    }

    /// The pid its header names, once read.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Counts so far.
    pub fn stats(&self) -> DumpStats {
        self.stats
    }

    /// Every load and move so far, in file order; [`JitDump::poll`] says
    /// how many are new.
    pub fn loads(&self) -> &[Load] {
        &self.loads
    }

    /// A file name of a [`LineEntry`].
    pub fn file(&self, index: u32) -> Option<&str> {
        self.files.get(index as usize).map(String::as_str)
    }

    /// The load naming `addr` at `time`.
    pub fn lookup(&self, addr: u64, time: u64) -> Option<&Load> {
        self.timeline
            .lookup(addr, time)
            .and_then(|s| self.loads.get(s.id as usize))
    }

    /// Every load that ever covered `addr`, whatever the time.
    pub fn loads_covering(&self, addr: u64) -> impl Iterator<Item = &Load> {
        self.timeline
            .covering(addr)
            .filter_map(|s| self.loads.get(s.id as usize))
    }

    /// Reads the records appended since the last call; `now` is the time
    /// of this read on the samples' clock. Returns the number of new loads
    /// (the tail of [`JitDump::loads`]). A missing file or an incomplete
    /// header is not an error (the runtime may not have written them yet).
    /// A refusal, a corrupt record or a read error is returned once; the
    /// dump then stops following and keeps what it read.
    pub fn poll(&mut self, now: u64) -> Result<usize, Error> {
        let since = self.last_read;
        self.last_read = now;
        if self.stopped {
            return Ok(0);
        }
        let before = self.loads.len();
        let read = self.read_new(since);
        if read.is_err() {
            self.stopped = true;
        }
        read.map(|()| self.loads.len() - before)
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn read_new(&mut self, since: u64) -> Result<(), Error> {
        if self.following.is_none() && !self.start()? {
            return Ok(());
        }
        let Some(mut f) = self.following.take() else {
            return Ok(());
        };
        match self.read_records(&mut f, since) {
            Ok(true) => {
                self.stats.closed = true;
                self.stopped = true;
                Ok(())
            }
            Ok(false) => {
                self.following = Some(f);
                self.check_size()
            }
            Err(e) => {
                self.following = Some(f);
                Err(e)
            }
        }
    }

    /// Takes the whole records `f` has now; true once the dump is closed.
    fn read_records(&mut self, f: &mut Following, since: u64) -> Result<bool, Error> {
        loop {
            let offset = f.reader.next_record_offset();
            let header = match f.reader.next_record_header() {
                Ok(Some(h)) => h,
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.io(e)),
            };
            if header.total_size < JitDumpRecordHeader::SIZE as u32
                || header.total_size > MAX_RECORD
            {
                return Err(Error::Corrupt {
                    path: self.path.clone(),
                    offset,
                    what: format!("record size {}", header.total_size),
                });
            }
            let record = match f.reader.next_record() {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(false),
                Err(e) => return Err(self.io(e)),
            };
            let time = match self.clock {
                Some(Clock::Monotonic) => record.timestamp,
                _ => since,
            };
            if self.take(&record, time) {
                return Ok(true);
            }
        }
    }

    /// Takes one record (stamped `time`): a load, a move, or the debug or
    /// unwind information of the next load; true at the dump's close.
    fn take(&mut self, record: &JitDumpRawRecord<'_>, time: u64) -> bool {
        let (body, endian) = (record.body, record.endian);
        match record.record_type {
            JitDumpRecordType::JIT_CODE_LOAD => match JitCodeLoadRecord::parse(endian, body) {
                Ok(r) => {
                    let size = r.code_bytes.len() as u64;
                    let name = String::from_utf8_lossy(&r.function_name.as_slice()).into_owned();
                    let (start, index) = (r.code_addr, r.code_index);
                    self.add_load(start, size, time, name, index);
                }
                Err(_) => self.stats.skipped += 1,
            },
            JitDumpRecordType::JIT_CODE_MOVE => match JitCodeMoveRecord::parse(endian, body) {
                Ok(r) => self.add_move(&r, time),
                Err(_) => self.stats.skipped += 1,
            },
            JitDumpRecordType::JIT_CODE_DEBUG_INFO => {
                let bytes = body.as_slice();
                match parse_debug(&bytes, &mut self.files, &mut self.file_ids) {
                    Some(d) => {
                        self.pending_lines = Some(d);
                        self.stats.debug_infos += 1;
                    }
                    None => self.stats.skipped += 1,
                }
            }
            JitDumpRecordType::JIT_CODE_UNWINDING_INFO => match parse_unwind(&body.as_slice()) {
                Some(u) => {
                    self.stats.unwind_infos += u64::from(u.is_some());
                    self.pending_unwind = u;
                }
                None => self.stats.skipped += 1,
            },
            JitDumpRecordType::JIT_CODE_CLOSE => return true,
            _ => self.stats.skipped += 1,
        }
        false
    }

    /// The file grown past its limit is refused (read no further).
    fn check_size(&self) -> Result<(), Error> {
        let size = match &self.following {
            Some(f) => f.file.metadata().map_err(|e| self.io(e))?.len(),
            None => 0,
        };
        if size > self.rules.max_len {
            return Err(Error::Refused {
                path: self.path.clone(),
                reason: Refusal::TooLarge {
                    limit: self.rules.max_len,
                },
            });
        }
        Ok(())
    }

    /// Opens the file and reads its header: false when there is no file
    /// or no whole header yet.
    fn start(&mut self) -> Result<bool, Error> {
        let file = match open::open(&self.path, self.rules) {
            Ok(f) => f,
            Err(OpenError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(OpenError::Io(e)) => return Err(self.io(e)),
            Err(OpenError::Refused(reason)) => {
                return Err(Error::Refused {
                    path: self.path.clone(),
                    reason,
                })
            }
        };
        let not = |what: String| Error::NotJitdump {
            path: self.path.clone(),
            what,
        };
        let mut head = [0u8; HEADER_LEN];
        let got = read_up_to(&file, &mut head).map_err(|e| self.io(e))?;
        if got >= 4 {
            match &head[..4] {
                b"DTiJ" => {}
                b"JiTD" => return Err(not("big-endian".into())),
                m => return Err(not(format!("magic {m:02x?}"))),
            }
        }
        if got < HEADER_LEN {
            return Ok(false);
        }
        let u32_at =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let (version, total, machine, pid) = (u32_at(4), u32_at(8), u32_at(12), u32_at(20));
        let mut flags = [0u8; 8];
        flags.copy_from_slice(&head[32..40]);
        let flags = u64::from_le_bytes(flags);
        if version != 1 {
            return Err(not(format!("version {version}")));
        }
        if !(HEADER_LEN as u32..BUFFER as u32).contains(&total) {
            return Err(not(format!("header size {total}")));
        }
        if machine != EM_X86_64 && machine != 0 {
            return Err(not(format!("ELF machine {machine}, not x86-64")));
        }
        let len = file.metadata().map_err(|e| self.io(e))?.len();
        if len < u64::from(total) {
            return Ok(false);
        }
        let stat = file.try_clone().map_err(|e| self.io(e))?;
        let capped = Capped {
            file,
            pos: 0,
            limit: self.rules.max_len,
        };
        let reader =
            JitDumpReader::new_with_buffer_size(capped, BUFFER).map_err(|e| not(e.to_string()))?;
        self.clock = Some(if flags & FLAG_ARCH_TIMESTAMP != 0 {
            Clock::ArchTimestamp
        } else {
            Clock::Monotonic
        });
        self.pid = Some(pid);
        self.following = Some(Following { reader, file: stat });
        Ok(true)
    }

    fn push(&mut self, load: Load) {
        let Ok(id) = u32::try_from(self.loads.len()) else {
            return;
        };
        self.timeline.insert(load.start, load.end, load.time, id);
        self.by_index.insert(load.code_index, id);
        self.loads.push(load);
    }

    fn add_load(&mut self, start: u64, size: u64, time: u64, name: String, code_index: u64) {
        let lines = self.pending_lines.take();
        let unwind = self.pending_unwind.take();
        let end = match start.checked_add(size) {
            Some(end) if size > 0 && size <= MAX_CODE_LEN => end,
            _ => {
                self.stats.skipped += 1;
                return;
            }
        };
        let lines = match lines {
            // Entries for this code only, in its range, sorted.
            Some((addr, entries)) if addr == start => {
                let mut l: Vec<LineEntry> = entries
                    .into_iter()
                    .filter(|&(a, _, _)| a >= start && a < end)
                    .map(|(a, line, file)| LineEntry {
                        offset: a - start,
                        line,
                        file,
                    })
                    .collect();
                l.sort_by_key(|e| e.offset);
                l
            }
            _ => Vec::new(),
        };
        let unwind = unwind.and_then(|(eh_frame, hdr)| {
            // Where the runtime encoded them for: the code's size rounded
            // up to 8 past its start.
            let eh_frame_addr = start.checked_add(size.checked_next_multiple_of(8)?)?;
            let eh_frame_hdr_addr = eh_frame_addr.checked_add(eh_frame.len() as u64)?;
            Some(UnwindInfo {
                eh_frame: Arc::new(eh_frame),
                eh_frame_addr,
                eh_frame_hdr: hdr.map(Arc::new),
                eh_frame_hdr_addr,
            })
        });
        self.stats.loads += 1;
        self.push(Load {
            start,
            end,
            time,
            name,
            code_index,
            lines,
            unwind,
        });
    }

    fn add_move(&mut self, r: &JitCodeMoveRecord, time: u64) {
        let Some(old) = self
            .by_index
            .get(&r.code_index)
            .and_then(|&i| self.loads.get(i as usize))
        else {
            self.stats.unknown_moves += 1;
            return;
        };
        let size = old.end - old.start;
        let Some(end) = r.new_code_addr.checked_add(size) else {
            self.stats.skipped += 1;
            return;
        };
        // The tables keep their place relative to the code.
        let delta = r.new_code_addr.wrapping_sub(old.start);
        let unwind = old.unwind.clone().map(|u| UnwindInfo {
            eh_frame_addr: u.eh_frame_addr.wrapping_add(delta),
            eh_frame_hdr_addr: u.eh_frame_hdr_addr.wrapping_add(delta),
            ..u
        });
        let moved = Load {
            start: r.new_code_addr,
            end,
            time,
            name: old.name.clone(),
            code_index: r.code_index,
            lines: old.lines.clone(),
            unwind,
        };
        self.stats.moves += 1;
        let old_start = old.start;
        self.timeline.end(old_start, time);
        self.push(moved);
    }
}

/// Reads up to `buf.len()` bytes from the start of `file`.
fn read_up_to(file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

mod records;
#[cfg(test)]
pub(crate) mod tests;
