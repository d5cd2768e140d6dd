//! `flamerec agent`: the whole system recorded without end at a few Hz,
//! cut into windows, each a complete profile delivered to the backends a
//! fleet runs — an OpenTelemetry Collector (OTLP profiles), Pyroscope (its
//! push API, pprof) — and to a local directory of rotated files.
//!
//! The recorder is `flamerec record -a` itself ([`flamerec_record::record`]),
//! writing its stream into a pipe; [`window`] cuts that stream into
//! windows (each a `.frec` recording with its names); the shipper turns a
//! window into each backend's payload ([`sinks`]) and puts it in that
//! backend's spool, from which [`deliver`] sends it. Nothing downstream of
//! the pipe can make sampling wait: a window the shipper cannot take is
//! dropped and counted. Each `epoch` the recording is started again, so
//! what it interns (frames, stacks, names) stays bounded over days; the
//! windows go on across it.

#![forbid(unsafe_code)]

pub mod deliver;
pub mod grpc;
pub mod h2;
pub mod hpack;
pub mod http;
pub mod pyroscope;
pub mod rotated;
pub mod sinks;
mod stats;
pub mod window;

use std::io::BufReader;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flamerec_format::{FormatError, Reader};
use flamerec_record::{RecordError, RecordOptions};

pub use sinks::{DirFormat, DirSink, OtlpProtocol, SinkOptions};

/// Windows the shipper may hold before the cutter drops the next.
const SHIP_QUEUE: usize = 4;

/// How long the backends get to take what is left at the end.
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// What the agent does.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The recording (its target, frequency, event, call graph, Python
    /// frames); its output and duration are the agent's.
    pub record: RecordOptions,
    /// Each window's length.
    pub window: Duration,
    /// How long one recording runs before the next starts (its tables are
    /// dropped with it).
    pub epoch: Duration,
    /// Where windows go.
    pub sinks: SinkOptions,
    /// No line per window.
    pub quiet: bool,
}

/// Why the agent stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The recording could not start.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A sink could not be set up.
    #[error("{0}")]
    Sink(String),
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

fn sys(what: &str) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError::Sys {
        what: what.to_string(),
        source,
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct AgentSummary {
    /// Windows cut.
    pub windows: u64,
    /// Windows dropped before any sink took them (the shipper was behind).
    pub dropped_windows: u64,
    /// Recordings run (epochs).
    pub recordings: u64,
    /// Warnings of the recordings, each once.
    pub warnings: Vec<String>,
}

/// Runs until SIGINT or SIGTERM: records, cuts, ships; the window in
/// progress is cut and shipped before it returns. `line` gets one line per
/// window (and the backends' faults).
pub fn run(opts: &AgentOptions, line: &(dyn Fn(&str) + Sync)) -> Result<AgentSummary, AgentError> {
    // The namer keeps a thread per binary it holds open, each allocating:
    // with an arena each, what one freed stayed with it (the bench's load:
    // RSS 69–83 MiB a window with glibc's default, 58–63 with one arena).
    flamerec_record::sys::bound_malloc_arenas(2);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(sys("handling signals"))?;
    }
    let run_unix_ns = unix_ns();
    let sinks = sinks::Sinks::start(&opts.sinks)?;
    let mut summary = AgentSummary::default();
    std::thread::scope(|scope| -> Result<(), AgentError> {
        let (tx, rx) = sync_channel(SHIP_QUEUE);
        let shipper = scope.spawn(|| sinks.ship_all(rx, opts.quiet, line));
        let mut first = true;
        while !stop.load(Ordering::Relaxed) {
            match one_recording(opts, run_unix_ns, &tx) {
                Ok(s) => {
                    summary.recordings += 1;
                    summary.windows += s.windows;
                    for w in s.warnings {
                        if !summary.warnings.contains(&w) {
                            line(&format!("flamerec: warning: {w}"));
                            summary.warnings.push(w);
                        }
                    }
                    if s.stopped {
                        break;
                    }
                }
                Err(e) if first => return Err(e),
                Err(e) => {
                    line(&format!(
                        "flamerec: warning: the recording failed ({e}); starting again in 10 s"
                    ));
                    let until = Instant::now() + Duration::from_secs(10);
                    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            first = false;
        }
        drop(tx);
        let _ = shipper.join();
        Ok(())
    })?;
    summary.dropped_windows = stats::dropped_windows();
    sinks.finish(Instant::now() + FINISH_WAIT, line);
    Ok(summary)
}

/// What one recording (epoch) did.
struct Epoch {
    windows: u64,
    warnings: Vec<String>,
    /// Stopped by a signal (not by the epoch's end).
    stopped: bool,
}

/// Records one epoch into a pipe, cutting windows on another thread.
fn one_recording(
    opts: &AgentOptions,
    run_unix_ns: u64,
    tx: &SyncSender<window::WindowFile>,
) -> Result<Epoch, AgentError> {
    let (pipe_out, pipe_in) = std::io::pipe().map_err(sys("making a pipe"))?;
    let mut rec = opts.record.clone();
    // The recorder opens the pipe by its name in /proc, as a file.
    rec.output = PathBuf::from(format!("/proc/self/fd/{}", pipe_in.as_raw_fd()));
    rec.duration = Some(opts.epoch);
    let window = opts.window;
    let cutter = {
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("flamerec-windows".into())
            .spawn(move || cut(pipe_out, window, run_unix_ns, &tx))
            .map_err(sys("starting the thread that cuts windows"))?
    };
    let recorded = flamerec_record::record(&rec, &mut |_| {});
    // The recorder closed its end; with ours closed the cutter sees the end.
    drop(pipe_in);
    let cut = cutter.join().unwrap_or(Ok(0));
    let s = recorded?;
    let mut warnings = s.warnings;
    let windows = match cut {
        Ok(n) => n,
        Err(e) => {
            warnings.push(format!("reading the recording's stream failed: {e}"));
            0
        }
    };
    Ok(Epoch {
        windows,
        warnings,
        stopped: s.stopped_by.is_some(),
    })
}

/// Reads the stream, handing each window on as it is ready; returns how
/// many it cut.
fn cut(
    input: std::io::PipeReader,
    window: Duration,
    run_unix_ns: u64,
    tx: &SyncSender<window::WindowFile>,
) -> Result<u64, FormatError> {
    let mut reader = Reader::new(BufReader::with_capacity(1 << 16, input))?;
    let mut cutter = window::Cutter::new(reader.metadata(), window, run_unix_ns);
    let mut n = 0;
    while let Some(events) = reader.next_events()? {
        cutter.feed(events);
        for w in cutter.ready(reader.tables(), reader.names(), false)? {
            n += 1;
            if let Err(TrySendError::Full(w) | TrySendError::Disconnected(w)) = tx.try_send(w) {
                stats::dropped_window(&w);
            }
        }
    }
    for w in cutter.ready(reader.tables(), reader.names(), true)? {
        n += 1;
        // The end: waiting here holds up nothing.
        let _ = tx.send(w);
    }
    Ok(n)
}

/// Now, nanoseconds since the Unix epoch.
pub(crate) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
