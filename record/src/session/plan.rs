//! What a recording will do, decided before anything is opened: the call
//! graph this kernel allows, the command to start or the processes, cgroup
//! or system to watch, and the Python walker.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::path::PathBuf;

use flamerec_perf::procfs;

use crate::launch::{c_strings, find_program};
use crate::open::defer_probe;
use crate::rings::read_trimmed;
use crate::select::{ProcessRule, Selection};
use crate::sys;
use crate::{CallGraph, EventKind, PythonFrames, RecordError, RecordOptions, Target};

/// A perf record is at most 64 KiB; the stack copy must leave room for the rest.
pub(super) const MAX_STACK_SIZE: u32 = 60 * 1024;

/// What a recording will do, decided before anything is opened.
pub(super) struct Plan {
    pub dwarf: bool,
    pub off_cpu: bool,
    /// Deferred user callchains: asked for, and offered by this kernel.
    pub defer: bool,
    pub call_graph: CallGraph,
    /// The command to start: argv, the program found on PATH, C strings.
    pub launch: Option<Launch>,
    pub warnings: Vec<String>,
    /// The CPUs the recording may use, as it starts: where ring readers may
    /// run, whatever becomes of the loop's own thread.
    pub allowed: Vec<usize>,
    /// `--cgroup`: its directory, open.
    pub cgroup: Option<File>,
}

/// A command to start: its argv, the program found on PATH, and what
/// execve takes (path, argv, environment) as C strings.
pub(super) type Launch = (
    Vec<OsString>,
    PathBuf,
    (CString, Vec<CString>, Vec<CString>),
);

impl Plan {
    pub(super) fn new(opts: &RecordOptions) -> Result<Plan, RecordError> {
        let dwarf = opts.call_graph == CallGraph::Dwarf;
        if dwarf && (opts.stack_size < 8 || opts.stack_size > MAX_STACK_SIZE) {
            return Err(RecordError::Unsupported(format!(
                "--stack-size must be between 8 and {MAX_STACK_SIZE} bytes"
            )));
        }
        let off_cpu = opts.event == EventKind::OffCpu;
        let mut warnings: Vec<String> = Vec::new();
        let defer = opts.call_graph == CallGraph::FpDefer && deferred(off_cpu, &mut warnings);
        let call_graph = match opts.call_graph {
            CallGraph::FpDefer if !defer => CallGraph::Fp,
            g => g,
        };
        let (launch, cgroup) = target(&opts.target)?;
        Ok(Plan {
            cgroup,
            allowed: sys::allowed_cpus(),
            dwarf,
            off_cpu,
            defer,
            call_graph,
            launch,
            warnings,
        })
    }
}

/// Whether `-g fp,defer` gets deferred callchains: not with off-CPU, and
/// only where the kernel offers them (the warning says why not).
fn deferred(off_cpu: bool, warnings: &mut Vec<String>) -> bool {
    match (off_cpu, defer_probe()) {
        (true, _) => {
            warnings.push("-g fp,defer is not used with -e off-cpu (its samples are weighed when the thread runs again, before a deferred user part would come): recording with -g fp".into());
            false
        }
        (false, Ok(())) => true,
        // Not allowed to sample at all: opening the events says so.
        (false, Err(e)) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => true,
        (false, Err(e)) => {
            let why = match e.raw_os_error() {
                Some(libc::EINVAL) => "EINVAL".to_string(),
                _ => e.to_string(),
            };
            warnings.push(format!(
                "this kernel (Linux {}) does not offer deferred user callchains (perf_event_open refused defer_callchain: {why}); recording with -g fp",
                read_trimmed("/proc/sys/kernel/osrelease")
            ));
            false
        }
    }
}

