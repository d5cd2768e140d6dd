//! Workloads whose profile is known by construction, and a builder for them.
//!
//! Each workload is one self-contained Rust source file under `src/bin/` (no dependencies,
//! no sibling modules), so it is both a cargo `[[bin]]` of this crate — for the README demo —
//! and a file that [`build`] compiles directly with `rustc`, with or without frame pointers.
//! Tests record the built binary with the profiler and compare the shares of its named
//! functions with [`Sample::expected`], within [`TOLERANCE_PCT`].
//!
//! This crate owns the workloads and how they are compiled; it must not depend on the
//! profiler's crates, so that a profiler bug can never change what a workload does.
//!
//! Everything this crate knows about a workload — its name, source file, work flag and
//! default, expected profile, tasks, depth and debug info — is one entry of the `SPECS`
//! table; the [`Sample`] methods look it up there.
//!
//! Adding a workload: write `src/bin/NAME.rs` in the same pattern (named work functions
//! `#[no_mangle]` and `#[inline(never)]`, one work-size flag, a default of about one
//! second), add a [`Sample`] variant (last, and to [`Sample::ALL`]) and its entry at the end
//! of `SPECS`, and describe it in the README and in the comment of `Cargo.toml`.

use std::collections::hash_map::DefaultHasher;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};

/// How far a measured share may be from the expected one, in percentage points.
pub const TOLERANCE_PCT: f64 = 5.0;

/// A workload with a known profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Sample {
    /// `cpu-mix`: CPU work split 50/30/20 by work units across `cpu_mix_alpha`,
    /// `cpu_mix_beta` and `cpu_mix_gamma`, called in interleaved rounds from `cpu_mix_run`.
    /// Work size: `--units N` (default 285,000 ≈ 1 s).
    CpuMix,
    /// `syscall-loop`: `read` 64 KiB from `/dev/zero` and `write` them to `/dev/null`, over
    /// and over, from `syscall_loop_run` through `syscall_loop_read` / `syscall_loop_write`;
    /// nearly all time is kernel time. Work size: `--iterations N` (default 1,200,000 ≈ 1 s).
    SyscallLoop,
    /// `threads`: three threads (`worker-a`, `-b`, `-c`) doing 1 : 2 : 3 sixths of the work
    /// in `threads_worker_a`, `threads_worker_b` and `threads_worker_c`; the main thread only
    /// waits. Work size: `--units N` (default 285,000 ≈ 1 s of CPU in all).
    Threads,
    /// `proc-tree`: a parent (`proc_tree_parent`, 20%), a fork + exec'd child
    /// (`proc_tree_child`, 30%) and a shell pipeline of a producer (`proc_tree_producer`,
    /// 25%) into a consumer (`proc_tree_consumer`, 25%), all processes of the same binary.
    /// Work size: `--units N` (default 285,000 ≈ 1 s of CPU in all).
    ProcTree,
    /// `sleeper`: rounds of CPU work in `sleeper_spin` (≈ 20 ms), a 20 ms sleep in
    /// `sleeper_short` and a 60 ms sleep in `sleeper_long`: off CPU 25 / 75%, on CPU nearly
    /// all `sleeper_spin`. Work size: `--rounds N` (default 10 ≈ 1 s of wall time).
    Sleeper,
    /// `inline-heavy`: the split of cpu-mix (50/30/20) in `#[inline(always)]` helpers
    /// `inline_heavy_alpha`, `_beta`, `_gamma`, all inlined into `inline_heavy_run`; built
    /// with full debug info so that the inlined frames can be recovered. Work size:
    /// `--units N` (default 285,000 ≈ 1 s).
    InlineHeavy,
    /// `recursion`: `recursion_descend` recursing 250 levels (251 frames) below
    /// `recursion_run`, with all the work in `recursion_leaf` at the bottom. Work size:
    /// `--units N` (default 285,000 ≈ 1 s).
    Recursion,
    /// `deep-stack`: two threads (the main one and `deep-2`) each recursing 100 levels
    /// (101 frames of 2 KiB, over 200 KiB of stack) through `deep_stack_descend_a` below
    /// `deep_stack_run`, with the work in `deep_stack_leaf`: stacks deeper than any copy a
    /// sample carries. `--alternate` alternates rounds with an equally deep chain of
    /// `deep_stack_descend_b`. Work size: `--units N` (default 285,000 ≈ 1 s in all).
    DeepStack,
}

/// Which share of the samples an [`ExpectedShare`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShareKind {
    /// Samples whose leaf (innermost) frame is the function — `self_pct` in the JSON summary.
    SelfPct,
    /// Samples with the function anywhere in their stack, counted once — `total_pct`.
    TotalPct,
}

