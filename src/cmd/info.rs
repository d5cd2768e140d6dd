//! `flamerec info`: what an input holds — a `.frec` recording, perf.data
//! (file or pipe mode, read as fold reads it) or folded text — and what is
//! missing to name its frames.

use std::collections::BTreeSet;
use std::io::{self, BufReader, BufWriter, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use flamerec_fold::input::{self, InputKind};
use flamerec_format::{ModuleKind, NamesState, Reader, Summary};
use serde_json::json;

/// Arguments of `flamerec info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print one JSON object (schema flamerec-info/1).
    #[arg(long)]
    json: bool,
    /// Kernel symbols for perf.data recorded on another kernel: its kallsyms or System.map.
    #[arg(long, value_name = "PATH")]
    kallsyms: Option<PathBuf>,
    /// The input: a .frec recording, perf.data (file or pipe mode) or folded text; `-` for
    /// standard input.
    input: PathBuf,
}

/// Binaries named in "missing" before the rest are counted.
const MISSING_NAMED: usize = 5;

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let input = input::open(&a.input)?;
    let kind = input.kind();
    let label = input.label().to_path_buf();
    // Written, not printed: `flamerec info x.frec | head -1` closes the pipe,
    // which is no error (main says so) where println! would panic.
    let mut w = BufWriter::new(io::stdout().lock());
    // The recording, read twice: once for counts, once for its tables.
    let (mut file, warnings): (Box<dyn ReadSeek>, Vec<String>) = match kind {
        InputKind::FoldedText => {
            let stacks = input.into_folded()?;
            folded_info(&label, &stacks, a.json, &mut w)?;
            w.flush()?;
            return Ok(ExitCode::SUCCESS);
        }
        InputKind::PerfData | InputKind::PerfPipe => {
            let (bytes, warnings) = flamerec_fold::import_perf_data(input, a.kallsyms.as_deref())?;
            (Box::new(Cursor::new(bytes)), warnings)
        }
        InputKind::Recording => {
            let file = input
                .into_seekable()
                .with_context(|| format!("cannot read {}", label.display()))?;
            (Box::new(file), Vec::new())
        }
    };
    let s =
        Summary::read(BufReader::new(&mut file)).with_context(|| label.display().to_string())?;
    file.seek(SeekFrom::Start(0))?;
    let missing = missing_names(&mut file, &s, kind, a.kallsyms.is_some());
    if a.json {
        writeln!(w, "{}", info_json(kind, &s, &missing, &warnings))?;
    } else {
        write_recording(&mut w, kind, &label, &s)?;
        write_stacks(&mut w, &s)?;
        write_contents(&mut w, &s)?;
        write_names(&mut w, kind, &s, &missing)?;
        for warning in &warnings {
            writeln!(w, "warning:    {warning}")?;
        }
    }
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The `flamerec-info/1` object.
fn info_json(
    kind: InputKind,
    s: &Summary,
    missing: &[String],
    warnings: &[String],
) -> serde_json::Value {
    let m = &s.metadata;
    json!({
        "schema": "flamerec-info/1",
        "format": kind.name(),
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
        "window": m.window,
        "host": m.host,
        "kernel_release": m.kernel_release,
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
        "python": s.python,
        "jit_frames": s.jit_frames,
        "containers": s.containers.iter().map(|c| json!({
            "container": c.label,
            "runtime": c.runtime,
            "id": c.id,
            "processes": c.processes,
            "samples": c.samples,
        })).collect::<Vec<_>>(),
        "missing": missing,
        "warnings": warnings,
    })
}

/// The file, its state, the command, the event and how many samples.
fn write_recording(
    w: &mut impl Write,
    kind: InputKind,
    label: &Path,
    s: &Summary,
) -> io::Result<()> {
    let m = &s.metadata;
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
    let what = match kind {
        InputKind::Recording => format!("{}{per_sample}", super::human_bytes(s.bytes)),
        _ => format!("{}, imported", kind_text(kind)),
    };
    writeln!(w, "file:       {} ({what}), {state}", label.display())?;
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
    Ok(())
}

