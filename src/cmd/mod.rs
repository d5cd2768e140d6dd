//! One module per subcommand; each turns its clap arguments into the
//! library's plain options and reports the result.

mod agent;
mod completions;
mod diff;
mod fold;
mod info;
mod record;
mod stacks;
mod view;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use flamerec_fold::FoldOptions;

/// Sampling profiler for Linux: record kernel + user stacks, get flamegraphs.
#[derive(Debug, Parser)]
#[command(name = "flamerec", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Record a command (or running processes) into a .frec file.
    Record(record::Args),
    /// Fold a recording into stacks, an SVG flamegraph or a JSON summary.
    Fold(fold::Args),
    /// Show what a recording holds.
    Info(info::Args),
    /// Compare two profiles per function: differential SVG, JSON, Markdown, CI gate.
    Diff(diff::Args),
    /// Explore a profile (or the diff of two) in the browser: served on 127.0.0.1, or one HTML file.
    View(view::Args),
    /// Every thread's kernel and user stack now, running threads included.
    Stacks(stacks::Args),
    /// Record the whole system without end, in windows delivered to OTLP, Pyroscope or a directory.
    Agent(agent::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::Args),
}

/// An error with its own exit status (127 and 126 for launch failures, as a shell).
#[derive(Debug)]
pub struct Exit {
    /// Exit status.
    pub code: u8,
    /// The one-line message.
    pub message: String,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Record(a) => record::run(a),
        Command::Fold(a) => fold::run(a),
        Command::Agent(a) => agent::run(a),
        Command::Info(a) => info::run(a),
        Command::Diff(a) => diff::run(a),
        Command::View(a) => view::run(a),
        Command::Stacks(a) => stacks::run(a),
        Command::Completions(a) => completions::run(a),
    }
}

/// Human-readable byte count.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// How recordings are read and named: the flags fold, diff and view share.
#[derive(Debug, Clone, clap::Args)]
pub struct NamingArgs {
    /// Symbolization threads (default: all cores); a recording that names
    /// all its frames folds on one thread.
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// Keep per-binary symbol caches (keyed by build id) here
    /// [default: ~/.cache/flamerec].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Do not read or write the symbol cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
    /// Kernel symbols for perf.data: the recorded kernel's /proc/kallsyms
    /// (copied from that machine) or System.map [default: this machine's
    /// /proc/kallsyms, for a recording of the kernel running here].
    #[arg(long, value_name = "PATH")]
    kallsyms: Option<PathBuf>,
}

impl NamingArgs {
    /// The library's options for these flags, the rest default.
    pub fn options(&self) -> FoldOptions {
        let mut opts = FoldOptions {
            jobs: self.jobs.map(usize::from),
            kallsyms: self.kallsyms.clone(),
            ..FoldOptions::default()
        };
        opts.names.cache_dir = match (&self.cache_dir, self.no_cache) {
            (_, true) => None,
            (Some(dir), false) => Some(dir.clone()),
            // Without $HOME, no cache rather than one in a surprising place.
            (None, false) => flamerec_fold::default_cache_dir(),
        };
        opts
    }
}

/// Writes to `path`, or to stdout when it is `-`, naming the file in errors.
pub fn write_to(
    path: &Path,
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> anyhow::Result<()> {
    if flamerec_fold::input::is_stdin(path) {
        let mut w = BufWriter::new(io::stdout().lock());
        // A closed pipe stays an io::Error: main reports it as success.
        f(&mut w).and_then(|()| w.flush())?;
        return Ok(());
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(file);
    f(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// For the subcommands' tests: `argv` (the arguments after the
/// subcommand's name) parsed into its `Args`, as the command line would.
#[cfg(test)]
fn parse_args<A: clap::Args + clap::FromArgMatches>(argv: &[&str]) -> Result<A, clap::Error> {
    let m = A::augment_args(clap::Command::new("flamerec"))
        .try_get_matches_from(std::iter::once("flamerec").chain(argv.iter().copied()))?;
    A::from_arg_matches(&m)
}