/// Whether a folded frame is `function`: its name exactly, or a path ending in it
/// (`inline_heavy::inline_heavy_alpha` for `inline_heavy_alpha`: inlined functions cannot be
/// `#[no_mangle]`, so their debug-info names carry the crate path).
pub fn frame_is(frame: &str, function: &str) -> bool {
    frame == function
        || frame
            .strip_suffix(function)
            .is_some_and(|path| path.ends_with("::"))
}

/// One line of a sample's expected profile: a function and its share of all the samples
/// of the workload's process, in percent, to be matched within [`TOLERANCE_PCT`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpectedShare {
    /// Plain symbol name of the function (`#[no_mangle]`), or for an inlined function its
    /// last path segment; see [`frame_is`].
    pub function: &'static str,
    /// Whether `pct` is a self or a total share.
    pub kind: ShareKind,
    /// Expected share in percent of all samples (0–100).
    pub pct: f64,
}

impl ExpectedShare {
    /// Whether a measured share (in percent) is within [`TOLERANCE_PCT`] of the expected one.
    pub fn matches(&self, measured_pct: f64) -> bool {
        (measured_pct - self.pct).abs() <= TOLERANCE_PCT
    }
}

/// Which kind of task an [`ExpectedTask`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// A process: `fold --per-process` roots (`comm-PID`).
    Process,
    /// A thread: `fold --per-thread` roots (`comm-PID/TID`).
    Thread,
}

/// How a sample's work splits across its processes or threads: the one task whose samples
/// contain `function` holds `pct` percent of all the samples (within [`TOLERANCE_PCT`]),
/// and each function of a sample's list runs in a different task.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpectedTask {
    /// The function only this task runs (plain symbol name).
    pub function: &'static str,
    /// Whether the task is a process or a thread.
    pub kind: TaskKind,
    /// Expected share of the task in percent of all samples (0–100).
    pub pct: f64,
}

impl ExpectedTask {
    /// Whether a measured share (in percent) is within [`TOLERANCE_PCT`] of the expected one.
    pub fn matches(&self, measured_pct: f64) -> bool {
        (measured_pct - self.pct).abs() <= TOLERANCE_PCT
    }
}

/// A stack depth a sample reaches: in (nearly) every sample with `leaf` as its leaf, the
/// stack holds `function` at least `frames` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedDepth {
    /// The function that recurses.
    pub function: &'static str,
    /// How many frames of it a whole stack holds.
    pub frames: usize,
    /// The function at the bottom of the recursion, where the work is.
    pub leaf: &'static str,
}

/// How much debug information a sample is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DebugInfo {
    /// `-C debuginfo=line-tables-only`: function names and lines, no inlined frames.
    LineTables,
    /// `-C debuginfo=2`: everything, including inlined subroutines.
    Full,
}

/// Everything known about one workload; each [`Sample`] method returns one of its fields.
struct Spec {
    /// The sample this is; `SPECS` is in the order of the enum (checked at compile time).
    sample: Sample,
    /// [`Sample::name`]: the binary's name, and the stem of its source file.
    name: &'static str,
    /// [`Sample::source_path`].
    source: &'static str,
    /// [`Sample::work_flag`].
    work_flag: &'static str,
    /// [`Sample::default_work`].
    default_work: u64,
    /// [`Sample::debug_info`].
    debug_info: DebugInfo,
    /// [`Sample::expected`].
    expected: &'static [ExpectedShare],
    /// [`Sample::expected_off_cpu`].
    expected_off_cpu: &'static [ExpectedShare],
    /// [`Sample::tasks`].
    tasks: &'static [ExpectedTask],
    /// [`Sample::expected_depth`].
    expected_depth: Option<ExpectedDepth>,
    /// [`Sample::min_kernel_pct`].
    min_kernel_pct: f64,
}

/// The path of `src/bin/NAME.rs` in this crate.
macro_rules! bin_source {
    ($name:literal) => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin/", $name, ".rs")
    };
}

const fn self_pct(function: &'static str, pct: f64) -> ExpectedShare {
    ExpectedShare {
        function,
        kind: ShareKind::SelfPct,
        pct,
    }
}

const fn total_pct(function: &'static str, pct: f64) -> ExpectedShare {
    ExpectedShare {
        function,
        kind: ShareKind::TotalPct,
        pct,
    }
}

const fn thread(function: &'static str, pct: f64) -> ExpectedTask {
    ExpectedTask {
        function,
        kind: TaskKind::Thread,
        pct,
    }
}

