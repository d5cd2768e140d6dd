//! Folding: `.frec` recording (or `perf.data`, imported into one) →
//! symbolized, aggregated [`Profile`] → folded text, SVG flamegraph and JSON
//! summary.
//!
//! [`fold_recording`] streams the file once, summing sample weights per
//! (root frame, stack) without keeping samples, then symbolizes only the
//! distinct frames those stacks use, in parallel across and within binaries.
//! DWARF is read only as far as those frames need (`flamerec_symbolize`), and
//! the biggest debug info starts inflating while the file is still being read
//! (`flamerec_symbolize::Prefetch`).
//! The writers in this crate format the result; the CLI decides where it goes
//! and prints [`Profile::damage`] and [`Profile::warnings`].
//!
//! Modules: [`input`] (opening a path or standard input and telling a
//! recording, perf.data in file or pipe mode and folded text apart; the
//! folded-text reader), `aggregate` (event stream, thread names, filters), `perfdata`
//! (perf.data import), `profile` (stacks and function totals), `output`
//! (writers), [`export`] (pprof, speedscope and Firefox Profiler files, from
//! the samples [`FoldOptions::keep_samples`] keeps). Names come from the `flamerec-symbolize` crate (symbol tables,
//! DWARF inlined frames, separate debug files, the on-disk symbol cache, JIT
//! maps, kernel symbols, and the spelling rules of folded text). This crate never depends on the recorder and
//! never calls into Linux beyond reading files (`/proc/kallsyms` for
//! perf.data input).
#![forbid(unsafe_code)]

mod aggregate;
pub mod diff;
mod error;
pub mod export;
pub mod input;
mod lines;
mod merge;
mod output;
mod perfdata;
mod profile;
mod progress;

use std::io::{BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use flamerec_format::Reader;
use flamerec_symbolize as symbolize;

pub use error::FoldError;
pub use flamerec_symbolize::NameOptions;
use input::{Input, InputKind};
pub use lines::Stacks;
pub use merge::merge_profiles;
pub use output::{write_folded, write_json_summary, write_svg, SUMMARY_SCHEMA};
pub use profile::{FunctionStats, ProcessStats, Profile};
pub use progress::{FoldProgress, Phase};

/// How to fold a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoldOptions {
    /// Root frame `comm-PID` (the process's name) instead of the thread's name.
    pub per_process: bool,
    /// Root frame `comm-PID/TID` (the thread's name); wins over `per_process`.
    pub per_thread: bool,
    /// Each sample's container as its outermost frame, above the root:
    /// `podman:0123456789ab` (runtime, the id's first 12 digits), `host`,
    /// or `unknown` for a process the recording did not identify.
    pub container: bool,
    /// Keep only samples of these processes (empty: all).
    pub pids: Vec<u32>,
    /// Keep only samples of these threads (empty: all).
    pub tids: Vec<u32>,
    /// Keep only samples whose thread or process has one of these names (empty: all).
    pub comms: Vec<String>,
    /// How frames are named: `_[k]` on kernel frames (`stackcollapse-perf
    /// --kernel`), inlined functions expanded (default), the symbol cache
    /// (none here; the CLI uses [`default_cache_dir`]), roots of separate
    /// debug files, and where `perf-PID.map` files are read (default
    /// `/tmp`). The processes whose maps are read are the recording's.
    pub names: NameOptions,
    /// Symbolization threads; `None` uses every core.
    pub jobs: Option<usize>,
    /// Kernel symbols for perf.data input (which carries none): that
    /// kernel's kallsyms or System.map. `None` (the default) reads this
    /// machine's `/proc/kallsyms` for a recording of the kernel running
    /// here, and names no kernel frame of a recording of another kernel.
    pub kallsyms: Option<PathBuf>,
    /// Ignore the names a recording embeds and read the binaries again.
    pub resymbolize: bool,
    /// Also keep every sample that passes the filters (time, thread,
    /// stack, weight: 24 bytes each) in [`Profile::timeline`], for the
    /// [`export`] writers. Off by default: folding alone needs memory for
    /// distinct stacks only.
    pub keep_samples: bool,
}

impl Default for FoldOptions {
    fn default() -> Self {
        FoldOptions {
            per_process: false,
            per_thread: false,
            container: false,
            pids: Vec::new(),
            tids: Vec::new(),
            comms: Vec::new(),
            names: NameOptions {
                perf_map_dir: Some(PathBuf::from("/tmp")),
                ..NameOptions::default()
            },
            jobs: None,
            kallsyms: None,
            resymbolize: false,
            keep_samples: false,
        }
    }
}

