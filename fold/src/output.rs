//! Writers for a [`Profile`]: folded text, SVG flamegraph (inferno) and the
//! `flamerec-summary/1` JSON object.
//!
//! They only format what the profile already holds; they return plain
//! `io::Result` so a caller can tell a closed pipe from a real failure.

use std::io::{self, BufWriter, Write};

use serde::Serialize;

use crate::Profile;

/// Schema name of the JSON summary.
pub const SUMMARY_SCHEMA: &str = "flamerec-summary/1";

/// Writes one line per distinct stack, `root;frame;...;leaf COUNT`, sorted.
///
/// Frame names were made safe when the profile was built (no `;`, no line
/// breaks, no trailing number), so the output reads back unchanged in
/// inferno-flamegraph and flamegraph.pl.
pub fn write_folded<W: Write>(profile: &Profile, out: W) -> io::Result<()> {
    let mut out = BufWriter::new(out);
    profile.stacks.write_folded(&mut out)?;
    out.flush()
}

/// Writes an SVG flamegraph with inferno.
///
/// `title` defaults to the recorded command line, or "Flame Graph" when there
/// is none; counts are labelled with the recording's weight unit. A profile
/// without samples yields inferno's placeholder image, not an error.
pub fn write_svg<W: Write>(profile: &Profile, title: Option<&str>, out: W) -> io::Result<()> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = match title {
        Some(t) => t.to_string(),
        None if !profile.metadata.command.is_empty() => profile.metadata.command.join(" "),
        None => "Flame Graph".to_string(),
    };
    opts.count_name = crate::input::weight_unit(&profile.metadata).to_string();
    // Same input, same colors: SVGs can be compared and kept as artifacts.
    opts.hash = true;
    opts.deterministic = true;
    let lines: Vec<String> = profile
        .stacks
        .iter()
        .map(|(line, count)| format!("{line} {count}"))
        .collect();
    let mut out = BufWriter::new(out);
    let drawn =
        inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out);
    match drawn {
        Err(e) if profile.stacks.is_empty() && e.kind() == io::ErrorKind::InvalidData => {}
        other => other?,
    }
    out.flush()
}

/// Writes the JSON summary (schema `flamerec-summary/1`).
///
/// Counts are weights: samples for sampled events, nanoseconds for
/// `off-cpu`, so processes and functions add up to `total_samples`.
pub fn write_json_summary<W: Write>(profile: &Profile, out: W) -> io::Result<()> {
    let total = profile.total_weight;
    let pct = |w: u64| {
        if total == 0 {
            0.0
        } else {
            w as f64 * 100.0 / total as f64
        }
    };
    let summary = Summary {
        schema: SUMMARY_SCHEMA,
        total_samples: total,
        lost_samples: profile.lost_samples,
        duration_s: profile.duration_ns as f64 / 1e9,
        event: &profile.metadata.event,
        frequency_hz: profile.metadata.frequency_hz,
        processes: profile
            .processes
            .iter()
            .map(|p| SummaryProcess {
                pid: p.pid,
                comm: &p.comm,
                samples: p.weight,
            })
            .collect(),
        functions: profile
            .functions
            .iter()
            .map(|f| SummaryFunction {
                name: &f.name,
                module: &f.module,
                self_weight: f.self_weight,
                total_weight: f.total_weight,
                self_pct: pct(f.self_weight),
                total_pct: pct(f.total_weight),
            })
            .collect(),
    };
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &summary)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[derive(Serialize)]
struct Summary<'a> {
    schema: &'static str,
    total_samples: u64,
    lost_samples: u64,
    duration_s: f64,
    event: &'a str,
    frequency_hz: u64,
    processes: Vec<SummaryProcess<'a>>,
    functions: Vec<SummaryFunction<'a>>,
}

#[derive(Serialize)]
struct SummaryProcess<'a> {
    pid: u32,
    comm: &'a str,
    samples: u64,
}

#[derive(Serialize)]
struct SummaryFunction<'a> {
    name: &'a str,
    module: &'a str,
    #[serde(rename = "self")]
    self_weight: u64,
    #[serde(rename = "total")]
    total_weight: u64,
    self_pct: f64,
    total_pct: f64,
}