const fn process(function: &'static str, pct: f64) -> ExpectedTask {
    ExpectedTask {
        function,
        kind: TaskKind::Process,
        pct,
    }
}

/// Every workload's facts, one entry per [`Sample`], in the order of [`Sample::ALL`].
const SPECS: &[Spec] = &[
    Spec {
        sample: Sample::CpuMix,
        name: "cpu-mix",
        source: bin_source!("cpu-mix"),
        work_flag: "--units",
        default_work: 285_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // Rounds of 5 + 3 + 2 units of an identical loop body: the split is exact by
            // construction (timing each call gives 49.9 / 30.0 / 20.1).
            self_pct("cpu_mix_alpha", 50.0),
            self_pct("cpu_mix_beta", 30.0),
            self_pct("cpu_mix_gamma", 20.0),
            // Everything but process start-up and exit runs under it; needs full unwinding.
            total_pct("cpu_mix_run", 100.0),
        ],
        expected_off_cpu: &[],
        tasks: &[],
        expected_depth: None,
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::SyscallLoop,
        name: "syscall-loop",
        source: bin_source!("syscall-loop"),
        work_flag: "--iterations",
        default_work: 1_200_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // Only this is by construction. How the time splits between read and write
            // depends on the kernel and CPU (measured ≈ 80 / 20 on a 2-core AMD EPYC VM,
            // kernel 6.1), so it is left out; `min_kernel_pct` is the kernel side.
            total_pct("syscall_loop_run", 100.0),
        ],
        expected_off_cpu: &[],
        tasks: &[],
        expected_depth: None,
        // Measured 86.7%; see `Sample::min_kernel_pct`.
        min_kernel_pct: 75.0,
    },
    Spec {
        sample: Sample::Threads,
        name: "threads",
        source: bin_source!("threads"),
        work_flag: "--units",
        default_work: 285_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // 1 : 2 : 3 sixths of identical units.
            self_pct("threads_worker_a", 100.0 / 6.0),
            self_pct("threads_worker_b", 200.0 / 6.0),
            self_pct("threads_worker_c", 50.0),
        ],
        expected_off_cpu: &[],
        tasks: &[
            thread("threads_worker_a", 100.0 / 6.0),
            thread("threads_worker_b", 200.0 / 6.0),
            thread("threads_worker_c", 50.0),
        ],
        expected_depth: None,
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::ProcTree,
        name: "proc-tree",
        source: bin_source!("proc-tree"),
        work_flag: "--units",
        default_work: 285_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // 4 : 6 : 5 : 5 twentieths of identical units.
            self_pct("proc_tree_parent", 20.0),
            self_pct("proc_tree_child", 30.0),
            self_pct("proc_tree_producer", 25.0),
            self_pct("proc_tree_consumer", 25.0),
        ],
        expected_off_cpu: &[],
        tasks: &[
            process("proc_tree_parent", 20.0),
            process("proc_tree_child", 30.0),
            process("proc_tree_producer", 25.0),
            process("proc_tree_consumer", 25.0),
        ],
        expected_depth: None,
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::Sleeper,
        name: "sleeper",
        source: bin_source!("sleeper"),
        work_flag: "--rounds",
        default_work: 10,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // On CPU only the spin works; start-up and the wake-ups are a few samples of
            // ~200.
            self_pct("sleeper_spin", 100.0),
        ],
        expected_off_cpu: &[
            // Sleeps of 20 and 60 ms per round. The spin never blocks: preempted on a busy
            // machine it is still runnable, which the recorder does not count as off CPU.
            total_pct("sleeper_short", 25.0),
            total_pct("sleeper_long", 75.0),
        ],
        tasks: &[],
        expected_depth: None,
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::InlineHeavy,
        name: "inline-heavy",
        source: bin_source!("inline-heavy"),
        work_flag: "--units",
        default_work: 285_000,
        // The helpers exist only as DWARF inlined subroutines.
        debug_info: DebugInfo::Full,
        expected: &[
            // As cpu-mix, but the leaves are inlined frames: they need DWARF inline
            // information.
            self_pct("inline_heavy_alpha", 50.0),
            self_pct("inline_heavy_beta", 30.0),
            self_pct("inline_heavy_gamma", 20.0),
            total_pct("inline_heavy_run", 100.0),
        ],
        expected_off_cpu: &[],
        tasks: &[],
        expected_depth: None,
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::Recursion,
        name: "recursion",
        source: bin_source!("recursion"),
        work_flag: "--units",
        default_work: 285_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            self_pct("recursion_leaf", 100.0),
            total_pct("recursion_descend", 100.0),
        ],
        expected_off_cpu: &[],
        tasks: &[],
        // 250 levels below the first call: 251 frames.
        expected_depth: Some(ExpectedDepth {
            function: "recursion_descend",
            frames: 251,
            leaf: "recursion_leaf",
        }),
        min_kernel_pct: 0.0,
    },
    Spec {
        sample: Sample::DeepStack,
        name: "deep-stack",
        source: bin_source!("deep-stack"),
        work_flag: "--units",
        default_work: 285_000,
        debug_info: DebugInfo::LineTables,
        expected: &[
            // Everything but start-up, the thread's creation and exit is at the bottom.
            self_pct("deep_stack_leaf", 100.0),
            total_pct("deep_stack_run", 100.0),
        ],
        expected_off_cpu: &[],
        // Two threads (halves of the units) that run the same functions: none tells them
        // apart, so no task split is expected.
        tasks: &[],
        // 100 levels below the first call: 101 frames.
        expected_depth: Some(ExpectedDepth {
            function: "deep_stack_descend_a",
            frames: 101,
            leaf: "deep_stack_leaf",
        }),
        min_kernel_pct: 0.0,
    },
];

