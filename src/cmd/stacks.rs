//! `flamerec stacks`: every thread's kernel and user stack now. Options →
//! `flamerec_stacks::stacks`, then text, folded or JSON on stdout and what
//! is missing on stderr.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use flamerec_stacks::{render, NameOptions, Options, Report};

use super::Exit;

/// Arguments of `flamerec stacks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// One line per thread, `process;thread;root;…;leaf 1`, kernel frames
    /// marked `_[k]`: a stack census for any flamegraph tool.
    #[arg(long, conflicts_with = "json")]
    folded: bool,
    /// One JSON object (schema flamerec-stacks/1).
    #[arg(long)]
    json: bool,
    /// Also say how each thread was captured, how long it was held, and how
    /// long the capture took.
    #[arg(short, long)]
    verbose: bool,
    /// Never stop a thread: a running thread perf gives no sample for is
    /// shown without a stack instead of being held with ptrace.
    #[arg(long)]
    no_ptrace: bool,
    /// How long to wait for a running thread's perf sample (and, failing
    /// that, for it to stop under ptrace), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    wait: u64,
    /// Do not expand inlined functions.
    #[arg(long)]
    no_inline: bool,
    /// Processes, or single threads, to show.
    #[arg(required = true, value_name = "PID")]
    pids: Vec<u32>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = Options {
        sample_wait: Duration::from_millis(a.wait),
        ptrace: !a.no_ptrace,
        names: NameOptions {
            inline: !a.no_inline,
            ..NameOptions::standard()
        },
        ..Options::default()
    };
    let report = flamerec_stacks::stacks(&a.pids, &opts);
    let captured = report.has_frames();
    if a.json {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", render::json(&report))?;
        stdout.flush()?;
    } else {
        for n in &report.notes {
            eprintln!("flamerec: note: {n}");
        }
        if captured {
            for e in &report.errors {
                eprintln!("flamerec: {e}");
            }
            let out = if a.folded {
                for problem in problems(&report) {
                    eprintln!("flamerec: {problem}");
                }
                render::folded(&report)
            } else {
                render::text(&report, a.verbose)
            };
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(out.as_bytes())?;
            stdout.flush()?;
        }
    }
    if !captured {
        return Err(nothing_captured(&report).into());
    }
    Ok(ExitCode::SUCCESS)
}

/// What the folded output leaves out: processes and threads without frames.
fn problems(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    for p in &report.processes {
        if let Some(e) = &p.error {
            out.push(e.to_string());
        }
        for t in &p.threads {
            if let Some(e) = &t.error {
                let lost = if t.frames.is_empty() {
                    ""
                } else {
                    " (shown without it)"
                };
                out.push(format!("process {} ({}): {e}{lost}", p.pid, p.name));
            }
        }
    }
    out
}

/// The one-line error when no thread gave a single frame.
fn nothing_captured(report: &Report) -> Exit {
    let mut reasons: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
    for p in &report.processes {
        match &p.error {
            Some(e) => reasons.push(e.to_string()),
            None => reasons.extend(
                p.threads
                    .iter()
                    .filter_map(|t| t.error.as_ref().map(|e| e.to_string())),
            ),
        }
    }
    reasons.dedup();
    let message = if reasons.is_empty() {
        "no stack could be taken".to_string()
    } else {
        format!("no stack could be taken: {}", reasons.join("; "))
    };
    Exit { code: 1, message }
}
