//! `flamerec fold`: recordings, perf.data or folded text (files or standard
//! input) → folded stacks, SVG, JSON summary, and the exports (pprof,
//! speedscope, Firefox Profiler; folded text has no times for the last two).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use flamerec_fold::export;
use flamerec_fold::input::{self, Input, InputKind};
use flamerec_fold::{FoldOptions, FoldProgress, Phase, Profile};

use super::write_to;

/// Arguments of `flamerec fold`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write folded text here instead of stdout.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Write an SVG flamegraph.
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// Title of the SVG.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// Write the JSON summary (schema flamerec-summary/1).
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write a gzipped pprof profile (go tool pprof, Pyroscope, Parca, Grafana).
    #[arg(long, value_name = "PATH")]
    pprof: Option<PathBuf>,
    /// Write a speedscope file (one time-ordered profile per thread).
    #[arg(long, value_name = "PATH")]
    speedscope: Option<PathBuf>,
    /// Write a Firefox Profiler profile (gzipped JSON, one track per thread).
    #[arg(long, value_name = "PATH")]
    firefox: Option<PathBuf>,
    /// Root frame is `comm-PID`.
    #[arg(long)]
    per_process: bool,
    /// Root frame is `comm-PID/TID`.
    #[arg(long, conflicts_with = "per_process")]
    per_thread: bool,
    /// Outermost frame is the sample's container (`podman:0123456789ab`, or
    /// `host`).
    #[arg(long)]
    container: bool,
    /// Keep only this process (repeatable).
    #[arg(long, value_name = "PID")]
    pid: Vec<u32>,
    /// Keep only this thread (repeatable).
    #[arg(long, value_name = "TID")]
    tid: Vec<u32>,
    /// Keep only threads or processes with this name (repeatable).
    #[arg(long, value_name = "NAME")]
    comm: Vec<String>,
    /// Do not expand inlined frames.
    #[arg(long)]
    no_inline: bool,
    /// Append `_[k]` to kernel frames.
    #[arg(long)]
    kernel_suffix: bool,
    #[command(flatten)]
    naming: super::NamingArgs,
    /// Ignore the names embedded in the recording and read the binaries again.
    #[arg(long)]
    resymbolize: bool,
    /// The inputs: .frec recordings, perf.data (file or pipe mode) or folded text, `-` for
    /// standard input; several (runs, hosts, kinds) fold into one profile.
    #[arg(required = true, num_args = 1..)]
    inputs: Vec<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&a);
    let mut profiles = Vec::with_capacity(a.inputs.len());
    let mut folded_text = None;
    for path in &a.inputs {
        let input = input::open(path)?;
        let label = input.label().display().to_string();
        if input.kind() == InputKind::FoldedText {
            if a.speedscope.is_some() || a.firefox.is_some() {
                bail!(
                    "{label} is folded text, which has no time axis or threads: \
                     --speedscope and --firefox need a recording (.frec or perf.data)"
                );
            }
            folded_text.get_or_insert_with(|| label.clone());
        }
        profiles.push((label, fold(input, &opts)?));
    }
    let profile = flamerec_fold::merge_profiles(profiles)?;
    if let Some(path) = &a.pprof {
        // Folded text has no samples to keep: its stacks are the profile.
        match folded_text {
            Some(_) => {
                let stacks: Vec<(String, u64)> = profile
                    .stacks
                    .iter()
                    .map(|(line, w)| (line.into_owned(), w))
                    .collect();
                write_to(path, |w| export::write_pprof_folded(&stacks, w))?
            }
            None => write_to(path, |w| export::write_pprof(&profile, w))?,
        }
    }
    if let Some(path) = &a.speedscope {
        write_to(path, |w| export::write_speedscope(&profile, w))?;
    }
    if let Some(path) = &a.firefox {
        write_to(path, |w| export::write_firefox(&profile, w))?;
    }
    if let Some(svg) = &a.svg {
        write_to(svg, |w| {
            flamerec_fold::write_svg(&profile, a.title.as_deref(), w)
        })?;
    }
    if let Some(json) = &a.json {
        write_to(json, |w| flamerec_fold::write_json_summary(&profile, w))?;
    }
    match &a.output {
        Some(path) => write_to(path, |w| flamerec_fold::write_folded(&profile, w))?,
        // With only file outputs asked for, stdout stays quiet.
        None if a.svg.is_some() || a.json.is_some() || a.exports() => {}
        None => write_to(Path::new("-"), |w| flamerec_fold::write_folded(&profile, w))?,
    }
    // The process ends next and the OS takes the memory back at once:
    // freeing a profile's names one by one (tens of thousands for a
    // frame-pointer recording of code built without them) was 4% of a fold.
    std::mem::forget(profile);
    Ok(ExitCode::SUCCESS)
}