// `Sample::spec` indexes `SPECS` by discriminant: every sample has its entry, in order.
const _: () = {
    assert!(SPECS.len() == Sample::ALL.len());
    let mut i = 0;
    while i < SPECS.len() {
        assert!(SPECS[i].sample as usize == i && Sample::ALL[i] as usize == i);
        i += 1;
    }
};

impl Sample {
    /// Every sample, in a stable order.
    pub const ALL: &'static [Sample] = &[
        Sample::CpuMix,
        Sample::SyscallLoop,
        Sample::Threads,
        Sample::ProcTree,
        Sample::Sleeper,
        Sample::InlineHeavy,
        Sample::Recursion,
        Sample::DeepStack,
    ];

    /// The sample's entry in `SPECS`.
    const fn spec(self) -> &'static Spec {
        &SPECS[self as usize]
    }

    /// The binary's name, e.g. `cpu-mix` (also the stem of its source file).
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// The path of the sample's source file.
    pub fn source_path(self) -> &'static Path {
        Path::new(self.spec().source)
    }

    /// The expected on-CPU profile (`cpu-clock`, `task-clock`), as shares of all samples of
    /// the sample's processes when it runs its default work size (shorter runs let process
    /// start-up weigh in).
    pub const fn expected(self) -> &'static [ExpectedShare] {
        self.spec().expected
    }

    /// The expected off-CPU profile (`-e off-cpu`), as shares of the total blocked time
    /// (the sum of the sample weights); empty when the sample's blocking is incidental.
    pub const fn expected_off_cpu(self) -> &'static [ExpectedShare] {
        self.spec().expected_off_cpu
    }

    /// How the on-CPU samples split across processes or threads; empty for a sample that
    /// runs in one thread (or whose other threads are incidental).
    pub const fn tasks(self) -> &'static [ExpectedTask] {
        self.spec().tasks
    }

    /// The stack depth a whole stack of this sample reaches, if that is the point of it.
    pub const fn expected_depth(self) -> Option<ExpectedDepth> {
        self.spec().expected_depth
    }

    /// How much debug information [`build`] compiles the sample with.
    pub const fn debug_info(self) -> DebugInfo {
        self.spec().debug_info
    }

    /// The least share of samples, in percent, whose leaf frame is in the kernel.
    ///
    /// `syscall-loop` measured 86.7% (kernel 6.1, AMD EPYC VM, mitigations on); the bound
    /// leaves room for kernels with a cheaper syscall entry.
    pub const fn min_kernel_pct(self) -> f64 {
        self.spec().min_kernel_pct
    }

    /// Work size when no arguments are given: about one second of CPU on a modern core.
    pub const fn default_work(self) -> u64 {
        self.spec().default_work
    }

    /// The command-line flag that sets the work size.
    pub const fn work_flag(self) -> &'static str {
        self.spec().work_flag
    }

    /// Arguments that make the sample run `work` units of work (see [`Sample::default_work`]).
    pub fn args(self, work: u64) -> [String; 2] {
        [self.work_flag().to_owned(), work.to_string()]
    }
}

impl fmt::Display for Sample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a build keeps frame pointers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FramePointers {
    /// `-C force-frame-pointers=yes`: stacks unwind by walking `rbp`.
    Yes,
    /// The target default (none on x86-64): stacks need DWARF CFI to unwind.
    No,
}

