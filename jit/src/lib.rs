//! JIT code of one process, from the files its runtime writes: perf maps
//! (`/tmp/perf-PID.map`) and jitdumps (`jit-PID.dump`), each followed while
//! it grows and looked up by (address, time), because JIT code is freed and
//! its addresses reused while the process runs.
//!
//! The crate owns reading those files safely (they belong to another user
//! and sit in shared directories: see [`Rules`]), the time rule of each
//! (see [`PerfMap`] and [`JitDump`]) and, per jitdump load, its name, source
//! lines and unwind tables (`.eh_frame`) for the unwinder. It takes every
//! time from its caller on the samples' clock (CLOCK_MONOTONIC ns) and reads
//! no clock itself. It does not find the files (the recorder knows the
//! runtime's mmap of its jitdump and the pid of its map), does not unwind
//! and never treats a dump's code bytes as the process's live code: a
//! dump is a claim by the process, not its memory.
//!
//! No unsafe code; every length in a file is checked against what is left
//! before it is used, so a hostile file costs at most its (bounded) size.
#![forbid(unsafe_code)]

mod jitdump;
mod open;
mod perfmap;
mod timeline;

use std::path::PathBuf;

pub use jitdump::{Clock, DumpStats, JitDump, LineEntry, Load, UnwindInfo};
pub use open::{process_start, process_uid, Rules};
pub use perfmap::{MapEntry, MapStats, PerfMap};

/// The longest code range taken from a map line or a load: longer ones are
/// corrupt, and would make every lookup near them slow.
pub const MAX_CODE_LEN: u64 = 256 << 20;

/// Why a file was not read, to be said once to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The path names a symbolic link.
    #[error("a symbolic link")]
    SymbolicLink,
    /// A FIFO, socket, device or directory.
    #[error("not a regular file")]
    NotRegular,
    /// Owned by someone other than the process's user and root.
    #[error("owned by uid {owner}, not the process's uid {expected}")]
    WrongOwner {
        /// The file's owner.
        owner: u32,
        /// The process's effective uid.
        expected: u32,
    },
    /// Last written before the process started: left by an earlier
    /// process with the same pid.
    #[error("older than the process (left by an earlier process with its pid)")]
    Stale,
    /// Larger than the limit (read up to it when it grew past it).
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: u64,
    },
}

/// Errors reading a perf map or a jitdump.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file broke one of the [`Rules`].
    #[error("{}: not read: {reason}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: Refusal,
    },
    /// The system refused a read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// Not a jitdump this reader takes (magic, version, byte order, machine).
    #[error("{}: not a jitdump flamerec reads: {what}", path.display())]
    NotJitdump {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// A record that cannot be right; what came before it is kept.
    #[error("{}: corrupt record at offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// What was wrong.
        what: String,
    },
}