/// The command to start (found on PATH), or the cgroup's directory, open;
/// an error for an empty command or a process that is gone.
fn target(target: &Target) -> Result<(Option<Launch>, Option<File>), RecordError> {
    match target {
        Target::Command(argv) if argv.is_empty() => Err(RecordError::NoCommand),
        Target::Command(argv) => {
            let program = find_program(&argv[0])?;
            let strings = c_strings(&program, argv)?;
            Ok((Some((argv.clone(), program, strings)), None))
        }
        Target::Pids(pids) => match pids.iter().find(|&&p| !procfs::alive(p)) {
            Some(p) => Err(RecordError::NoSuchProcess(*p)),
            None => Ok((None, None)),
        },
        Target::System => Ok((None, None)),
        Target::Cgroup(name) => {
            let cgroup_err = |source| RecordError::Cgroup {
                name: name.clone(),
                source,
            };
            let dir = procfs::view::cgroup_dir(name).map_err(cgroup_err)?;
            Ok((None, Some(File::open(&dir).map_err(cgroup_err)?)))
        }
    }
}

/// The processes a recording keeps: as the options say, and never
/// flamerec's own when it records more than its command.
pub(super) fn selection(opts: &RecordOptions) -> Selection {
    let mut s = opts.selection.clone();
    if matches!(opts.target, Target::System | Target::Cgroup(_)) {
        s.exclude.push(ProcessRule::Pid(sys::getpid()));
    }
    s
}

/// Why Python frames are not read where the BPF walk cannot run, and what
/// the samples show instead.
pub(super) fn unread_by_bpf(why: &str) -> String {
    format!(
        "{why}; its samples keep their native frames (without BPF, CPython 3.12+ run with -X \
         perf names them through its trampolines)"
    )
}

/// Why `-g fp --python off` shows no Python frame, and what would.
const FP_AND_OFF: &str = "--python off reads none, and -g fp walks a CPython's \
    native stack only as far as its first function built without frame pointers (most \
    builds), short of its eval loop: record with -g dwarf (the default) to see its whole \
    native stack, and without --python off to see Python frames";

/// The Python walker with the ring its walks come in, and whether it is
/// attached to each event as it is opened.
pub(super) type Walker = ((crate::python::Python, flamerec_bpf::RingBuffer), bool);

/// The Python walker, made before the events are opened, and whether it
/// is to be attached to them as they are: why Python frames cannot be read
/// where it cannot be made.
pub(super) fn python_walker(
    opts: &RecordOptions,
    launch: Option<&Launch>,
) -> (Option<Walker>, Option<String>) {
    // Python frames at the sample need BPF: root, or CAP_BPF with
    // CAP_PERFMON (the kernel tells; see `BpfError::refused`). For a command,
    // attached before it starts: a process or thread it forks takes its
    // inherited event's program as that event has it then, so a program
    // attached later reaches no CPython forked before (`sh -c 'python3
    // a.py & python3 b.py'` showed one of the two). Likewise for the
    // processes given to --pid and a cgroup's, whose children may fork
    // while the recording starts (a parent starting 4 CPython children:
    // 2 of 4 attach tries had children with no walk); system-wide, once
    // a CPython is found (each sample of every other process would run
    // the dispatcher meanwhile).
    // Where they cannot be read, why: said if a CPython runs.
    match opts.python {
        // Frame pointers alone stop at CPython's first function built
        // without them (pyenv's, Debian's: all of them here), so neither
        // Python frames nor the interpreter's stack show: said.
        PythonFrames::Off if opts.call_graph != CallGraph::Dwarf => (None, Some(FP_AND_OFF.into())),
        PythonFrames::Off => (None, None),
        mode => {
            let now = mode == PythonFrames::On
                || launch.is_some()
                || matches!(opts.target, Target::Pids(_) | Target::Cgroup(_));
            let command = launch.map(|(_, program, _)| program.as_path());
            let shown = crate::python::Shown {
                lines: opts.python_lines,
                interpreter: opts.python_interpreter,
            };
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
            let walks_per_s = opts.frequency.saturating_mul(cpus);
            match crate::python::Python::start(shown, command, walks_per_s) {
                Ok(p) => (Some((p, now)), None),
                Err(why) => (None, Some(unread_by_bpf(&why))),
            }
        }
    }
}
