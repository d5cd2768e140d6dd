//! Errors that stop folding altogether.
//!
//! Damage inside a recording (truncated, a corrupt chunk) is not an error:
//! folding goes on with the complete prefix and reports it in
//! [`crate::Profile::damage`]. Missing binaries are not errors either: their
//! frames print as `module+0xOFFSET` and a warning says how many.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Why a recording could not be folded at all. Each renders as one line.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FoldError {
    /// The input file could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The input path.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Reading the input failed after it was opened.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The input path.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A line of folded text is not `frame;...;leaf COUNT`.
    #[error("{}:{line}: {reason}", path.display())]
    Folded {
        /// The input path.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
    /// The input is not a readable `.frec` recording (wrong magic, unknown
    /// version, no metadata) or reading it failed.
    #[error("{}: {source}", path.display())]
    Format {
        /// The input path.
        path: PathBuf,
        /// What the format reader said.
        source: flamerec_format::FormatError,
    },
    /// The input is empty: neither a recording nor folded stacks.
    #[error("{} is empty: neither a recording nor folded stacks", path.display())]
    Empty {
        /// The input path.
        path: PathBuf,
    },
    /// An option asks for something folded text does not carry.
    #[error("{}: {what}: folded text carries no process ids, thread ids or inlining; give a recording instead", path.display())]
    Unsupported {
        /// The input path.
        path: PathBuf,
        /// The option that cannot apply.
        what: &'static str,
    },
    /// The input starts like a `perf.data` file but cannot be imported.
    #[error("{}: not a readable perf.data file: {reason}", path.display())]
    PerfData {
        /// The input path.
        path: PathBuf,
        /// What the perf.data parser said.
        reason: String,
    },
    /// Recordings merged into one profile measured different things.
    #[error("{first} records {first_event} and {other} records {other_event}: only recordings of one event merge")]
    Mismatch {
        /// The first recording.
        first: String,
        /// Its event.
        first_event: String,
        /// The one that differs.
        other: String,
        /// Its event.
        other_event: String,
    },
    /// The symbolization thread pool could not be started.
    #[error("cannot start {jobs} symbolization threads: {reason}")]
    ThreadPool {
        /// Threads asked for (0: one per core).
        jobs: usize,
        /// What rayon said.
        reason: String,
    },
}
