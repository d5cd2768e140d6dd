//! `flamerec record`: sample a command (and every thread and child it
//! creates) with `perf_event_open`, turn each sample's callchain into an
//! interned stack of (module, offset) frames, trim the profiler's own
//! kernel frames, and stream it all into a `.frec` file.
//!
//! All unsafe code lives in [`sys`]; everything else works on bytes read in
//! place from the ring buffers or copied out of them. Samples are stored as
//! (module, offset) frames, never names; while recording, `embed` names the
//! distinct frames with `flamerec-symbolize` as they appear and at the end
//! stores the names in the file (unless `--no-embed-symbols`), so `fold` needs no binaries.

// Unsafe code is confined to `sys`: everything else is checked.
#![deny(unsafe_code)]

mod deep;
mod defer;
mod depth;
mod embed;
mod ended;
mod files;
mod identity;
mod jit;
mod kernel;
mod launch;
mod loss;
mod offcpu;
mod open;
mod pynames;
mod python;
mod raw;
mod readers;
mod rings;
mod select;
mod session;
mod signals;
mod splice;
mod spool;
mod state;
#[allow(unsafe_code)]
pub mod sys;
mod trim;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

pub use flamerec_symbolize::kallsyms::Kallsyms;
pub use flamerec_symbolize::NameOptions;
pub use select::{ProcessRule, RuleError, Selection};
pub use session::record;
pub use sys::WaitStatus;
pub use trim::{is_sampling_path, is_scheduler};

/// How user stacks are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// Frame pointers, walked by the kernel.
    Fp,
    /// Stack copy unwound with CFI at record time.
    Dwarf,
    /// Frame pointers, the user part walked once per return to user space
    /// (deferred callchains, Linux 6.19+); plain [`CallGraph::Fp`] where
    /// the kernel refuses.
    FpDefer,
}

impl CallGraph {
    /// Name as stored in the recording.
    pub fn name(self) -> &'static str {
        match self {
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
            CallGraph::FpDefer => "fp,defer",
        }
    }
}

/// What drives sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Software CPU clock (works in VMs).
    CpuClock,
    /// Software task clock.
    TaskClock,
    /// Hardware cycles.
    Cycles,
    /// Time blocked, from sched_switch.
    OffCpu,
}

impl EventKind {
    /// Name as stored in the recording.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::CpuClock => "cpu-clock",
            EventKind::TaskClock => "task-clock",
            EventKind::Cycles => "cycles",
            EventKind::OffCpu => "off-cpu",
        }
    }

    /// The perf counter that drives it.
    pub(crate) fn counter(self) -> sys::Counter {
        match self {
            EventKind::CpuClock => sys::Counter::CpuClock,
            EventKind::TaskClock => sys::Counter::TaskClock,
            EventKind::Cycles => sys::Counter::Cycles,
            EventKind::OffCpu => sys::Counter::ContextSwitches,
        }
    }
}

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Start this command and record it and its whole tree.
    Command(Vec<OsString>),
    /// Attach to running processes.
    Pids(Vec<u32>),
    /// The whole system except flamerec.
    System,
    /// Every process in a cgroup (v2) and its descendants, running or
    /// started during the recording, and nothing else (`perf record -G`):
    /// the cgroup's directory, or its path as `/proc/PID/cgroup` says it.
    Cgroup(PathBuf),
}

/// `pids` and every process running under them now (a pre-fork server's
/// workers), for [`Target::Pids`] with `--children`.
pub fn with_children(pids: &[u32]) -> Vec<u32> {
    flamerec_perf::procfs::descendants(pids)
}

/// The cgroup of the one running container whose id starts with `prefix`
/// (docker, podman, containerd, CRI-O), for [`Target::Cgroup`].
pub fn container_cgroup(prefix: &str) -> Result<String, String> {
    flamerec_perf::procfs::view::container_cgroup(prefix)
}