/// Why a sample could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The sample's source file could not be read.
    #[error("cannot read the source of sample {sample} at {}: {source}", path.display())]
    ReadSource {
        /// The sample.
        sample: Sample,
        /// Its source path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The cache directory (or a build directory inside it) could not be created.
    #[error("cannot create the sample build directory {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The Rust compiler could not be started.
    #[error("cannot run the Rust compiler {rustc:?} (set RUSTC to use another): {source}")]
    SpawnRustc {
        /// The compiler command (env `RUSTC`, or `rustc`).
        rustc: OsString,
        /// The I/O error.
        source: io::Error,
    },
    /// The Rust compiler failed.
    #[error("{rustc:?} failed to build sample {sample} ({status}):\n{stderr}")]
    Compile {
        /// The sample.
        sample: Sample,
        /// The compiler command.
        rustc: OsString,
        /// Its exit status.
        status: ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The build directory could not be moved to its place in the cache.
    #[error("cannot move the built sample {} to {}: {source}", from.display(), to.display())]
    Install {
        /// The build directory rustc wrote the binary in.
        from: PathBuf,
        /// Its place in the cache.
        to: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// Compiles `sample` (or reuses a cached build) and returns the path of the binary.
///
/// The cache is `$FLAMEREC_SAMPLES_DIR` if set, else `flamerec-samples/` in the cargo target
/// directory of the running executable, else in the system temp directory; see
/// [`build_into`].
pub fn build(sample: Sample, fp: FramePointers) -> Result<PathBuf, BuildError> {
    build_into(&cache_dir(), sample, fp)
}

/// The directory [`build`] keeps binaries in.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLAMEREC_SAMPLES_DIR") {
        return PathBuf::from(dir);
    }
    // Cargo marks its target directory with CACHEDIR.TAG; test and bench executables live
    // a few levels below it (target/[triple/]profile/deps/).
    let target = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .find(|dir| dir.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
    });
    target
        .unwrap_or_else(std::env::temp_dir)
        .join("flamerec-samples")
}

/// Compiles `sample` into `dir` (created if missing) and returns the path of the binary.
///
/// The compiler is env `RUSTC`, or `rustc`; the flags are `-C opt-level=3
/// -C debuginfo=line-tables-only` (`-C debuginfo=2` for a sample whose
/// [`Sample::debug_info`] is [`DebugInfo::Full`]), plus `-C force-frame-pointers=yes` for
/// [`FramePointers::Yes`]. The binary is `DIR/NAME-{fp,nofp}-HASH/NAME`, named like the
/// sample so its process name is too; HASH covers the compiler command, the flags and the
/// source text, so an existing binary is reused and a changed source (or compiler setting)
/// is rebuilt. Safe to call concurrently, from threads or processes: each build compiles
/// in its own directory, which is renamed into place atomically.
pub fn build_into(dir: &Path, sample: Sample, fp: FramePointers) -> Result<PathBuf, BuildError> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    build_with(&rustc, dir, sample, fp)
}

/// What every sample program includes (`include!("../work.rs")`).
const SHARED_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/work.rs");

fn build_with(
    rustc: &OsStr,
    dir: &Path,
    sample: Sample,
    fp: FramePointers,
) -> Result<PathBuf, BuildError> {
    let source_path = sample.source_path();
    let source = fs::read(source_path).map_err(|source| BuildError::ReadSource {
        sample,
        path: source_path.to_path_buf(),
        source,
    })?;
    let flags = rustc_flags(sample, fp);
    // The programs include what they share: a change there is a change of each.
    let shared_path = Path::new(SHARED_SOURCE);
    let shared = fs::read(shared_path).map_err(|source| BuildError::ReadSource {
        sample,
        path: shared_path.to_path_buf(),
        source,
    })?;

    let mut hasher = DefaultHasher::new();
    (rustc, &flags, &source, &shared).hash(&mut hasher);
    let fp_tag = match fp {
        FramePointers::Yes => "fp",
        FramePointers::No => "nofp",
    };
    // The binary keeps the sample's own name, so its process name (comm) is the same in
    // every build; the build settings go into the directory's name.
    let slot = dir.join(format!(
        "{}-{fp_tag}-{:016x}",
        sample.name(),
        hasher.finish()
    ));
    let binary = slot.join(sample.name());
    if binary.is_file() {
        return Ok(binary);
    }

    let work_dir = unique_build_dir(dir, sample)?;
    let result = compile(rustc, &flags, sample, &work_dir).and_then(|()| {
        // Renaming a directory onto a non-empty one fails: then a concurrent build won,
        // and its binary is as good as ours.
        if fs::rename(&work_dir, &slot).is_ok() || binary.is_file() {
            return Ok(binary.clone());
        }
        // Something without the binary is in the way (a file, a half-deleted directory):
        // clear it and try once more.
        let _ = fs::remove_file(&slot).or_else(|_| fs::remove_dir_all(&slot));
        match fs::rename(&work_dir, &slot) {
            Ok(()) => Ok(binary.clone()),
            Err(_) if binary.is_file() => Ok(binary.clone()),
            Err(source) => Err(BuildError::Install {
                from: work_dir.clone(),
                to: slot.clone(),
                source,
            }),
        }
    });
    if work_dir.exists() {
        // Only litter if this fails; the build's own result matters more.
        let _ = fs::remove_dir_all(&work_dir);
    }
    result
}

