//! What a capture returns: per process, per thread, the state, how the
//! stack was taken, how long the thread was held, and the named frames,
//! leaf first. These types are also the JSON output (`flamerec-stacks/1`,
//! see the crate docs), so a field renamed here is a schema change.
//!
//! This module holds data only: no capturing, no formatting beyond the
//! one-line messages of the problems.

use serde::{Serialize, Serializer};

/// The `schema` value of the JSON output.
pub const SCHEMA: &str = "flamerec-stacks/1";

/// Everything one capture found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// Wall time of the capture of all threads, from the first /proc read to
    /// the last stack copy (naming the frames afterwards not included).
    pub capture_ns: u64,
    /// What is missing from every stack and how to get it (privileges), and
    /// symbolization warnings; each said once.
    pub notes: Vec<String>,
    /// Asked-for ids that gave no process.
    pub errors: Vec<TargetError>,
    /// The processes, in the order asked.
    pub processes: Vec<Process>,
}

impl Report {
    /// Whether any thread has at least one frame.
    pub fn has_frames(&self) -> bool {
        self.processes
            .iter()
            .flat_map(|p| &p.threads)
            .any(|t| !t.frames.is_empty())
    }
}

/// One process and the threads captured.
#[derive(Debug, Clone, Serialize)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Its name (the main thread's).
    pub name: String,
    /// Why some or all of its threads have no stack, if a reason concerns
    /// the whole process.
    #[serde(serialize_with = "display_opt")]
    pub error: Option<ProcessError>,
    /// Its threads, by ascending thread id.
    pub threads: Vec<Thread>,
}

/// One thread.
#[derive(Debug, Clone, Serialize)]
pub struct Thread {
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub name: String,
    /// State letter from /proc (`R`, `S`, `D`, `T`, `t`, `Z`, `I`…), when
    /// the capture began.
    #[serde(serialize_with = "display")]
    pub state: char,
    /// The state in words (`running`, `sleeping`…).
    pub state_name: &'static str,
    /// A kernel thread: it has no user part.
    pub kernel_thread: bool,
    /// How the stack was taken.
    pub how: Method,
    /// How long the thread was stopped for it, in ns (0 unless `ptrace`).
    pub held_ns: u64,
    /// How long capturing this thread took, in ns (for a running thread,
    /// mostly the wait for its sample).
    pub capture_ns: u64,
    /// The user part did not reach the thread's entry (unwinding stopped
    /// early).
    pub truncated: bool,
    /// What is missing or doubtful about this thread's stack.
    #[serde(serialize_with = "display_opt")]
    pub error: Option<ThreadError>,
    /// Frames, leaf first: kernel frames, then user frames with inlined
    /// functions expanded (innermost first).
    pub frames: Vec<Frame>,
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// Function name; `module+0xOFFSET` when unknown.
    pub name: String,
    /// Module basename (`libc.so.6`, `[kernel.kallsyms]`, `[xfs]`).
    pub module: String,
    /// Kernel or user.
    pub kind: FrameKind,
    /// Inlined into the frame below it (its caller, the next non-inlined
    /// frame in leaf-first order).
    pub inlined: bool,
}

/// Which side of the system call boundary a frame is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FrameKind {
    /// Kernel code.
    Kernel,
    /// User code.
    User,
}

/// How a thread's stack was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// One perf sample of the running thread: the kernel's callchain, its
    /// user registers and a copy of its user stack. Not stopped.
    PerfSample,
    /// An off-CPU thread: kernel stack from /proc/PID/task/TID/stack, user
    /// stack and program counter from /proc/PID/task/TID/syscall, the stack
    /// memory read while it stayed off CPU. Not stopped.
    SyscallFile,
    /// An off-CPU kernel thread: /proc/PID/task/TID/stack alone.
    StackFile,
    /// The thread was stopped with ptrace, its registers and stack read,
    /// and let go.
    Ptrace,
    /// No stack could be taken (see the thread's error).
    None,
}

impl Method {
    /// The name in the JSON output and in `-v` text.
    pub fn name(self) -> &'static str {
        match self {
            Method::PerfSample => "perf-sample",
            Method::SyscallFile => "syscall-file",
            Method::StackFile => "stack-file",
            Method::Ptrace => "ptrace",
            Method::None => "none",
        }
    }
}

/// An asked-for id that gave no process.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// No process or thread has this id.
    #[error("{id}: no such process or thread")]
    NotFound {
        /// The id asked for.
        id: u32,
    },
    /// The id is flamerec's own process.
    #[error("{id}: that is flamerec itself; its threads are busy taking the stacks")]
    IsSelf {
        /// The id asked for.
        id: u32,
    },
}

impl TargetError {
    /// The id asked for.
    pub fn id(&self) -> u32 {
        match self {
            TargetError::NotFound { id } | TargetError::IsSelf { id } => *id,
        }
    }
}

impl Serialize for TargetError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("TargetError", 2)?;
        st.serialize_field("id", &self.id())?;
        st.serialize_field("error", &self.to_string())?;
        st.end()
    }
}

/// Why a process has no (or fewer) stacks.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// It exited before or while its threads were captured.
    #[error("process {pid} exited during the capture")]
    Exited {
        /// Process id.
        pid: u32,
    },
    /// It exited but its parent has not reaped it.
    #[error("process {pid} is a zombie: it has exited and its parent {ppid} has not reaped it; no stacks")]
    Zombie {
        /// Process id.
        pid: u32,
        /// The parent that should reap it.
        ppid: u32,
    },
    /// /proc refused to list its threads.
    #[error("cannot list the threads of process {pid}: {reason}")]
    Unreadable {
        /// Process id.
        pid: u32,
        /// The system's answer.
        reason: String,
    },
}

/// What is missing or doubtful about one thread's stack.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// The thread exited between being listed and being captured.
    #[error("thread {tid} exited during the capture")]
    Vanished {
        /// Thread id.
        tid: u32,
    },
    /// The thread has exited; its process lives on (a leader that called
    /// `pthread_exit`).
    #[error("thread {tid} has exited (zombie); no stack")]
    Zombie {
        /// Thread id.
        tid: u32,
    },
    /// The thread is the one taking the stacks.
    #[error("thread {tid} is the thread taking the stacks")]
    Capturing {
        /// Thread id.
        tid: u32,
    },
    /// It kept running and no sample came.
    #[error("thread {tid} is running but gave no stack within {waited_ms} ms ({why})")]
    NoSample {
        /// Thread id.
        tid: u32,
        /// How long flamerec waited for a sample.
        waited_ms: u64,
        /// Why the other ways did not work either.
        why: String,
    },
    /// The user part could not be read.
    #[error("thread {tid}: no user stack: {reason}")]
    NoUserStack {
        /// Thread id.
        tid: u32,
        /// The system's answer.
        reason: String,
    },
    /// The thread ran while its stack was read (twice): kernel and user
    /// frames may come from two moments.
    #[error("thread {tid} ran while its stack was read; frames may mix two moments")]
    Moved {
        /// Thread id.
        tid: u32,
    },
}

fn display<S: Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn display_opt<S: Serializer, T: std::fmt::Display>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// The state letter of /proc/PID/stat in words.
pub fn state_name(state: char) -> &'static str {
    match state {
        'R' => "running",
        'S' => "sleeping",
        'D' => "disk sleep",
        'T' => "stopped",
        't' => "tracing stop",
        'Z' => "zombie",
        'X' => "dead",
        'I' => "idle",
        'P' => "parked",
        'W' => "waking",
        'K' => "wakekill",
        _ => "unknown",
    }
}