/// Reads the input at `path` (`-`: standard input) and folds it: a `.frec`
/// recording, perf.data in file or pipe mode, or folded text, told apart
/// by their first bytes ([`input`]).
///
/// A truncated or damaged recording is not an error: the profile holds its
/// complete chunks and says why it stopped in [`Profile::damage`].
pub fn fold_recording(path: &Path, opts: &FoldOptions) -> Result<Profile, FoldError> {
    fold_recording_with_progress(path, opts, &FoldProgress::default())
}

/// [`fold_recording`], keeping `progress` up to date for a caller that
/// shows it (from another thread) while a long fold runs.
pub fn fold_recording_with_progress(
    path: &Path,
    opts: &FoldOptions,
    progress: &FoldProgress,
) -> Result<Profile, FoldError> {
    fold_input(input::open(path)?, opts, progress)
}

/// Folds an input already opened (and so judged) by [`input::open`].
///
/// Folded text becomes a profile of its stacks (no times, threads or
/// modules); its roots are kept as they are, `opts.comms` keeps the roots
/// it names, and the options it cannot honour (`pids`, `tids`, no inlining)
/// are [`FoldError::Unsupported`].
pub fn fold_input(
    input: Input,
    opts: &FoldOptions,
    progress: &FoldProgress,
) -> Result<Profile, FoldError> {
    let path = input.label().to_path_buf();
    let format_err = |source| FoldError::Format {
        path: path.clone(),
        source,
    };
    match input.kind() {
        InputKind::FoldedText => fold_text(input, opts),
        InputKind::PerfData | InputKind::PerfPipe => {
            let imported = perfdata::import(input, opts.kallsyms.as_deref())?;
            let reader = Reader::new(Cursor::new(imported.bytes)).map_err(format_err)?;
            let mut profile = fold_reader(reader, &path, opts, progress)?;
            profile.warnings.splice(0..0, imported.warnings);
            Ok(profile)
        }
        InputKind::Recording => {
            let stream = BufReader::with_capacity(1 << 20, input.into_reader());
            let reader = Reader::new(stream).map_err(format_err)?;
            fold_reader(reader, &path, opts, progress)
        }
    }
}

/// Folds a `.frec` recording held in memory (`label` names it in errors).
pub fn fold_bytes(bytes: &[u8], label: &Path, opts: &FoldOptions) -> Result<Profile, FoldError> {
    let reader = Reader::new(bytes).map_err(|source| FoldError::Format {
        path: label.to_path_buf(),
        source,
    })?;
    fold_reader(reader, label, opts, &FoldProgress::default())
}

/// perf.data (file or pipe mode) imported as it is for folding: a `.frec`
/// recording in memory, and the warnings of its import (another kernel, a
/// damaged tail), one line each. For `flamerec info`.
pub fn import_perf_data(
    input: Input,
    kallsyms: Option<&Path>,
) -> Result<(Vec<u8>, Vec<String>), FoldError> {
    let imported = perfdata::import(input, kallsyms)?;
    Ok((imported.bytes, imported.warnings))
}

/// Folded text as a profile, with the filters it can honour applied.
fn fold_text(input: Input, opts: &FoldOptions) -> Result<Profile, FoldError> {
    let path = input.label().to_path_buf();
    let unsupported = |what| FoldError::Unsupported {
        path: path.clone(),
        what,
    };
    if !opts.pids.is_empty() {
        return Err(unsupported("--pid"));
    }
    if !opts.tids.is_empty() {
        return Err(unsupported("--tid"));
    }
    if !opts.names.inline {
        return Err(unsupported("--no-inline"));
    }
    let mut stacks = input.into_folded()?;
    if !opts.comms.is_empty() {
        stacks.retain(|(line, _)| {
            let root = line.split(';').next().unwrap_or_default();
            opts.comms.iter().any(|c| c == root)
        });
    }
    Ok(profile::from_folded(stacks))
}

