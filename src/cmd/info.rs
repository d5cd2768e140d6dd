//! `flamerec info`: what a recording holds.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use flamerec_format::{NamesState, Summary};
use serde_json::json;

/// Arguments of `flamerec info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object (schema flamerec-info/1).
    #[arg(long)]
    json: bool,
    /// The recording.
    input: PathBuf,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let file =
        File::open(&a.input).with_context(|| format!("cannot open {}", a.input.display()))?;
    let s = Summary::read(BufReader::new(file)).with_context(|| a.input.display().to_string())?;
    // Written, not printed: `flamerec info x.frec | head -1` closes the pipe,
    // which is no error (main says so) where println! would panic.
    let mut w = BufWriter::new(io::stdout().lock());
    let m = &s.metadata;
    if a.json {
        let v = json!({
            "schema": "flamerec-info/1",
            "complete": s.complete,
            "samples": s.samples,
            "lost_samples": s.lost_samples,
            "lost_per_cpu": s.lost_per_cpu.iter().map(|&(cpu, n)| json!({"cpu": cpu, "lost": n})).collect::<Vec<_>>(),
            "lost_while_recorder_waited": s.lost_starved,
            "longest_read_gap": s.longest_read_gap,
            "read_gap_before_loss": s.read_gap_before_loss,
            "duration_s": s.duration_s,
            "event": m.event,
            "frequency_hz": m.frequency_hz,
            "call_graph": m.call_graph,
            "command": m.command,
            "processes": s.processes,
            "threads": s.threads,
            "bytes": s.bytes,
            "truncated_stacks": s.truncated_stacks,
            "completed_stacks": s.completed_stacks,
            "user_stacks": s.user_stacks(),
            "deferred": {
                "stitched": s.deferred_stitched,
                "unmatched_samples": s.deferred_unmatched_samples,
                "orphan_records": s.deferred_orphan_records,
                "unmatched_cookies": s.unmatched_cookies(),
            },
            "symbols": s.names.as_str(),
            "named_frames": s.named_frames,
        });
        writeln!(w, "{v}")?;
        w.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let state = match &s.damage {
        None if s.complete => "complete".to_string(),
        Some(d) => format!("incomplete: {d}"),
        None => "incomplete".to_string(),
    };
    let per_sample = if s.samples > 0 {
        format!(", {:.1} bytes/sample", s.bytes as f64 / s.samples as f64)
    } else {
        String::new()
    };
    writeln!(
        w,
        "file:       {} ({}{per_sample}), {state}",
        a.input.display(),
        super::human_bytes(s.bytes)
    )?;
    writeln!(
        w,
        "command:    {}",
        if m.command.is_empty() {
            format!("({})", m.target)
        } else {
            m.command.join(" ")
        }
    )?;
    let rate = match m.frequency_hz {
        0 => "on every context switch".to_string(),
        hz => format!("at {hz} Hz"),
    };
    writeln!(
        w,
        "event:      {} {rate}, call graph {}",
        m.event, m.call_graph
    )?;
    writeln!(w, "duration:   {:.2} s", s.duration_s)?;
    writeln!(w, "samples:    {} ({} lost)", s.samples, s.lost_samples)?;
    if !s.lost_per_cpu.is_empty() {
        let cpus: Vec<String> = s
            .lost_per_cpu
            .iter()
            .map(|(cpu, n)| format!("CPU {cpu}: {n}"))
            .collect();
        writeln!(
            w,
            "lost:       {}; {} while the recorder waited for a CPU, {} because a ring was full",
            cpus.join(", "),
            s.lost_starved,
            s.lost_samples.saturating_sub(s.lost_starved)
        )?;
    }
    let how = match s.user_stacks() {
        "deferred" => format!(
            "deferred (frame pointers walked by the kernel on return to user space): {} samples joined by cookie, {} unmatched cookies ({} samples whose user part never came, {} user parts whose samples were lost)",
            s.deferred_stitched,
            s.unmatched_cookies(),
            s.deferred_unmatched_samples,
            s.deferred_orphan_records
        ),
        "copied+dwarf" => "copied + DWARF (a copy of each sample's user stack, unwound with CFI)".into(),
        "frame-pointers" => "frame pointers (walked by the kernel at each sample)".into(),
        _ => format!("unknown call-graph mode {}", m.call_graph),
    };
    writeln!(w, "user stack: {how}")?;
    if m.call_graph != "dwarf" && s.truncated_stacks > 0 {
        writeln!(
        w,
            "stacks:     {} cut at the kernel's callchain cap (kernel.perf_event_max_stack frames; 510 user frames for deferred ones)",
            s.truncated_stacks
        )?;
    }
    if m.call_graph == "dwarf" {
        writeln!(
            w,
            "stacks:     {} deeper than their copy completed from the live thread, {} cut short",
            s.completed_stacks, s.truncated_stacks
        )?;
    }
    if m.weight_unit != "samples" {
        writeln!(w, "weight:     {} {}", s.weight, m.weight_unit)?;
    }
    writeln!(w, "processes:  {}, threads: {}", s.processes, s.threads)?;
    let names = match (s.names, &s.names_damage) {
        (_, Some(why)) => format!("partial: the names section is {why}"),
        (NamesState::Embedded, None) => "embedded".to_string(),
        (NamesState::Partial, None) => {
            "partial: some binaries could not be read while recording".to_string()
        }
        (NamesState::None, None) => "none (fold reads the binaries)".to_string(),
    };
    writeln!(
        w,
        "names:      {names} ({} frames named in the file)",
        s.named_frames
    )?;
    writeln!(
        w,
        "recorded:   on {} (Linux {}) by flamerec {}",
        m.host, m.kernel_release, m.flamerec_version
    )?;
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}
