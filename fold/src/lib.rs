//! Folding: `.frec` recording → symbolized, aggregated [`Profile`] → folded
//! text, SVG flamegraph and JSON summary.
//!
//! [`fold_recording`] streams the file once, summing sample weights per
//! (root frame, stack) without keeping samples, then symbolizes only the
//! distinct frames those stacks use, in parallel across and within binaries.
//! The writers in this crate format the result; the CLI decides where it goes
//! and prints [`Profile::damage`] and [`Profile::warnings`].
//!
//! Modules: `aggregate` (event stream, thread names, filters), `symbolize`
//! (ELF and kernel symbols), `profile` (stacks and function totals), `names`
//! (spelling rules of folded text), `output` (writers). This crate never
//! depends on the recorder and never calls into Linux beyond reading files.
#![forbid(unsafe_code)]

mod aggregate;
mod error;
mod names;
mod output;
mod profile;
mod symbolize;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use flamerec_format::{FormatError, Reader};

pub use error::FoldError;
pub use output::{write_folded, write_json_summary, write_svg, SUMMARY_SCHEMA};
pub use profile::{FunctionStats, ProcessStats, Profile};

/// How to fold a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldOptions {
    /// Root frame `comm-PID` (the process's name) instead of the thread's name.
    pub per_process: bool,
    /// Root frame `comm-PID/TID` (the thread's name); wins over `per_process`.
    pub per_thread: bool,
    /// Keep only samples of these processes (empty: all).
    pub pids: Vec<u32>,
    /// Keep only samples of these threads (empty: all).
    pub tids: Vec<u32>,
    /// Keep only samples whose thread or process has one of these names (empty: all).
    pub comms: Vec<String>,
    /// Append `_[k]` to kernel frames, as `stackcollapse-perf --kernel` does.
    pub kernel_suffix: bool,
    /// Expand inlined functions into frames of their own (default).
    ///
    /// Not implemented yet: symbols come from symbol tables only, so each
    /// frame names the function that holds its code. The symbolizer already
    /// maps a frame to a list of functions, which is where inlined frames will go.
    pub inline: bool,
    /// Symbolization threads; `None` uses every core.
    pub jobs: Option<usize>,
}

impl Default for FoldOptions {
    fn default() -> Self {
        FoldOptions {
            per_process: false,
            per_thread: false,
            pids: Vec::new(),
            tids: Vec::new(),
            comms: Vec::new(),
            kernel_suffix: false,
            inline: true,
            jobs: None,
        }
    }
}

/// Reads the recording at `path` and folds it.
///
/// A truncated or damaged recording is not an error: the profile holds its
/// complete chunks and says why it stopped in [`Profile::damage`].
pub fn fold_recording(path: &Path, opts: &FoldOptions) -> Result<Profile, FoldError> {
    let file = File::open(path).map_err(|source| FoldError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let format_err = |source| FoldError::Format {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = match Reader::new(BufReader::with_capacity(1 << 20, file)) {
        Ok(r) => r,
        Err(FormatError::NotFrec) if is_perf_data(path) => {
            return Err(FoldError::PerfData {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(format_err(e)),
    };

    let mut aggregator = aggregate::Aggregator::new(opts);
    while let Some(events) = reader.next_events().map_err(format_err)? {
        aggregator.feed(events);
    }
    let agg = aggregator.finish();
    let lost_in_stream = agg.lost;
    let last_sample_ns = agg.last_time_ns;

    let jobs = opts.jobs.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("flamerec-fold-{i}"))
        .build()
        .map_err(|e| FoldError::ThreadPool {
            jobs,
            reason: e.to_string(),
        })?;
    let names = symbolize::NameOptions {
        kernel_suffix: opts.kernel_suffix,
    };
    let tables = reader.tables();
    let mut profile = pool.install(|| profile::build(tables, agg, names));

    profile.metadata = reader.metadata().clone();
    profile.totals = reader.totals().cloned();
    profile.damage = reader.damage().cloned();
    match &profile.totals {
        Some(t) => {
            profile.lost_samples = t.lost_samples;
            profile.duration_ns = t.duration_ns;
        }
        None => {
            profile.lost_samples = lost_in_stream;
            profile.duration_ns = last_sample_ns;
        }
    }
    Ok(profile)
}

/// Whether the file starts with the perf.data magic.
fn is_perf_data(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"PERFILE2"
}