/// Everything `record` needs to know.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Output path.
    pub output: PathBuf,
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Call-graph mode.
    pub call_graph: CallGraph,
    /// What to record.
    pub target: Target,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Sampling event.
    pub event: EventKind,
    /// Sample kernel code and kernel stacks.
    pub kernel: bool,
    /// Keep the sampling-path kernel frames.
    pub keep_profiler_frames: bool,
    /// More kernel symbols to trim from the leaf end.
    pub trim: Vec<String>,
    /// Data pages per CPU ring buffer (a power of two); `None` picks by mode.
    pub mmap_pages: Option<usize>,
    /// Bytes of user stack copied per sample in dwarf mode.
    pub stack_size: u32,
    /// Resolve sampled user addresses to names while recording and store
    /// them in the file, finding binaries, debug files and the symbol cache
    /// as these say (`inline` is taken as true); `None`: leave them to `fold`.
    pub embed_names: Option<NameOptions>,
    /// Who reads the ring buffers.
    pub ring_readers: RingReaders,
    /// When Python frames are read at the sample.
    pub python: PythonFrames,
    /// Python frames by line: `qualname (file:line)`, one frame per line
    /// a function was sampled at, instead of one per function.
    pub python_lines: bool,
    /// The interpreter's own frames kept beside Python frames: each
    /// eval-loop call under the Python frames it ran, and the calls between
    /// two of them (`_PyFunction_Vectorcall`, …), left out by default.
    pub python_interpreter: bool,
    /// How often what was recorded is cut into a chunk and handed to the
    /// output, at most (1 s; a reader of the stream as it is written, like
    /// the agent, sees it this often).
    pub chunk_every: Duration,
    /// Which processes are kept (`-a` and `--cgroup`; everything by
    /// default), decided before their stacks are unwound.
    pub selection: Selection,
}

/// When the recorder reads Python frames at each sample (a BPF program that
/// runs with every sampling event, as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PythonFrames {
    /// From the start for a command (its processes take the program as
    /// their inherited events have it when forked); with `-p` and `-a`,
    /// from the first CPython process found (its `python3*` or
    /// `libpython3*` mapped), until when no sample pays for the program.
    #[default]
    Auto,
    /// From the start (what `Auto` does once it finds CPython).
    On,
    /// Never.
    Off,
}

/// Who reads the ring buffers while recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RingReaders {
    /// The loop that writes the recording reads them in place, and hands
    /// them to reader threads (per-CPU groups) once it finds one over half
    /// full: a loop that waits for a CPU would next let it overrun.
    #[default]
    Auto,
    /// The loop alone, however late it is.
    Off,
    /// This many reader threads from the start (at most one per ring).
    Threads(usize),
}

/// Default bytes of user stack copied per sample in dwarf mode (see DESIGN.md):
/// the most a perf record holds. rustc compiling regex-syntax: 16 KiB left
/// 12% of its stacks cut (the copy ended in frames that returned before the
/// live read), 32 KiB 5%, 48 KiB 0.4%, 60 KiB 0.2%. The kernel copies it per
/// sample (a few µs); the recorder reads it in place in the ring.
pub const DEFAULT_STACK_SIZE: u32 = 61440;

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            output: PathBuf::from("flamerec.frec"),
            frequency: 999,
            call_graph: CallGraph::Dwarf,
            target: Target::Command(Vec::new()),
            duration: None,
            event: EventKind::CpuClock,
            kernel: true,
            keep_profiler_frames: false,
            trim: Vec::new(),
            mmap_pages: None,
            stack_size: DEFAULT_STACK_SIZE,
            embed_names: Some(NameOptions::standard()),
            ring_readers: RingReaders::Auto,
            python: PythonFrames::Auto,
            python_lines: false,
            python_interpreter: false,
            chunk_every: Duration::from_secs(1),
            selection: Selection::default(),
        }
    }
}

/// Live figures, reported while recording.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Samples written so far.
    pub samples: u64,
    /// Samples lost so far.
    pub lost: u64,
    /// Time since recording started.
    pub elapsed: Duration,
}

