//! `flamerec diff`: compare two profiles (recordings or folded text) per
//! function; write a differential SVG, JSON and Markdown; gate on growth.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use flamerec_fold::diff::{self, Diff, MarkdownOptions, Side, SvgOptions};
use flamerec_fold::FoldOptions;

use super::Exit;

/// Exit status when `--fail-above` trips.
const GATE_EXIT: u8 = 3;
/// Offending functions named on stderr; the rest are counted.
const GATE_NAMES: usize = 10;

/// Arguments of `flamerec diff`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write a differential flamegraph of NEW (red grew, blue shrank).
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// Title of the SVG.
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// Write per-function shares and deltas as JSON (schema flamerec-diff/1); `-` for stdout.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write the top regressions and improvements as Markdown; `-` for stdout.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Exit with status 3 if any function's total share grew by more than PCT points.
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    fail_above: Option<f64>,
    /// Leave out functions whose total share is below PCT in both profiles
    /// (from every output and from --fail-above).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    min_share: Option<f64>,
    /// Symbolization threads for recordings (default: all cores).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    /// Keep per-binary symbol caches (keyed by build id) here
    /// [default: ~/.cache/flamerec].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Do not read or write the symbol cache.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
    /// The baseline: a recording (.frec) or folded text.
    base: PathBuf,
    /// The profile to compare against it: a recording (.frec) or folded text.
    new: PathBuf,
}

/// A percentage: a finite number from 0 to 100.
fn parse_pct(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a percentage (a number from 0 to 100)"
        )),
    }
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = FoldOptions {
        jobs: a.jobs.map(usize::from),
        cache_dir: match (&a.cache_dir, a.no_cache) {
            (_, true) => None,
            (Some(dir), false) => Some(dir.clone()),
            (None, false) => flamerec_fold::default_cache_dir(),
        },
        ..FoldOptions::default()
    };
    let base = load(&a.base, &opts)?;
    let new = load(&a.new, &opts)?;
    let mut d = Diff::new(&base, &new);
    if let Some(min) = a.min_share {
        d.retain_min_share(min);
    }

    let base_label = a.base.display().to_string();
    let new_label = a.new.display().to_string();
    if let Some(path) = &a.svg {
        let opts = SvgOptions {
            title: a
                .title
                .clone()
                .unwrap_or_else(|| SvgOptions::default().title),
            base_label: base_label.clone(),
            new_label: new_label.clone(),
        };
        write_to(path, |w| diff::write_diff_svg(&base, &new, &d, &opts, w))?;
    }
    if let Some(path) = &a.json {
        write_to(path, |w| diff::write_diff_json(&d, w))?;
    }
    let md_opts = MarkdownOptions {
        base_label,
        new_label,
        fail_above: a.fail_above,
        min_share: a.min_share,
        ..MarkdownOptions::default()
    };
    match &a.markdown {
        Some(path) => write_to(path, |w| diff::write_diff_markdown(&d, &md_opts, w))?,
        // With no output asked for, the report goes to the terminal.
        None if a.svg.is_none() && a.json.is_none() => write_to(Path::new("-"), |w| {
            diff::write_diff_markdown(&d, &md_opts, w)
        })?,
        None => {}
    }

    if let Some(limit) = a.fail_above {
        let grew = d.grew_more_than(limit);
        if !grew.is_empty() {
            let mut names: Vec<String> = grew
                .iter()
                .take(GATE_NAMES)
                .map(|f| format!("{} ({:+.2})", f.name, f.total_delta_pct))
                .collect();
            if grew.len() > GATE_NAMES {
                names.push(format!("and {} more", grew.len() - GATE_NAMES));
            }
            let what = if grew.len() == 1 {
                "1 function's".to_string()
            } else {
                format!("{} functions'", grew.len())
            };
            return Err(Exit {
                code: GATE_EXIT,
                message: format!(
                    "{what} total share grew by more than {limit} points: {}",
                    names.join(", ")
                ),
            }
            .into());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Loads one side with its warnings shown on stderr.
fn load(path: &Path, opts: &FoldOptions) -> anyhow::Result<Side> {
    let side = Side::load(path, opts)?; // DiffError messages name the file.
    for w in &side.warnings {
        eprintln!("flamerec: warning: {}: {w}", path.display());
    }
    Ok(side)
}

/// Writes to `path`, or to stdout when it is `-`.
fn write_to(path: &Path, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> anyhow::Result<()> {
    if path == Path::new("-") {
        let mut w = BufWriter::new(io::stdout().lock());
        f(&mut w).and_then(|()| w.flush())?;
        return Ok(());
    }
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(file);
    f(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write {}", path.display()))
}
