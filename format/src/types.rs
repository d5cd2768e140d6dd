//! The values a recording holds, as writer and reader see them.

use serde::{Deserialize, Serialize};

/// Index into the recording's string table.
pub type StringId = u32;
/// Index into the module table.
pub type ModuleId = u32;
/// Index into the frame table.
pub type FrameId = u32;
/// A node of the stack prefix tree; `0` is the empty stack (the root).
pub type StackId = u32;

/// What the recording is of, written once at the start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The profiled command line, empty for `--pid` and `--all-cpus`.
    pub command: Vec<String>,
    /// What was recorded: `command`, `pid` or `system`.
    pub target: String,
    /// Host name of the recording machine.
    pub host: String,
    /// `uname -r` of the recording machine.
    pub kernel_release: String,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Event name as given to `record -e`.
    pub event: String,
    /// Requested samples per second per CPU (0 for tracepoint events).
    pub frequency_hz: u64,
    /// `fp` or `dwarf`.
    pub call_graph: String,
    /// What one unit of sample weight means: `samples` or `ns`.
    pub weight_unit: String,
    /// Version of the flamerec that wrote the file.
    pub flamerec_version: String,
    /// The recorder meant to embed user-space names after the trailer
    /// (format 1.1; absent in older files).
    #[serde(default)]
    pub embeds_names: bool,
    /// A window of a continuous recording (`flamerec agent`): which one,
    /// and the part of the stream it holds. Absent in other recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

/// One window cut from a continuous recording.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Counts up from 0 in each run of the agent.
    pub index: u64,
    /// The window's start, nanoseconds since the Unix epoch (the file's
    /// `start_unix_ns` is the same instant).
    pub start_unix_ns: u64,
    /// Its length in nanoseconds.
    pub duration_ns: u64,
    /// When the agent that cut it started, nanoseconds since the Unix
    /// epoch: windows of one run share it.
    pub run_unix_ns: u64,
}

/// Totals written in the trailer; their presence marks a complete file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Samples written.
    pub samples: u64,
    /// Sum of sample weights.
    pub weight: u64,
    /// Samples the kernel dropped (ring buffer overruns).
    pub lost_samples: u64,
    /// Recording length in nanoseconds.
    pub duration_ns: u64,
    /// Distinct processes seen.
    pub processes: u64,
    /// Distinct threads seen.
    pub threads: u64,
    /// Stacks known to be cut short (unwinding stopped before the thread's entry).
    #[serde(default)]
    pub truncated_stacks: u64,
    /// Stacks deeper than their copied slice that were completed from the
    /// live thread's memory (format 1.1).
    #[serde(default)]
    pub completed_stacks: u64,
    /// Samples lost per CPU ring, as (CPU, count), for the CPUs that lost any
    /// (format 2.0; absent in older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_per_cpu: Vec<(u32, u64)>,
    /// Of the lost samples, those lost while the recorder was waiting for a
    /// CPU (every core busy) rather than because a ring was too small.
    #[serde(default)]
    pub lost_starved: u64,
    /// `-g fp,defer`: samples joined with the user part the kernel walked
    /// when their thread returned to user space. Absent in files of older
    /// recorders and of other modes; readers that do not know it skip it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred_stitched: u64,
    /// `-g fp,defer`: samples whose user part never came (the thread exited,
    /// or recording stopped, first); they hold their kernel frames only.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred_unmatched_samples: u64,
    /// `-g fp,defer`: user parts whose samples never came (lost).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deferred_orphan_records: u64,
    /// The longest time between two reads of the rings, and where the
    /// recorder spent it: what names the cause when a ring overran.
    /// Absent in files of older recorders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_read_gap: Option<ReadGap>,
    /// Of the intervals a lost record can describe (the two before each
    /// round that read one), the longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_gap_before_loss: Option<ReadGap>,
    /// The CPython versions whose Python frames were read, and how it
    /// went. Absent in files of older recorders and where no CPython ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PythonRead>,
    /// Frames of anonymous executable memory (JIT code), by where their
    /// names came from. Absent in files of older recorders and where there
    /// were none.
    #[serde(default, skip_serializing_if = "JitFrames::is_empty")]
    pub jit_frames: JitFrames,
}

/// Frames of anonymous executable memory in a recording, by where their
/// names came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JitFrames {
    /// Named by a perf map line in force at the sample's time.
    pub perf_map: u64,
    /// Named by a jitdump load in force at the sample's time.
    pub jitdump: u64,
    /// Named at the end of the recording, by the one name every line and
    /// load that ever covered the address gives (a map written at exit).
    pub at_end: u64,
    /// Named by nothing.
    pub unnamed: u64,
}