/// How user stacks were taken, and how many were cut or completed.
fn write_stacks(w: &mut impl Write, s: &Summary) -> io::Result<()> {
    let m = &s.metadata;
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
    let unit = input::weight_unit(m);
    if unit != "samples" {
        writeln!(w, "weight:     {} {unit}", s.weight)?;
    }
    Ok(())
}

/// The weight, processes and threads, containers, JIT frames and CPythons.
fn write_contents(w: &mut impl Write, s: &Summary) -> io::Result<()> {
    writeln!(w, "processes:  {}, threads: {}", s.processes, s.threads)?;
    for c in &s.containers {
        let what = if c.id.is_empty() {
            String::new()
        } else {
            format!(" ({} container {})", c.runtime, c.id)
        };
        writeln!(
            w,
            "container:  {}{what}: {} samples, {} process{}",
            c.label,
            c.samples,
            c.processes,
            if c.processes == 1 { "" } else { "es" }
        )?;
    }
    let j = &s.jit_frames;
    if !j.is_empty() {
        writeln!(
            w,
            "jit:        {} frames of anonymous code named by a perf map line and {} by a jitdump load in force at the sample, {} by the files at the end, {} unnamed",
            j.perf_map, j.jitdump, j.at_end, j.unnamed
        )?;
    }
    for py in &s.python {
        let how = match py.read.as_str() {
            "at-sample" => "frames read at each sample, in the kernel",
            other => other,
        };
        writeln!(
            w,
            "python:     CPython {} ({} process{}): {how}; {} samples showed them, {} kept native frames only",
            py.version,
            py.processes,
            if py.processes == 1 { "" } else { "es" },
            py.samples_with_frames,
            py.samples_native_only
        )?;
    }
    Ok(())
}

/// What names the file holds, the window, where it was recorded, and what
/// is missing to name its frames.
fn write_names(
    w: &mut impl Write,
    kind: InputKind,
    s: &Summary,
    missing: &[String],
) -> io::Result<()> {
    let m = &s.metadata;
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
    let by = match kind {
        InputKind::Recording => format!("flamerec {}", m.flamerec_version),
        _ => "perf".to_string(),
    };
    if let Some(win) = &m.window {
        writeln!(
            w,
            "window:     {} of a continuous recording (flamerec agent), {:.2} s from {} UTC; the run started {} UTC",
            win.index,
            win.duration_ns as f64 / 1e9,
            utc(win.start_unix_ns),
            utc(win.run_unix_ns)
        )?;
    }
    writeln!(
        w,
        "recorded:   on {} (Linux {}) by {by}",
        m.host, m.kernel_release
    )?;
    match missing {
        [] => writeln!(w, "missing:    nothing to name its frames")?,
        [one, rest @ ..] => {
            writeln!(w, "missing:    {one}")?;
            for m in rest {
                writeln!(w, "            {m}")?;
            }
        }
    }
    Ok(())
}

/// A file or an in-memory recording.
trait ReadSeek: Read + Seek {}
impl<T: Read + Seek> ReadSeek for T {}

/// The input kind in words.
fn kind_text(kind: InputKind) -> &'static str {
    match kind {
        InputKind::Recording => "flamerec recording",
        InputKind::PerfData => "perf.data, file mode",
        InputKind::PerfPipe => "perf.data, pipe mode",
        InputKind::FoldedText => "folded text",
    }
}

