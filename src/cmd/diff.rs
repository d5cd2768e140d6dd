//! `flamerec diff`: compare two profiles (recordings or folded text, one or
//! several runs each) per function; write a differential SVG, JSON and
//! Markdown; gate on growth beyond noise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flamerec_fold::diff::{
    self, Diff, DiffOptions, Gate, MarkdownOptions, Side, SvgOptions, Trip, DEFAULT_RUN_SPREAD,
};
use flamerec_fold::FoldOptions;

use super::{write_to, Exit};

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
    /// Write per-function times, shares, changes with intervals and verdicts as JSON
    /// (schema flamerec-diff/1); `-` for stdout.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Write the top regressions and improvements as Markdown; `-` for stdout.
    #[arg(long, value_name = "PATH")]
    markdown: Option<PathBuf>,
    /// Exit with status 3 if any function's total share grew by more than PCT points
    /// and by more than noise explains.
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    fail_above: Option<f64>,
    /// Exit with status 3 if any function's total CPU time grew by more than PCT percent
    /// and by more than noise explains (recordings of a clock event or off-CPU).
    #[arg(long, value_name = "PCT", value_parser = parse_growth)]
    fail_time_above: Option<f64>,
    /// The spread of the program's time between runs to assume when no side has two
    /// runs, in percent [default: 5].
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    run_spread: Option<f64>,
    /// Count samples taken in interrupt context (timer ticks, IPIs, preemption) as the
    /// program's instead of leaving them out.
    #[arg(long)]
    keep_interrupts: bool,
    /// List every row in the Markdown tables: no cap at 10, and functions within noise
    /// and below the comparison's resolution not folded into one line (JSON always
    /// lists every function).
    #[arg(long)]
    all_rows: bool,
    /// Leave out functions whose total share is below PCT in both profiles
    /// (from every output and from --fail-above).
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    min_share: Option<f64>,
    #[command(flatten)]
    naming: super::NamingArgs,
    /// Baseline runs: recordings (.frec, perf.data) or folded text, `-` for standard input;
    /// several are one side measured several times.
    #[arg(long = "base", value_name = "BASE", num_args = 1.., conflicts_with = "inputs", requires = "new_runs")]
    base_runs: Vec<PathBuf>,
    /// Runs to compare against them.
    #[arg(long = "new", value_name = "NEW", num_args = 1.., conflicts_with = "inputs", requires = "base_runs")]
    new_runs: Vec<PathBuf>,
    /// BASE and NEW, one run each (or use --base and --new for several).
    #[arg(value_name = "BASE NEW", num_args = 2)]
    inputs: Vec<PathBuf>,
}

/// A growth in percent: a finite number from 0 to 1000.
fn parse_growth(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=1000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{s}` is not a growth in percent (a number from 0 to 1000)"
        )),
    }
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
    let opts = a.naming.options();
    let (base_paths, new_paths) = match a.inputs.as_slice() {
        [base, new] => (vec![base.clone()], vec![new.clone()]),
        [] if !a.base_runs.is_empty() && !a.new_runs.is_empty() => {
            (a.base_runs.clone(), a.new_runs.clone())
        }
        _ => anyhow::bail!("give BASE and NEW, or --base BASE... --new NEW..."),
    };
    let base = load(&base_paths, &opts)?;
    let new = load(&new_paths, &opts)?;
    diff::check_comparable(&base, &new)?;
    let gate = Gate {
        share_pts: a.fail_above,
        time_pct: a.fail_time_above,
    };
    let mut d = Diff::compare(
        &base,
        &new,
        &DiffOptions {
            keep_interrupts: a.keep_interrupts,
            assumed_run_spread: a.run_spread.map_or(DEFAULT_RUN_SPREAD, |p| p / 100.0),
            gate,
        },
    );
    if let Some(min) = a.min_share {
        d.retain_min_share(min);
    }
    if a.fail_time_above.is_some() && d.time.is_none() {
        eprintln!(
            "flamerec: warning: --fail-time-above needs CPU time on both sides (recordings of \
             cpu-clock, task-clock or off-cpu); only --fail-above can trip"
        );
    }

    let base_label = label(&base_paths);
    let new_label = label(&new_paths);
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
        min_share: a.min_share,
        all_rows: a.all_rows,
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

    let tripped = d.tripped();
    if !tripped.is_empty() {
        // A chain of callers with the same samples is named once, and a
        // function by the call path that carries its growth when one does.
        let findings = d.findings();
        let mut names: Vec<String> = findings
            .iter()
            .take(GATE_NAMES)
            .map(|finding| {
                let f = finding.function;
                let (name, time, share) = match finding.path {
                    Some(p) => (p.name(), p.time_change, p.share_change),
                    None => (
                        match finding.more {
                            0 => finding.name.clone(),
                            more => format!("{} and {more} with the same samples", finding.name),
                        },
                        f.time_change,
                        f.share_change,
                    ),
                };
                match (f.trips, time) {
                    (Some(Trip::Time), Some(t)) => format!(
                        "{name} (time {:+.1}%, interval {:+.1}…{:+.1}%)",
                        t.estimate, t.low, t.high
                    ),
                    _ => format!(
                        "{name} (share {:+.2} points, interval {:+.2}…{:+.2})",
                        share.estimate, share.low, share.high
                    ),
                }
            })
            .collect();
        if findings.len() > GATE_NAMES {
            names.push(format!("and {} more", findings.len() - GATE_NAMES));
        }
        let what = if tripped.len() == 1 {
            "1 function".to_string()
        } else {
            format!("{} functions", tripped.len())
        };
        return Err(Exit {
            code: GATE_EXIT,
            message: format!(
                "{what} grew beyond noise and above the threshold: {}",
                names.join(", ")
            ),
        }
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

/// The inputs of a side, for the report.
fn label(paths: &[PathBuf]) -> String {
    let names: Vec<String> = paths
        .iter()
        .map(|p| flamerec_fold::input::label(p).display().to_string())
        .collect();
    names.join(", ")
}

/// Loads one side (one or several runs) with its warnings shown on stderr.
fn load(paths: &[PathBuf], opts: &FoldOptions) -> anyhow::Result<Side> {
    let side = Side::load_runs(paths, opts)?; // DiffError messages name the file.
    for w in &side.warnings {
        match paths {
            [one] => eprintln!(
                "flamerec: warning: {}: {w}",
                flamerec_fold::input::label(one).display()
            ),
            _ => eprintln!("flamerec: warning: {w}"),
        }
    }
    Ok(side)
}