impl JitFrames {
    /// No such frame.
    pub fn is_empty(&self) -> bool {
        *self == JitFrames::default()
    }
}

/// The Python frames of one CPython version's processes in a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PythonRead {
    /// The version, `3.12.1`.
    pub version: String,
    /// How its frames were read: `at-sample` (walked in the kernel at
    /// each sample).
    pub read: String,
    /// Its processes.
    pub processes: u64,
    /// Samples of its threads whose Python frames were shown.
    pub samples_with_frames: u64,
    /// Samples of its threads that kept their native frames only.
    pub samples_native_only: u64,
}

/// Who a process was, beyond its pid: where it ran (its cgroup, and the
/// container a runtime's cgroup name gives) and its pid as it saw itself.
/// Written once per process, when the recorder first meets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// ns since start.
    pub time_ns: u64,
    /// Process id (the recording's, the host's).
    pub pid: u32,
    /// Its pid in its own pid namespace (the same as `pid` on the host).
    pub ns_pid: u32,
    /// Its cgroup v2 path, `/` for the root; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cgroup: String,
    /// Its container's runtime (`docker`, `podman`, `containerd`, `cri-o`),
    /// empty when it ran on the host (no runtime's cgroup name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub runtime: String,
    /// Its container's id (64 hex digits), empty on the host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container: String,
    /// Its executable's path as the process sees it (`/proc/PID/exe`),
    /// empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub executable: String,
}

impl Identity {
    /// The container as fold and info show it: `podman:0123456789ab` (the
    /// id's first 12 digits, as the runtimes print it), or `host`.
    pub fn container_label(&self) -> String {
        if self.container.is_empty() {
            "host".to_string()
        } else {
            let short = self.container.get(..12).unwrap_or(&self.container);
            format!("{}:{short}", self.runtime)
        }
    }
}

/// One interval between two reads of the rings, in microseconds: its
/// length, the recorder thread's time on a CPU and waiting for one
/// (scheduler statistics; the rest it slept or was blocked), and the
/// recorder's loop phases it was spent in (the rest is bookkeeping).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadGap {
    /// From one read of the rings to the next.
    pub gap_us: u64,
    /// Of it, the draining thread ran on a CPU.
    pub on_cpu_us: u64,
    /// Of it, the draining thread waited for a CPU.
    pub waited_us: u64,
    /// Of it, waiting for the rings to fill (poll).
    pub poll_us: u64,
    /// Of it, reading and handling the samples (unwinding, live reads).
    pub drain_us: u64,
    /// Of it, handing new frames to the naming threads.
    pub names_us: u64,
    /// Of it, compressing a chunk and handing it to the output.
    pub write_us: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What kind of code a module holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModuleKind {
    /// A mapped ELF file; frame addresses are file offsets.
    File,
    /// The kernel image; frame addresses are absolute.
    Kernel,
    /// The vDSO; frame addresses are offsets from its start.
    Vdso,
    /// Memory that is not backed by a file (JIT code, anonymous); absolute addresses.
    Anonymous,
}

impl ModuleKind {
    pub(crate) fn code(self) -> u8 {
        match self {
            ModuleKind::File => 0,
            ModuleKind::Kernel => 1,
            ModuleKind::Vdso => 2,
            ModuleKind::Anonymous => 3,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => ModuleKind::File,
            1 => ModuleKind::Kernel,
            2 => ModuleKind::Vdso,
            3 => ModuleKind::Anonymous,
            _ => return None,
        })
    }
}

/// A binary (or pseudo-binary) code was sampled in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Module {
    /// Kind of code.
    pub kind: ModuleKind,
    /// Path as mapped (`[kernel.kallsyms]`, `[vdso]`, `[anon]` for pseudo modules).
    pub path: String,
    /// GNU build id, empty when unknown.
    pub build_id: Vec<u8>,
}