/// What a finished recording holds.
#[derive(Debug, Clone)]
pub struct RecordSummary {
    /// Samples written.
    pub samples: u64,
    /// Samples lost.
    pub lost: u64,
    /// Distinct processes seen.
    pub processes: u64,
    /// Distinct threads seen.
    pub threads: u64,
    /// Recording length.
    pub duration: Duration,
    /// File size in bytes.
    pub bytes: u64,
    /// The output path.
    pub output: PathBuf,
    /// How the started command ended (None without a command, or when
    /// recording was stopped before it ended).
    pub exit: Option<WaitStatus>,
    /// User stacks whose unwinding stopped before the thread's entry (dwarf mode).
    pub truncated_stacks: u64,
    /// User stacks deeper than their copied slice, completed from the live
    /// thread's memory (dwarf mode).
    pub completed_stacks: u64,
    /// The signal that stopped recording before the command ended (a second
    /// Ctrl-C), if one did.
    pub stopped_by: Option<i32>,
    /// Warnings to show the user.
    pub warnings: Vec<String>,
    /// Names embedded, when asked for.
    pub names: Option<NamesSummary>,
    /// CPU time the recorder itself used, every thread, set-up to finish
    /// (not the command's), at /proc's 10 ms resolution; `None` when /proc
    /// could not say.
    pub recorder_cpu: Option<Duration>,
    /// Reader threads that took the rings over, and when (since the start).
    pub ring_readers: Option<(usize, Duration)>,
}

/// What embedding names did.
#[derive(Debug, Clone, Default)]
pub struct NamesSummary {
    /// Frames whose names were stored.
    pub frames: u64,
    /// Frames left for `fold` to name (their binary was unusable).
    pub left_out: u64,
    /// How long naming the last frames and writing the names took, from
    /// the end of the command (or of sampling) on.
    pub elapsed: Duration,
}

/// Why recording failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// perf_event_open was refused.
    #[error("perf_event_open was denied ({source}); kernel.perf_event_paranoid is {paranoid}: run as root, or allow it with `sudo sysctl kernel.perf_event_paranoid={needed}`")]
    PerfDenied {
        /// Current value of kernel.perf_event_paranoid.
        paranoid: String,
        /// The value that allows what was asked (0 for system-wide, 1 otherwise).
        needed: i32,
        /// The error.
        source: std::io::Error,
    },
    /// The event does not exist on this machine.
    #[error("event {event} is not available here ({source}); use -e cpu-clock")]
    EventUnavailable {
        /// Event name.
        event: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Mapping a ring buffer failed (usually the locked-memory limit).
    #[error("cannot map the perf ring buffer ({source}); lower --mmap-pages or raise kernel.perf_event_mlock_kb (now {mlock_kb} KiB)")]
    RingBuffer {
        /// Current kernel.perf_event_mlock_kb.
        mlock_kb: String,
        /// The error.
        source: std::io::Error,
    },
    /// The command does not exist.
    #[error("{0}: command not found")]
    CommandNotFound(String),
    /// The command exists but cannot be executed.
    #[error("{command}: cannot execute ({source})")]
    CommandNotExecutable {
        /// The command.
        command: String,
        /// The error.
        source: std::io::Error,
    },
    /// A process given to --pid does not exist.
    #[error("no process with pid {0}")]
    NoSuchProcess(u32),
    /// The cgroup given to --cgroup cannot be recorded.
    #[error("cannot record the cgroup {name}: {source}")]
    Cgroup {
        /// As given.
        name: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No command was given.
    #[error("no command to record: give one after `--`, or use --pid or --all-cpus")]
    NoCommand,
    /// The output file could not be written.
    #[error("cannot write {path}: {source}")]
    Output {
        /// The output path.
        path: PathBuf,
        /// The error.
        source: flamerec_format::FormatError,
    },
    /// This option is not supported yet.
    #[error("{0}")]
    Unsupported(String),
    /// Another system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl RecordError {
    /// A system call that failed while doing `what`.
    pub(crate) fn sys(what: &str, source: std::io::Error) -> Self {
        RecordError::Sys {
            what: what.into(),
            source,
        }
    }
}
