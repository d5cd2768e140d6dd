//! `flamerec record`: options → `flamerec_record::record`, a progress line,
//! a summary line, and the command's exit status.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use flamerec_record::{
    CallGraph, EventKind, PythonFrames, RecordError, RecordOptions, RingReaders, Target, WaitStatus,
};

use super::Exit;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Mode {
    /// Frame pointers only (cheapest).
    Fp,
    /// Kernel callchain + user stack copy unwound with CFI.
    Dwarf,
    /// Frame pointers, the user stack walked once per return to user space
    /// (Linux 6.19+; plain fp elsewhere).
    #[value(name = "fp,defer")]
    FpDefer,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Python {
    /// From the start for a command, else from the first CPython found.
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Event {
    CpuClock,
    TaskClock,
    Cycles,
    OffCpu,
}

impl From<Mode> for CallGraph {
    fn from(m: Mode) -> CallGraph {
        match m {
            Mode::Fp => CallGraph::Fp,
            Mode::Dwarf => CallGraph::Dwarf,
            Mode::FpDefer => CallGraph::FpDefer,
        }
    }
}

impl From<Python> for PythonFrames {
    fn from(p: Python) -> PythonFrames {
        match p {
            Python::Auto => PythonFrames::Auto,
            Python::On => PythonFrames::On,
            Python::Off => PythonFrames::Off,
        }
    }
}

impl From<Event> for EventKind {
    fn from(e: Event) -> EventKind {
        match e {
            Event::CpuClock => EventKind::CpuClock,
            Event::TaskClock => EventKind::TaskClock,
            Event::Cycles => EventKind::Cycles,
            Event::OffCpu => EventKind::OffCpu,
        }
    }
}

/// Arguments of `flamerec record`.
/// Which processes are kept (`record` and `agent`).
#[derive(Debug, clap::Args)]
pub struct Picked {
    /// Keep only processes this matches (repeatable; any one matching
    /// keeps): pid:N, exe:NAME (the executable's file name), cgroup:PATH
    /// (that cgroup and below), container:ID (a prefix of 4+ hex digits).
    #[arg(long, value_name = "RULE")]
    include: Vec<flamerec_record::ProcessRule>,
    /// Leave out processes this matches (repeatable), before their stacks
    /// are unwound: the same rules as --include.
    #[arg(long, value_name = "RULE")]
    exclude: Vec<flamerec_record::ProcessRule>,
}

impl Picked {
    pub fn selection(&self) -> flamerec_record::Selection {
        flamerec_record::Selection {
            include: self.include.clone(),
            exclude: self.exclude.clone(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Recording file.
    #[arg(short, long, default_value = "flamerec.frec")]
    output: PathBuf,
    /// Samples per second per CPU.
    #[arg(short = 'F', long = "freq", default_value_t = 999, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    freq: u64,
    /// Call-graph mode.
    #[arg(short = 'g', long = "call-graph", value_enum, default_value = "dwarf")]
    call_graph: Mode,
    /// Record running processes (comma-separated pids).
    #[arg(short, long, value_delimiter = ',')]
    pid: Vec<u32>,
    /// With --pid: also the processes already running under them (a
    /// pre-fork server's workers, a pool's children).
    #[arg(long, requires = "pid")]
    children: bool,
    /// Record the whole system, excluding flamerec itself.
    #[arg(short, long)]
    all_cpus: bool,
    /// Record every process in this cgroup (v2) and its descendants, as
    /// `/proc/PID/cgroup` names it (`/system.slice/x.service`) or by its
    /// directory.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "all_cpus", "container", "command"])]
    cgroup: Option<PathBuf>,
    /// Record the container whose id starts with this (docker, podman,
    /// containerd, CRI-O): its cgroup, as --cgroup.
    #[arg(long, value_name = "ID", conflicts_with_all = ["pid", "all_cpus", "command"])]
    container: Option<String>,
    #[command(flatten)]
    picked: Picked,
    /// Stop after this many seconds.
    #[arg(short, long, value_name = "SECS")]
    duration: Option<f64>,
    /// Sampling event.
    #[arg(short, long, value_enum, default_value = "cpu-clock")]
    event: Event,
    /// User stacks only.
    #[arg(long)]
    no_kernel: bool,
    /// Keep the profiler's own frames (turn trimming off).
    #[arg(long)]
    keep_profiler_frames: bool,
    /// Also trim leading kernel frames named SYMBOL.
    #[arg(long, value_name = "SYMBOL")]
    trim: Vec<String>,
    /// Ring buffer data pages per CPU, a power of two (default: 128 for fp, 1024 for dwarf).
    #[arg(long, value_name = "N")]
    mmap_pages: Option<usize>,
    /// Bytes of user stack copied per sample in dwarf mode.
    #[arg(long, value_name = "BYTES", default_value_t = flamerec_record::DEFAULT_STACK_SIZE)]
    stack_size: u32,
    /// After recording, fold and write a flamegraph here.
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// Leave user-space names out of the file (fold then reads the binaries).
    #[arg(long)]
    no_embed_symbols: bool,
    /// Threads that read the ring buffers: auto (the loop reads them, and
    /// hands them to per-CPU reader threads once it falls behind), off, or N
    /// reader threads from the start.
    #[arg(long, value_name = "auto|off|N", default_value = "auto", value_parser = parse_readers)]
    ring_readers: RingReaders,
    /// Read Python frames at each sample (as root): auto (from the start for
    /// a command, from the first CPython process found with -p and -a), on
    /// from the start, or off.
    #[arg(long, value_enum, value_name = "auto|on|off", default_value = "auto")]
    python: Python,
    /// Python frames by line, `qualname (file:line)`, rather than one per
    /// function.
    #[arg(long)]
    python_lines: bool,
    /// Keep the interpreter's own frames beside Python frames: each
    /// `_PyEval_EvalFrameDefault` under the Python frames it ran and the
    /// calls between them (`_PyFunction_Vectorcall`, …), left out by default.
    #[arg(long)]
    python_interpreter: bool,
    /// No progress line.
    #[arg(short, long)]
    quiet: bool,
    /// The command to run and record.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// The library's options from the command line's.
fn options(a: &Args) -> anyhow::Result<RecordOptions> {
    let target = if a.children {
        Target::Pids(flamerec_record::with_children(&a.pid))
    } else if !a.pid.is_empty() {
        Target::Pids(a.pid.clone())
    } else if let Some(cgroup) = &a.cgroup {
        Target::Cgroup(cgroup.clone())
    } else if let Some(id) = &a.container {
        let cgroup = flamerec_record::container_cgroup(id)
            .map_err(|why| anyhow::anyhow!("--container {id}: {why}"))?;
        Target::Cgroup(cgroup.into())
    } else if a.all_cpus {
        Target::System
    } else {
        Target::Command(a.command.clone())
    };
    let duration = match a.duration {
        Some(d) if d.is_finite() && d > 0.0 => Some(Duration::from_secs_f64(d)),
        Some(d) => anyhow::bail!("--duration must be a positive number of seconds, not {d}"),
        None => None,
    };
    Ok(RecordOptions {
        output: a.output.clone(),
        frequency: a.freq,
        call_graph: a.call_graph.into(),
        target,
        duration,
        event: a.event.into(),
        kernel: !a.no_kernel,
        keep_profiler_frames: a.keep_profiler_frames,
        trim: a.trim.clone(),
        mmap_pages: a.mmap_pages,
        stack_size: a.stack_size,
        embed_names: (!a.no_embed_symbols).then(flamerec_record::NameOptions::standard),
        ring_readers: a.ring_readers,
        python: a.python.into(),
        python_lines: a.python_lines,
        python_interpreter: a.python_interpreter,
        selection: a.picked.selection(),
        ..RecordOptions::default()
    })
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let opts = options(&a)?;
    let live = !a.quiet && std::io::stderr().is_terminal();
    let mut progress = |p: &flamerec_record::Progress| {
        if live {
            eprint!(
                "\rflamerec: recording… {} samples, {} lost, {:.1} s ",
                p.samples,
                p.lost,
                p.elapsed.as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    };
    let summary = match flamerec_record::record(&opts, &mut progress) {
        Ok(s) => s,
        Err(e) => {
            let code = match &e {
                RecordError::CommandNotFound(_) => 127,
                RecordError::CommandNotExecutable { .. } => 126,
                _ => 1,
            };
            return Err(Exit {
                code,
                message: e.to_string(),
            }
            .into());
        }
    };
    if live {
        eprint!("\r\x1b[K");
    }
    for w in &summary.warnings {
        eprintln!("flamerec: warning: {w}");
    }
    eprintln!("flamerec: {}", summary_line(&summary));
    if let Some(svg) = &a.svg {
        super::fold::write_svg_of(&a.output, svg, None)?;
        eprintln!("flamerec: wrote {}", svg.display());
    }
    Ok(match summary.exit {
        Some(WaitStatus::Exited(c)) => ExitCode::from(c as u8),
        Some(WaitStatus::Signaled(s)) => ExitCode::from(128u8.wrapping_add(s as u8)),
        // Stopped by a second Ctrl-C while the command still ran.
        None => match summary.stopped_by {
            Some(s) => ExitCode::from(128u8.wrapping_add(s as u8)),
            None => ExitCode::SUCCESS,
        },
    })
}

/// The one line that sums a recording up: samples, losses, processes,
/// the file, names embedded, the recorder's own CPU and its reader threads.
fn summary_line(summary: &flamerec_record::RecordSummary) -> String {
    let per_sample = if summary.samples > 0 {
        format!(
            ", {:.1} B/sample",
            summary.bytes as f64 / summary.samples as f64
        )
    } else {
        String::new()
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let own_cpu = match summary.recorder_cpu {
        Some(cpu) if summary.duration.as_secs_f64() > 0.0 => format!(
            ", recorder CPU {:.2} s ({:.1}% of {cpus} CPU{})",
            cpu.as_secs_f64(),
            100.0 * cpu.as_secs_f64() / (cpus as f64 * summary.duration.as_secs_f64()),
            if cpus == 1 { "" } else { "s" }
        ),
        _ => String::new(),
    };
    let readers = match summary.ring_readers {
        Some((n, at)) => format!(
            ", rings read by {n} reader thread{} from {:.2} s",
            if n == 1 { "" } else { "s" },
            at.as_secs_f64()
        ),
        None => String::new(),
    };
    format!(
        "{} samples, {} lost, {} processes, {} threads, {:.2} s → {} ({}{per_sample}){names}{own_cpu}{readers}",
        summary.samples,
        summary.lost,
        summary.processes,
        summary.threads,
        summary.duration.as_secs_f64(),
        summary.output.display(),
        super::human_bytes(summary.bytes),
        names = match &summary.names {
            Some(n) => format!(
                ", names of {} frames embedded in {:.3} s",
                n.frames,
                n.elapsed.as_secs_f64()
            ),
            None => String::new(),
        },
    )
}

/// `--ring-readers`: auto, off, or a number of threads (1–1024).
fn parse_readers(s: &str) -> Result<RingReaders, String> {
    match s {
        "auto" => Ok(RingReaders::Auto),
        "off" => Ok(RingReaders::Off),
        n => match n.parse::<usize>() {
            Ok(n @ 1..=1024) => Ok(RingReaders::Threads(n)),
            _ => Err(format!(
                "expected auto, off or a number of threads from 1 to 1024, not {n:?}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_lines_defaults_are_the_librarys() {
        let args: Args = super::super::parse_args(&["--", "true"]).expect("parse");
        let cli = options(&args).expect("options");
        let lib = RecordOptions::default();
        assert_eq!(cli.output, lib.output);
        assert_eq!(cli.frequency, lib.frequency);
        assert_eq!(cli.call_graph, lib.call_graph);
        assert_eq!(cli.event, lib.event);
        assert_eq!(cli.kernel, lib.kernel);
        assert_eq!(cli.stack_size, lib.stack_size);
        assert_eq!(cli.mmap_pages, lib.mmap_pages);
        assert_eq!(cli.ring_readers, lib.ring_readers);
        assert_eq!(cli.embed_names.is_some(), lib.embed_names.is_some());
    }
}