impl Module {
    /// The module of a mapped path, classified as perf reports it: a file
    /// (an absolute path), the vDSO, or memory no file backs (`//anon`,
    /// `/memfd:` JIT code, `[heap]`; plain `//anon` and an empty path are
    /// both `[anon]`). The recorder and the perf.data importer both use it,
    /// so one mapping becomes the same module whichever way it came.
    pub fn mapped(path: &str, build_id: &[u8]) -> Module {
        let kind = if path == "[vdso]" {
            ModuleKind::Vdso
        } else if path.starts_with('/')
            && !path.starts_with("//anon")
            && !path.starts_with("/memfd:")
        {
            ModuleKind::File
        } else {
            ModuleKind::Anonymous
        };
        let path = if path.is_empty() || path.starts_with("//anon") {
            "[anon]".to_string()
        } else {
            path.to_string()
        };
        Module {
            kind,
            path,
            build_id: build_id.to_vec(),
        }
    }
}

/// One frame: a code address inside a module.
///
/// Addresses of caller frames are already moved back into the call
/// instruction (return address − 1), so every address can be looked up as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Module the address belongs to.
    pub module: ModuleId,
    /// File offset for [`ModuleKind::File`], offset from the start for
    /// [`ModuleKind::Vdso`], absolute otherwise.
    pub address: u64,
}

/// A kernel symbol that recorded kernel addresses fall into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Start address.
    pub start: u64,
    /// Length in bytes (up to the next symbol).
    pub size: u64,
    /// Symbol name.
    pub name: String,
    /// Kernel module name, empty for the kernel image.
    pub module: String,
}

/// One sample: when, who, which stack, how much it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Nanoseconds since the recording started (stored with 1 µs resolution).
    pub time_ns: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Leaf node of the stack prefix tree.
    pub stack: StackId,
    /// How much the sample counts, in [`Metadata::weight_unit`].
    pub weight: u64,
}

/// A memory mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Nanoseconds since the recording started (0 for mappings found at start).
    pub time_ns: u64,
    /// Process id.
    pub pid: u32,
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The mapped module.
    pub module: ModuleId,
}

/// Everything in a recording other than the interned tables, in stream order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The recording's metadata (first in every file).
    Metadata(Metadata),
    /// A thread got a name (at start, on `exec`, or by `prctl`).
    Comm {
        /// ns since start.
        time_ns: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The name.
        name: String,
        /// The name came from an `exec`.
        exec: bool,
    },
    /// A process or thread was created.
    Fork {
        /// ns since start.
        time_ns: u64,
        /// New process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
    },
    /// A thread exited.
    Exit {
        /// ns since start.
        time_ns: u64,
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
    },
    /// A new mapping.
    Mapping(Mapping),
    /// A process's identity (format 2.1; older files have none).
    Identity(Identity),
    /// A run of samples, in time order.
    Samples(Vec<Sample>),
    /// The kernel dropped samples.
    Lost {
        /// ns since start.
        time_ns: u64,
        /// How many.
        count: u64,
    },
    /// Trailer: the file is complete.
    Totals(Totals),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_mapped_paths() {
        assert_eq!(Module::mapped("[vdso]", &[]).kind, ModuleKind::Vdso);
        let exe = Module::mapped("/usr/bin/python3", &[1]);
        assert_eq!((exe.kind, exe.build_id), (ModuleKind::File, vec![1]));
        assert_eq!(Module::mapped("//anon", &[]).path, "[anon]");
        assert_eq!(Module::mapped("", &[]).path, "[anon]");
        let jit = Module::mapped("/memfd:jit (deleted)", &[]);
        assert_eq!(
            (jit.kind, jit.path.as_str()),
            (ModuleKind::Anonymous, "/memfd:jit (deleted)")
        );
        assert_eq!(Module::mapped("[heap]", &[]).kind, ModuleKind::Anonymous);
    }

    #[test]
    fn totals_of_older_files_read_with_no_deferred_counts() {
        // A 2.0 trailer, as written before the deferred counts existed.
        let old = r#"{"samples":5,"weight":5,"lost_samples":0,"duration_ns":1,"processes":1,"threads":1,"truncated_stacks":0,"completed_stacks":0,"lost_starved":0}"#;
        let t: Totals = serde_json::from_str(old).unwrap();
        assert_eq!(
            (
                t.deferred_stitched,
                t.deferred_unmatched_samples,
                t.deferred_orphan_records
            ),
            (0, 0, 0)
        );
        // Zero counts are not written, so files of the other modes keep
        // their 2.0 trailer byte for byte.
        assert_eq!(serde_json::to_string(&t).unwrap(), old);
    }

    #[test]
    fn deferred_counts_round_trip() {
        let t = Totals {
            deferred_stitched: 40,
            deferred_unmatched_samples: 2,
            deferred_orphan_records: 1,
            ..Default::default()
        };
        let back: Totals = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