fn rustc_flags(sample: Sample, fp: FramePointers) -> Vec<String> {
    let debug_info = match sample.debug_info() {
        DebugInfo::LineTables => "-Cdebuginfo=line-tables-only",
        DebugInfo::Full => "-Cdebuginfo=2",
    };
    let mut flags: Vec<String> = [
        "--edition=2021",
        "--crate-type=bin",
        "-Copt-level=3",
        debug_info,
    ]
    .map(String::from)
    .into();
    if fp == FramePointers::Yes {
        flags.push("-Cforce-frame-pointers=yes".to_owned());
    }
    // rustc would derive the crate name from the file stem, which has dashes.
    flags.push(format!("--crate-name={}", sample.name().replace('-', "_")));
    flags
}

/// Creates a fresh directory for one build, so concurrent builds never share rustc's
/// intermediate files.
fn unique_build_dir(dir: &Path, sample: Sample) -> Result<PathBuf, BuildError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    fs::create_dir_all(dir).map_err(|source| BuildError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!(
            ".build-{}-{}-{n}",
            sample.name(),
            std::process::id()
        ));
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            // Left behind by an earlier process with the same pid: take the next number.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(BuildError::CreateDir { path, source }),
        }
    }
}

fn compile(
    rustc: &OsStr,
    flags: &[String],
    sample: Sample,
    work_dir: &Path,
) -> Result<(), BuildError> {
    let output = Command::new(rustc)
        .args(flags)
        .arg("-o")
        .arg(work_dir.join(sample.name()))
        .arg(sample.source_path())
        .output()
        .map_err(|source| BuildError::SpawnRustc {
            rustc: rustc.to_owned(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Compile {
            sample,
            rustc: rustc.to_owned(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(binary: &Path, args: &[String]) -> std::process::Output {
        Command::new(binary)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()))
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn cpu_mix_builds_and_runs_with_and_without_frame_pointers() {
        let mut binaries = Vec::new();
        for fp in [FramePointers::Yes, FramePointers::No] {
            let binary = build(Sample::CpuMix, fp).expect("build cpu-mix");
            let output = run(&binary, &Sample::CpuMix.args(100));
            assert!(output.status.success(), "{fp:?}: {output:?}");
            assert!(
                output.stdout.is_empty(),
                "cpu-mix prints nothing: {output:?}"
            );
            let bytes = fs::read(&binary).expect("read binary");
            for name in [
                "cpu_mix_run",
                "cpu_mix_alpha",
                "cpu_mix_beta",
                "cpu_mix_gamma",
            ] {
                assert!(
                    contains(&bytes, name.as_bytes()),
                    "{fp:?}: no symbol {name}"
                );
            }
            binaries.push(binary);
        }
        assert_ne!(binaries[0], binaries[1]);
    }

    #[test]
    fn syscall_loop_builds_and_runs() {
        let binary = build(Sample::SyscallLoop, FramePointers::Yes).expect("build syscall-loop");
        let output = run(&binary, &Sample::SyscallLoop.args(100));
        assert!(output.status.success(), "{output:?}");
        let bytes = fs::read(&binary).expect("read binary");
        for name in [
            "syscall_loop_run",
            "syscall_loop_read",
            "syscall_loop_write",
        ] {
            assert!(contains(&bytes, name.as_bytes()), "no symbol {name}");
        }
    }

    /// Every function a sample's expectations name, plain (`inline_heavy::x` → `x`).
    fn named_functions(sample: Sample) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = sample
            .expected()
            .iter()
            .chain(sample.expected_off_cpu())
            .map(|e| e.function)
            .chain(sample.tasks().iter().map(|t| t.function))
            .chain(
                sample
                    .expected_depth()
                    .into_iter()
                    .flat_map(|d| [d.function, d.leaf]),
            )
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    #[test]
    fn every_sample_builds_runs_a_little_work_and_names_its_functions() {
        for &sample in Sample::ALL {
            let binary = build(sample, FramePointers::Yes).expect("build");
            // Small work sizes: a few milliseconds each (proc-tree still starts its tree).
            let work = if sample == Sample::Sleeper { 1 } else { 600 };
            let output = run(&binary, &sample.args(work));
            assert!(output.status.success(), "{sample}: {output:?}");
            assert!(output.stdout.is_empty(), "{sample} prints nothing");
            let bytes = fs::read(&binary).expect("read binary");
            let names = named_functions(sample);
            assert!(!names.is_empty(), "{sample} has an expected profile");
            for name in names {
                assert!(
                    contains(&bytes, name.as_bytes()),
                    "{sample}: no symbol or debug name {name}"
                );
            }
        }
    }

    #[test]
    fn inline_heavy_is_built_with_full_debug_info_and_the_others_are_not() {
        for &sample in Sample::ALL {
            let flags = rustc_flags(sample, FramePointers::No);
            let full = flags.iter().any(|f| f == "-Cdebuginfo=2");
            assert_eq!(full, sample == Sample::InlineHeavy, "{sample}: {flags:?}");
            assert_eq!(full, sample.debug_info() == DebugInfo::Full);
        }
        // The helpers exist only as inlined code, named in the debug info.
        let binary = build(Sample::InlineHeavy, FramePointers::No).expect("build");
        let bytes = fs::read(&binary).expect("read binary");
        assert!(
            contains(&bytes, b".debug_info"),
            "no DWARF in {}",
            binary.display()
        );
        assert!(contains(&bytes, b"inline_heavy_alpha"));
    }

    #[test]
    fn proc_tree_children_report_failures() {
        let binary = build(Sample::ProcTree, FramePointers::No).expect("build");
        let output = run(&binary, &["--role".to_owned(), "nobody".to_owned()]);
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        // A consumer fed something that is not a chunk size fails instead of guessing.
        let mut child = Command::new(&binary)
            .args(["--role", "consumer"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn consumer");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"12\nnot a number\n").expect("write");
        }
        let output = child.wait_with_output().expect("wait");
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(contains(&output.stderr, b"bad chunk"), "{output:?}");
    }

    #[test]
    fn expectations_are_consistent() {
        for &sample in Sample::ALL {
            for e in sample.expected().iter().chain(sample.expected_off_cpu()) {
                assert!((0.0..=100.0).contains(&e.pct), "{sample}: {e:?}");
            }
            let tasks: f64 = sample.tasks().iter().map(|t| t.pct).sum();
            assert!(
                sample.tasks().is_empty() || (tasks - 100.0).abs() < 1e-9,
                "{sample}: task shares sum to {tasks}"
            );
            // Every task's function is also in the function profile, with the same share:
            // the task does nothing else.
            for t in sample.tasks() {
                let e = sample.expected().iter().find(|e| e.function == t.function);
                assert_eq!(e.map(|e| e.pct), Some(t.pct), "{sample}: {t:?}");
            }
        }
    }

    #[test]
    fn frames_match_by_name_or_last_path_segment() {
        assert!(frame_is("cpu_mix_alpha", "cpu_mix_alpha"));
        assert!(frame_is(
            "inline_heavy::inline_heavy_alpha",
            "inline_heavy_alpha"
        ));
        assert!(!frame_is("cpu_mix_alpha_2", "cpu_mix_alpha"));
        assert!(!frame_is("xcpu_mix_alpha", "cpu_mix_alpha"));
        assert!(!frame_is("a:cpu_mix_alpha", "cpu_mix_alpha"));
    }

    #[test]
    fn bad_arguments_exit_2() {
        for &sample in Sample::ALL {
            let binary = build(sample, FramePointers::No).expect("build");
            let output = run(&binary, &["--bogus".to_owned()]);
            assert_eq!(output.status.code(), Some(2), "{sample}: {output:?}");
            let output = run(&binary, &[sample.work_flag().to_owned(), "x".to_owned()]);
            assert_eq!(output.status.code(), Some(2), "{sample}: {output:?}");
        }
    }

    #[test]
    fn concurrent_builds_into_a_fresh_dir_agree() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| s.spawn(|| build_into(dir.path(), Sample::CpuMix, FramePointers::No)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread").expect("build"))
                .collect()
        });
        assert!(paths.windows(2).all(|w| w[0] == w[1]), "{paths:?}");
        let names = |dir: &Path| -> Vec<_> {
            fs::read_dir(dir)
                .expect("read dir")
                .map(|e| e.expect("entry").file_name())
                .collect()
        };
        assert_eq!(names(dir.path()).len(), 1, "{:?}", names(dir.path()));
        let slot = paths[0].parent().expect("slot dir");
        assert_eq!(names(slot), ["cpu-mix"], "only the binary is left");
        // A second call reuses the binary instead of compiling again.
        let modified = fs::metadata(&paths[0])
            .and_then(|m| m.modified())
            .expect("mtime");
        let again = build_into(dir.path(), Sample::CpuMix, FramePointers::No).expect("build");
        assert_eq!(again, paths[0]);
        assert_eq!(
            fs::metadata(&again)
                .and_then(|m| m.modified())
                .expect("mtime"),
            modified
        );
    }

    #[test]
    fn missing_compiler_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rustc = OsStr::new("/nonexistent/rustc");
        let err = build_with(rustc, dir.path(), Sample::CpuMix, FramePointers::Yes).unwrap_err();
        assert!(matches!(err, BuildError::SpawnRustc { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/rustc"), "{err}");
    }

    #[test]
    fn failing_compiler_is_a_typed_error_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        // `false` exits 1 without output, as a failing compiler would.
        let err = build_with(
            OsStr::new("false"),
            dir.path(),
            Sample::SyscallLoop,
            FramePointers::No,
        )
        .unwrap_err();
        assert!(matches!(err, BuildError::Compile { .. }), "{err}");
        let entries = fs::read_dir(dir.path()).expect("read dir").count();
        assert_eq!(entries, 0, "a failed build leaves nothing behind");
    }

    #[test]
    fn defaults_match_the_sources() {
        for &sample in Sample::ALL {
            let source = fs::read_to_string(sample.source_path()).expect("read source");
            let line = source
                .lines()
                .find(|l| l.starts_with("const DEFAULT_") && l.contains(": u64 = "))
                .unwrap_or_else(|| panic!("{sample}: no DEFAULT_ constant"));
            let value: u64 = line
                .split(" = ")
                .nth(1)
                .and_then(|v| v.trim_end_matches(';').replace('_', "").parse().ok())
                .unwrap_or_else(|| panic!("{sample}: cannot parse {line:?}"));
            assert_eq!(value, sample.default_work(), "{sample}");
            // The flag is parsed by the program or by what it includes.
            let shared = fs::read_to_string(SHARED_SOURCE).expect("read the shared source");
            let flag = format!("\"{}\"", sample.work_flag());
            assert!(
                source.contains(&flag)
                    || (source.contains("parse_units(") && shared.contains(&flag)),
                "{sample}"
            );
        }
    }

    #[test]
    fn every_source_in_src_bin_is_a_sample_named_after_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin");
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .expect("read src/bin")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        let mut sources: Vec<PathBuf> = Sample::ALL
            .iter()
            .map(|s| s.source_path().to_path_buf())
            .collect();
        sources.sort();
        assert_eq!(files, sources);
        for &sample in Sample::ALL {
            assert_eq!(
                sample.source_path().file_stem(),
                Some(OsStr::new(sample.name())),
                "{sample}"
            );
        }
    }

    #[test]
    fn the_readme_and_the_manifest_list_every_sample() {
        let read = |file: &str| {
            fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
                .unwrap_or_else(|e| panic!("read {file}: {e}"))
        };
        let readme = read("README.md");
        let manifest = read("Cargo.toml");
        for &sample in Sample::ALL {
            let name = sample.name();
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| [{name}](#{name}) |")))
                .unwrap_or_else(|| panic!("{name} is not in the README's table"));
            let work = format!("| `{} {}` |", sample.work_flag(), sample.default_work());
            assert!(row.ends_with(&work), "{name}: {row:?} should end {work:?}");
            assert!(
                readme.contains(&format!("\n## {name}\n")),
                "{name} has no README section"
            );
            assert!(
                manifest.contains(&format!("`{name}`")),
                "{name} is not in Cargo.toml's comment"
            );
        }
    }

    #[test]
    fn expected_self_shares_sum_to_at_most_100() {
        for &sample in Sample::ALL {
            let sum: f64 = sample
                .expected()
                .iter()
                .filter(|e| e.kind == ShareKind::SelfPct)
                .map(|e| e.pct)
                .sum();
            assert!(sum <= 100.0 + 1e-9, "{sample}: {sum}");
        }
    }
}