/// What this machine lacks to name the recording's sampled frames, one
/// line each: kernel symbols, binaries no longer on disk (when the
/// recording does not name their frames itself).
fn missing_names(
    recording: impl Read,
    s: &Summary,
    kind: InputKind,
    kallsyms_given: bool,
) -> Vec<String> {
    let Ok(mut reader) = Reader::new(BufReader::new(recording)) else {
        return Vec::new();
    };
    // Damage was reported by the summary; the tables read so far count.
    while let Ok(Some(_)) = reader.next_events() {}
    let t = reader.tables();
    let mut missing = Vec::new();
    let kernel_frames = t
        .frames
        .iter()
        .filter(|f| {
            t.modules
                .get(f.module as usize)
                .is_some_and(|m| m.kind == ModuleKind::Kernel)
        })
        .count();
    if kernel_frames > 0 && t.kernel_symbols.is_empty() {
        let recorded = &s.metadata.kernel_release;
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let running = running.trim();
        let why = if kallsyms_given {
            "the --kallsyms file covers none of them".to_string()
        } else if kind.is_perf_data() && !recorded.is_empty() && recorded != running {
            format!(
                "recorded on Linux {recorded}, this machine runs {running}: give that kernel's \
                 kallsyms or System.map with --kallsyms"
            )
        } else if kind.is_perf_data() {
            "no kernel symbols readable in /proc/kallsyms (run as root or lower \
             kernel.kptr_restrict)"
                .into()
        } else {
            "the recording holds none".into()
        };
        missing.push(format!(
            "kernel symbols for {kernel_frames} kernel frames: {why}"
        ));
    }
    if s.names != NamesState::Embedded {
        let sampled: BTreeSet<&str> = t
            .frames
            .iter()
            .filter_map(|f| t.modules.get(f.module as usize))
            .filter(|m| m.kind == ModuleKind::File && !Path::new(&m.path).exists())
            .map(|m| m.path.as_str())
            .collect();
        let n = sampled.len();
        for path in sampled.iter().take(MISSING_NAMED) {
            missing.push(format!("binary {path} (not on this machine)"));
        }
        if n > MISSING_NAMED {
            missing.push(format!("and {} more binaries", n - MISSING_NAMED));
        }
    }
    missing
}

/// `info` of folded text: what it holds, and that its names are final.
fn folded_info(
    label: &Path,
    stacks: &[(String, u64)],
    json: bool,
    w: &mut impl Write,
) -> io::Result<()> {
    let samples = stacks.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n));
    let roots: BTreeSet<&str> = stacks
        .iter()
        .map(|(line, _)| line.split(';').next().unwrap_or_default())
        .collect();
    let deepest = stacks
        .iter()
        .map(|(line, _)| line.split(';').count())
        .max()
        .unwrap_or(0);
    if json {
        let v = json!({
            "schema": "flamerec-info/1",
            "format": InputKind::FoldedText.name(),
            "complete": true,
            "samples": samples,
            "stacks": stacks.len(),
            "roots": roots.len(),
            "deepest_stack": deepest,
            "missing": Vec::<String>::new(),
        });
        return writeln!(w, "{v}");
    }
    writeln!(w, "file:       {} (folded text)", label.display())?;
    writeln!(
        w,
        "samples:    {samples} in {} distinct stacks",
        stacks.len()
    )?;
    writeln!(
        w,
        "roots:      {} (first frames: threads or processes, as the folding tool wrote them)",
        roots.len()
    )?;
    writeln!(w, "deepest:    {deepest} frames")?;
    writeln!(
        w,
        "event:      not recorded in folded text (no times, threads or modules)"
    )?;
    writeln!(
        w,
        "missing:    nothing: folded text names its frames already"
    )
}

/// A Unix time in nanoseconds as `YYYY-MM-DD HH:MM:SS.mmm`.
fn utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let ms = (unix_ns / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03}",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
mod utc_tests {
    #[test]
    fn civil_times() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00.000");
        assert_eq!(
            super::utc(1_795_883_127_136_593_100),
            "2026-11-28 16:25:27.136"
        );
        assert_eq!(
            super::utc(951_782_400_000_000_000),
            "2000-02-29 00:00:00.000"
        );
    }
}