impl Args {
    /// Whether any export is asked for.
    fn exports(&self) -> bool {
        self.pprof.is_some() || self.speedscope.is_some() || self.firefox.is_some()
    }
}

/// The library's options for these arguments.
fn options(a: &Args) -> FoldOptions {
    let mut opts = FoldOptions {
        per_process: a.per_process,
        per_thread: a.per_thread,
        container: a.container,
        pids: a.pid.clone(),
        tids: a.tid.clone(),
        comms: a.comm.clone(),
        resymbolize: a.resymbolize,
        keep_samples: a.exports(),
        ..a.naming.options()
    };
    opts.names.kernel_suffix = a.kernel_suffix;
    opts.names.inline = !a.no_inline;
    opts
}

/// A progress line on stderr for folds that run longer than a second
/// (only when stderr is a terminal), cleared when the fold ends.
fn show_progress(p: &FoldProgress, done: &AtomicBool) {
    let started = Instant::now();
    let mut shown = false;
    while !done.load(Ordering::Relaxed) {
        std::thread::park_timeout(Duration::from_millis(100));
        if started.elapsed() < Duration::from_secs(1) || done.load(Ordering::Relaxed) {
            continue;
        }
        let what = match p.phase() {
            Phase::Reading => format!(
                "reading: {} samples, {}",
                p.samples(),
                super::human_bytes(p.bytes())
            ),
            Phase::Symbolizing => format!("naming {} distinct frames", p.frames()),
            _ => "building stacks".to_string(),
        };
        eprint!(
            "\rflamerec: folding… {what}, {:.1} s\x1b[K",
            started.elapsed().as_secs_f64()
        );
        shown = true;
    }
    if shown {
        eprint!("\r\x1b[K");
    }
}

/// Folds with warnings shown on stderr.
fn fold(input: Input, opts: &FoldOptions) -> anyhow::Result<Profile> {
    let label = input.label().to_path_buf();
    let progress = FoldProgress::default();
    let done = AtomicBool::new(false);
    let profile = std::thread::scope(|s| {
        let shower = std::io::stderr()
            .is_terminal()
            .then(|| s.spawn(|| show_progress(&progress, &done)));
        let p = flamerec_fold::fold_input(input, opts, &progress);
        done.store(true, Ordering::Relaxed);
        // Woken at once, so a short fold does not wait for the next tick.
        if let Some(h) = shower {
            h.thread().unpark();
        }
        p
    })?; // FoldError messages name the file.
    if let Some(d) = &profile.damage {
        eprintln!("flamerec: warning: {}: {d}", label.display());
    }
    for w in &profile.warnings {
        eprintln!("flamerec: warning: {w}");
    }
    Ok(profile)
}

/// Folds `input` and writes an SVG flamegraph to `svg` (for `record --svg`).
pub fn write_svg_of(input: &Path, svg: &Path, title: Option<&str>) -> anyhow::Result<()> {
    let mut opts = FoldOptions::default();
    opts.names.cache_dir = flamerec_fold::default_cache_dir();
    let profile = fold(input::open(input)?, &opts)?;
    write_to(svg, |w| flamerec_fold::write_svg(&profile, title, w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<FoldOptions, clap::Error> {
        let args: Args = super::super::parse_args(argv)?;
        Ok(options(&args))
    }

    #[test]
    fn cache_flags_choose_the_directory() {
        let o = parse(&["--cache-dir", "/x/c", "in.frec"]).expect("parse");
        assert_eq!(o.names.cache_dir, Some(PathBuf::from("/x/c")));
        let o = parse(&["--no-cache", "in.frec"]).expect("parse");
        assert_eq!(o.names.cache_dir, None);
        let o = parse(&["in.frec"]).expect("parse");
        assert_eq!(o.names.cache_dir, flamerec_fold::default_cache_dir());
        assert!(parse(&["--no-cache", "--cache-dir", "/x", "in.frec"]).is_err());
    }

    #[test]
    fn no_inline_and_jobs_reach_the_options() {
        let o = parse(&["--no-inline", "-j", "2", "in.frec"]).expect("parse");
        assert!(!o.names.inline);
        assert_eq!(o.jobs, Some(2));
        assert!(parse(&["-j", "0", "in.frec"]).is_err());
    }

    #[test]
    fn exports_keep_samples_and_folding_alone_does_not() {
        assert!(!parse(&["in.frec"]).expect("parse").keep_samples);
        assert!(
            !parse(&["--svg", "x.svg", "in.frec"])
                .expect("parse")
                .keep_samples
        );
        for flag in ["--pprof", "--speedscope", "--firefox"] {
            let o = parse(&[flag, "out", "in.frec"]).expect("parse");
            assert!(o.keep_samples, "{flag}");
        }
    }
}