fn fold_reader<R: Read>(
    mut reader: Reader<R>,
    path: &Path,
    opts: &FoldOptions,
    progress: &FoldProgress,
) -> Result<Profile, FoldError> {
    let format_err = |source| FoldError::Format {
        path: path.to_path_buf(),
        source,
    };
    let jobs = opts.jobs.unwrap_or(0);
    // Names embedded by the recorder make reading debug info ahead moot.
    let expect_names = reader.metadata().embeds_names && !opts.resymbolize;
    // Without names in the file, the pool comes first: it inflates debug
    // info ahead while the file is read. With them, it may not be needed.
    let mut pool = if expect_names {
        None
    } else {
        Some(thread_pool(jobs)?)
    };
    let mut prefetch: Option<symbolize::Prefetch> = None;
    let mut aggregator = aggregate::Aggregator::new(opts);
    while let Some(events) = reader.next_events().map_err(format_err)? {
        // The first chunk that has frames (the first one holds metadata only).
        if let (None, Some(pool)) = (&prefetch, &pool) {
            if !reader.tables().frames.is_empty() {
                prefetch = Some(start_prefetch(pool, reader.tables(), opts));
            }
        }
        aggregator.feed(events);
        progress.read(reader.offset(), aggregator.samples());
    }
    let agg = aggregator.finish();
    let lost_in_stream = agg.lost;
    let last_sample_ns = agg.last_time_ns;

    let mut pids: Vec<u32> = agg.processes.keys().copied().collect();
    pids.sort_unstable();
    let names = symbolize::NameOptions {
        pids,
        ..opts.names.clone()
    };
    let tables = reader.tables();
    let prefetch = prefetch.unwrap_or_default();
    let embedded = reader.names();
    let use_embedded = !opts.resymbolize && !embedded.frames.is_empty();
    let embedded_frames = use_embedded.then_some(&embedded.frames);
    let used = profile::used_frames(tables, agg.counts.keys().map(|&(_, s)| s));
    // Threads pay off for reading binaries and for big profiles only; a
    // recording that names its frames folds faster on this thread alone
    // (measured in docs/design-notes.md, "Folding on one thread").
    let parallel = symbolize::reads_binaries(tables, &used, embedded_frames)
        || agg.counts.len() >= PARALLEL_FOLD;
    let build = |parallel| {
        let naming = profile::Naming {
            opts: &names,
            prefetch: &prefetch,
            embedded: embedded_frames,
        };
        profile::build(tables, agg, &used, naming, parallel, progress)
    };
    let mut profile = if parallel {
        let pool = match pool.take() {
            Some(p) => p,
            None => thread_pool(jobs)?,
        };
        pool.install(|| build(true))
    } else {
        build(false)
    };
    progress.enter(Phase::Done);
    drop(prefetch);
    if let (Some(why), false) = (&embedded.damage, opts.resymbolize) {
        profile.warnings.insert(
            0,
            format!("the names embedded in the recording are {why}; names it lacks come from the binaries"),
        );
    }

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

/// Distinct (root, stack) pairs from which a fold whose names need no
/// binary still shares its work between threads.
const PARALLEL_FOLD: usize = 1 << 17;

/// The pool symbolization and folding share (`jobs` 0: one thread per core).
fn thread_pool(jobs: usize) -> Result<rayon::ThreadPool, FoldError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("flamerec-fold-{i}"))
        .build()
        .map_err(|e| FoldError::ThreadPool {
            jobs,
            reason: e.to_string(),
        })
}

/// The default symbol cache directory, `$HOME/.cache/flamerec`, or `None`
/// when `$HOME` is unset or empty.
pub fn default_cache_dir() -> Option<PathBuf> {
    symbolize::default_cache_dir()
}

/// Starts inflating ahead the debug info of the sampled binaries in
/// `tables` (as of the first chunk that names any), unless there is nothing
/// to gain: no inlined frames wanted, or one thread only.
fn start_prefetch(
    pool: &rayon::ThreadPool,
    tables: &flamerec_format::Tables,
    opts: &FoldOptions,
) -> symbolize::Prefetch {
    if !opts.names.inline || pool.current_num_threads() < 2 {
        return symbolize::Prefetch::default();
    }
    let cache = opts
        .names
        .cache_dir
        .clone()
        .map(symbolize::SymbolCache::new);
    let mut sampled = vec![false; tables.modules.len()];
    for f in &tables.frames {
        if let Some(s) = sampled.get_mut(f.module as usize) {
            *s = true;
        }
    }
    let build_ids = tables
        .modules
        .iter()
        .zip(sampled)
        .filter(|&(_, sampled)| sampled)
        .map(|(m, _)| m)
        .filter(|m| m.kind == flamerec_format::ModuleKind::File && !m.build_id.is_empty())
        .filter(|m| !cache.as_ref().is_some_and(|c| c.has(&m.build_id)))
        .map(|m| m.build_id.clone())
        .collect();
    symbolize::Prefetch::start(pool, build_ids, opts.names.debug_dirs.clone())
}
