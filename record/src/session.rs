//! One recording: open the events, run the loop that drains the ring
//! buffers into the writer, stop cleanly, write the trailer.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use flamerec_perf::parse::Layout;

use crate::depth::MaxStack;
use crate::embed::{Names, Pending};
use crate::kernel::TrimRules;
use crate::launch::{c_strings, find_program};
use crate::loss::Phase;
use crate::open::{defer_probe, event_config, open_output, open_with_fallbacks, Watched};
use crate::readers::{drain_socket, Readers};
use crate::rings::{self, read_trimmed, Event};
use crate::select::{ProcessRule, Selection};
use crate::signals::Signals;
use crate::spool::Spool;
use crate::state::{Finished, State, StateConfig};
use crate::sys::{self, SuspendedChild, WaitStatus};
use crate::{
    CallGraph, EventKind, Progress, PythonFrames, RecordError, RecordOptions, RecordSummary,
    RingReaders, Target,
};
use flamerec_perf::procfs;
use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_symbolize::live::exec_maps;

/// How often `--pid` recordings look whether their processes still run.
const ALIVE_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How long the loop sleeps when no buffer is near its watermark.
const POLL_MS: i32 = 100;
/// A perf record is at most 64 KiB; the stack copy must leave room for the rest.
const MAX_STACK_SIZE: u32 = 60 * 1024;

/// Records as `opts` says, calling `progress` a few times a second: the
/// plan (what the options and this kernel allow), the set-up (file,
/// command, events, signals), the loop that drains the rings, and the
/// finish (last drain, trailer, names).
pub fn record(
    opts: &RecordOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RecordSummary, RecordError> {
    let plan = Plan::new(opts)?;
    let mut session = Session::set_up(opts, plan)?;
    let ended = session.run(opts, progress)?;
    session.finish(opts, ended)
}

/// What a recording will do, decided before anything is opened.
struct Plan {
    dwarf: bool,
    off_cpu: bool,
    /// Deferred user callchains: asked for, and offered by this kernel.
    defer: bool,
    call_graph: CallGraph,
    /// The command to start: argv, the program found on PATH, C strings.
    launch: Option<Launch>,
    warnings: Vec<String>,
    /// The CPUs the recording may use, as it starts: where ring readers may
    /// run, whatever becomes of the loop's own thread.
    allowed: Vec<usize>,
    /// `--cgroup`: its directory, open.
    cgroup: Option<File>,
}

/// A command to start: its argv, the program found on PATH, and what
/// execve takes (path, argv, environment) as C strings.
type Launch = (
    Vec<OsString>,
    PathBuf,
    (CString, Vec<CString>, Vec<CString>),
);

impl Plan {
    fn new(opts: &RecordOptions) -> Result<Plan, RecordError> {
        let dwarf = opts.call_graph == CallGraph::Dwarf;
        if dwarf && (opts.stack_size < 8 || opts.stack_size > MAX_STACK_SIZE) {
            return Err(RecordError::Unsupported(format!(
                "--stack-size must be between 8 and {MAX_STACK_SIZE} bytes"
            )));
        }
        let off_cpu = opts.event == EventKind::OffCpu;
        let mut warnings: Vec<String> = Vec::new();
        // Deferred callchains where asked for and the kernel offers them.
        let defer = opts.call_graph == CallGraph::FpDefer
            && match (off_cpu, defer_probe()) {
                (true, _) => {
                    warnings.push("-g fp,defer is not used with -e off-cpu (its samples are weighed when the thread runs again, before a deferred user part would come): recording with -g fp".into());
                    false
                }
                (false, Ok(())) => true,
                // Not allowed to sample at all: opening the events says so.
                (false, Err(e)) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                    true
                }
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
            };
        let call_graph = match opts.call_graph {
            CallGraph::FpDefer if !defer => CallGraph::Fp,
            g => g,
        };
        let mut cgroup = None;
        let launch = match &opts.target {
            Target::Command(argv) if argv.is_empty() => return Err(RecordError::NoCommand),
            Target::Command(argv) => {
                let program = find_program(&argv[0])?;
                let strings = c_strings(&program, argv)?;
                Some((argv.clone(), program, strings))
            }
            Target::Pids(pids) => {
                if let Some(p) = pids.iter().find(|&&p| !procfs::alive(p)) {
                    return Err(RecordError::NoSuchProcess(*p));
                }
                None
            }
            Target::System => None,
            Target::Cgroup(name) => {
                let dir = procfs::view::cgroup_dir(name).map_err(|source| RecordError::Cgroup {
                    name: name.clone(),
                    source,
                })?;
                cgroup = Some(File::open(&dir).map_err(|source| RecordError::Cgroup {
                    name: name.clone(),
                    source,
                })?);
                None
            }
        };
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

/// A recording under way: its events, state and signal handlers.
struct Session {
    st: State<Spool>,
    events: Vec<Event>,
    kallsyms_loader: Option<std::thread::JoinHandle<Kallsyms>>,
    max_stack: Option<MaxStack>,
    signals: Signals,
    started: Instant,
    /// The command's process, when flamerec started one.
    pid: Option<i32>,
    /// One buffer per ring for a record its wrap cuts in two.
    scratch: Vec<Vec<u8>>,
    /// Names frames while recording, when names are embedded.
    names: Option<Names>,
    /// Threads that read the rings once the loop fell behind (or from the
    /// start, when asked), and when they started.
    readers: Option<(Readers, Duration)>,
    /// The CPUs the recording may use, as it started.
    allowed: Vec<usize>,
}

/// How the loop ended.
struct Ended {
    exit: Option<WaitStatus>,
    signals_seen: usize,
    stopped_by: Option<i32>,
}

impl Session {
    /// Opens the file and the events, starts the command and describes
    /// what already runs: from here on the rings fill.
    fn set_up(opts: &RecordOptions, plan: Plan) -> Result<Session, RecordError> {
        let Plan {
            dwarf,
            off_cpu,
            defer,
            call_graph,
            launch,
            mut warnings,
            allowed,
            cgroup,
        } = plan;
        // Before anything is started: a failure here leaves nothing behind.
        let names = match &opts.embed_names {
            Some(e) => Some(
                Names::start(e)
                    .map_err(|e| RecordError::sys("starting the thread that names frames", e))?,
            ),
            None => None,
        };
        // The kernel symbol table takes tens of milliseconds to read: load it
        // while the command starts.
        let kallsyms_loader = opts.kernel.then(|| {
            let cache = opts.embed_names.as_ref().and_then(|e| e.cache_dir.clone());
            std::thread::spawn(move || Kallsyms::load_cached(cache.as_deref()).unwrap_or_default())
        });
        let argv = launch.as_ref().map(|(argv, _, _)| argv.as_slice());
        let writer = open_output(opts, argv, call_graph)?;
        let child = match &launch {
            Some((_, _, (c_path, c_argv, c_envp))) => Some(
                SuspendedChild::spawn(c_path, c_argv, c_envp)
                    .map_err(|e| RecordError::sys("cannot fork", e))?,
            ),
            None => None,
        };
        let cpus = procfs::online_cpus().len();
        let (stack_size, pages, ring_warning) =
            rings::fit(dwarf, opts.stack_size, opts.mmap_pages, cpus);
        warnings.extend(ring_warning);
        // Frame-pointer chains are as deep as the kernel lets them be.
        let mut max_stack = (!dwarf).then(|| MaxStack::raise(sys::is_root()));
        let mut cfg = event_config(opts, dwarf, defer, stack_size, pages, child.is_some());
        cfg.max_stack = max_stack.as_ref().map_or(0, |m| m.value);
        // Every (task, CPU) pair to open: the command, each thread of the
        // attached processes, or every task (-1) on each CPU.
        let tasks: Vec<i32> = match (&opts.target, &child) {
            (_, Some(c)) => vec![c.pid()],
            (Target::Pids(pids), _) => pids
                .iter()
                .flat_map(|&p| procfs::threads_of(p).unwrap_or_default())
                .map(|t| t as i32)
                .collect(),
            _ => vec![-1],
        };
        let watched = match &cgroup {
            Some(dir) => Watched::Cgroup(dir),
            None => Watched::Tasks(&tasks),
        };
        let (python, python_unread) = python_walker(opts, launch.as_ref());
        let program = python
            .as_ref()
            .filter(|(_, now)| *now)
            .map(|((p, _), _)| p.program());
        let events = open_with_fallbacks(opts, &mut cfg, watched, pages, &mut max_stack, program)?;
        // The walker at once on the events that want it, before anything else.
        let (python, python_unread) = match python {
            Some(((mut p, ring), now)) => match p.events(&events, now) {
                Ok(()) => (Some((p, ring)), python_unread),
                Err(why) => (None, Some(why)),
            },
            None => (None, python_unread),
        };
        if cfg.exclude_kernel && opts.kernel {
            warnings.push(format!(
                "kernel sampling is not allowed (kernel.perf_event_paranoid is {}); recording user stacks only, as with --no-kernel",
                read_trimmed("/proc/sys/kernel/perf_event_paranoid")
            ));
        }
        let scratch = vec![Vec::new(); events.len()];
        warnings.extend(max_stack.as_ref().and_then(|m| m.note.clone()));

        let signals = Signals::register()?;

        let start_mono = sys::monotonic_ns();
        let started = Instant::now();
        // Start the command before anything else that may wait (the kernel
        // symbol table): its records wait in the ring buffers meanwhile.
        let started_child = match (child, &launch) {
            (Some(child), Some((argv, program, _))) => match child.start() {
                Ok(pid) => Some((pid, program)),
                Err(e) => {
                    drop(signals);
                    let _ = std::fs::remove_file(&opts.output);
                    let command = argv[0].to_string_lossy().into_owned();
                    return Err(match e.raw_os_error() {
                        Some(libc::ENOENT) => RecordError::CommandNotFound(command),
                        _ => RecordError::CommandNotExecutable { command, source: e },
                    });
                }
            },
            _ => None,
        };
        let mut st = State::new(StateConfig {
            writer,
            dwarf,
            off_cpu,
            trim: TrimRules {
                sampled: !cfg.exclude_kernel,
                keep_profiler_frames: opts.keep_profiler_frames,
                extra: opts.trim.clone(),
                off_cpu,
            },
            start_mono,
            layout: Layout {
                sample_type: cfg.sample_type,
                regs_user: cfg.sample_regs_user,
            },
            fp_cap: max_stack
                .as_ref()
                .filter(|m| m.value > 0)
                .map(|m| usize::from(m.value)),
            defer,
            selection: selection(opts),
            copy_is_largest: stack_size >= MAX_STACK_SIZE,
            frequency_hz: if off_cpu { 0 } else { opts.frequency },
            warnings,
            python,
            python_unread,
            python_interpreter: opts.python_interpreter,
        });
        // Samples wait for the kernel symbol table, so the loop can drain the
        // rings from the start. Off-CPU samples are weighed when their thread
        // runs again, against a stack already written: those wait for it here.
        let mut kallsyms_loader = kallsyms_loader;
        if off_cpu || kallsyms_loader.is_none() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let pid = begin(&mut st, &events, &opts.target, started_child)?;
        Ok(Session {
            st,
            events,
            kallsyms_loader,
            max_stack,
            signals,
            started,
            pid,
            scratch,
            names,
            readers: None,
            allowed,
        })
    }

    /// Drains the rings until the command ends, the processes are gone, the
    /// duration is over or a signal says stop.
    fn run(
        &mut self,
        opts: &RecordOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Ended, RecordError> {
        let Session {
            st,
            events,
            kallsyms_loader,
            signals,
            started,
            pid,
            scratch,
            names,
            readers,
            allowed,
            ..
        } = self;
        let pid = *pid;
        let sig: &Signals = signals;
        let out_err = |e| RecordError::Output {
            path: opts.output.clone(),
            source: e,
        };
        // The command (forked above) keeps its priority; this thread drains
        // ahead of it, so a workload on every core does not starve the reads
        // (as root; refused otherwise, and then the loss cause says so).
        let _ = sys::raise_recorder_priority();
        // Readers started from here on share that priority.
        if let RingReaders::Threads(n) = opts.ring_readers {
            *readers = Some((start_readers(events, n, allowed)?, started.elapsed()));
        }
        let mut exit = None;
        let mut signals_seen = 0;
        let mut stopped_by = None;
        let mut last_flush = Instant::now();
        let mut last_alive_check = Instant::now();
        loop {
            let mut fds: Vec<_> = events
                .iter()
                .filter(|e| e.ring.is_some())
                .map(|e| e.fd.as_fd())
                .collect();
            fds.push(sig.wake.as_fd());
            if let Some((r, _)) = readers.as_ref() {
                fds.push(r.wake_fd());
            }
            st.losses().phase_begins();
            sys::poll_readable(&fds, POLL_MS).map_err(|e| RecordError::sys("poll", e))?;
            drain_socket(&sig.wake);
            if let Some((r, _)) = readers.as_ref() {
                r.clear_wake();
            }
            st.losses().phase_done(Phase::Poll);
            let taken = readers.as_ref().map_or_else(Vec::new, |(r, _)| r.take());
            let late = st.drain(events, scratch, taken);
            if late && readers.is_none() && opts.ring_readers == RingReaders::Auto {
                // A ring was over half full when the loop came to it: the
                // next wait for a CPU could overrun it.
                let n = events.iter().filter(|e| e.ring.is_some()).count();
                *readers = Some((
                    start_readers(events, auto_readers(n), allowed)?,
                    started.elapsed(),
                ));
            }
            st.losses().phase_done(Phase::Drain);
            if let Some(n) = names {
                n.locate(st.take_located());
                n.offer(st.writer());
                n.write_found(st.writer_mut());
                st.losses().phase_done(Phase::Names);
            }
            if kallsyms_loader.as_ref().is_some_and(|h| h.is_finished()) {
                st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
            }
            if last_flush.elapsed() >= opts.chunk_every || st.writer().wants_flush() {
                st.writer_mut().flush().map_err(out_err)?;
                last_flush = Instant::now();
                st.losses().phase_done(Phase::Write);
            }
            progress(&Progress {
                samples: st.writer().samples(),
                lost: st.losses().total(),
                elapsed: started.elapsed(),
            });
            let signal = sig.flag.swap(0, Ordering::SeqCst);
            if signal != 0 {
                signals_seen += 1;
                match pid {
                    // The command decides how to end; a second signal stops at once.
                    Some(p) if signals_seen < 2 => {
                        let _ = sys::kill(p, signal as i32);
                    }
                    Some(_) => {
                        stopped_by = Some(signal as i32);
                        break;
                    }
                    None => break,
                }
            }
            match pid {
                Some(p) => match sys::wait_nohang(p) {
                    Ok(Some(status)) => {
                        exit = Some(status);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => return Err(RecordError::sys("waitpid", e)),
                },
                None => {
                    // Reading /proc/PID/stat each round cost a fifth of the
                    // recorder's CPU when attached at 4999 Hz: ten times a second
                    // is soon enough to notice the processes are gone.
                    if let Target::Pids(pids) = &opts.target {
                        if last_alive_check.elapsed() >= ALIVE_CHECK_EVERY {
                            last_alive_check = Instant::now();
                            if !pids.iter().any(|&p| procfs::alive(p)) {
                                break;
                            }
                        }
                    }
                }
            }
            if opts.duration.is_some_and(|d| started.elapsed() >= d) {
                break;
            }
        }
        Ok(Ended {
            exit,
            signals_seen,
            stopped_by,
        })
    }

    /// Stops sampling, drains what is left, writes the trailer and the names.
    fn finish(self, opts: &RecordOptions, ended: Ended) -> Result<RecordSummary, RecordError> {
        let Session {
            mut st,
            mut events,
            mut kallsyms_loader,
            mut max_stack,
            signals,
            started,
            pid,
            mut scratch,
            names,
            readers,
            ..
        } = self;
        let Ended {
            mut exit,
            signals_seen,
            stopped_by,
        } = ended;
        let out_err = |e| RecordError::Output {
            path: opts.output.clone(),
            source: e,
        };
        for e in &events {
            let _ = sys::disable(&e.fd);
        }
        let ring_readers = readers.as_ref().map(|(r, at)| (r.count(), *at));
        let taken = readers.map_or_else(Vec::new, |(r, _)| r.stop());
        st.drain(&mut events, &mut scratch, taken);
        st.unreported_losses(&events);
        // Closed before the sysctl is put back: the kernel refuses to change it
        // while events with callchains are open (the Python walker's copies
        // of them too).
        drop(events);
        st.events_closed();
        if kallsyms_loader.is_some() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let duration = started.elapsed();
        drop(signals);
        if let Some(m) = &mut max_stack {
            if let Some(w) = m.restore() {
                st.warn(w);
            }
        }
        let Finished {
            writer,
            mut totals,
            mut warnings,
            loss_warning,
            python,
            jit_names,
            files: (held_files, located),
        } = st.finish(duration.as_nanos() as u64);
        let mut own_names = Vec::new();
        if let Some(py) = python {
            let fp = opts.call_graph != CallGraph::Dwarf;
            warnings.extend(python_warnings(&py.stats, fp));
            warnings.extend(py.warnings);
            totals.python = py.read;
            own_names = py.names;
        }
        // Frames the recorder named itself (Python code, JIT code): no
        // binary can name them later.
        own_names.extend(jit_names);
        let samples = writer.samples();
        // The last frames are named while the trailer is written; the
        // names follow it.
        let pending = names.map(|mut n| {
            n.locate(located);
            n.last_batch(&writer)
        });
        let counts = totals.clone();
        let mut out = writer.finish(totals).map_err(out_err)?;
        let names = match pending.map(Pending::wait) {
            Some(Some(mut l)) => {
                l.add(own_names);
                Some(l.write(&mut out, &mut warnings).map_err(out_err)?)
            }
            Some(None) => {
                warnings
                    .push("looking up names to embed failed; fold will read the binaries".into());
                write_own_names(&mut out, &own_names).map_err(out_err)?;
                None
            }
            None => {
                // These frames cannot be named later: their names go in
                // even when the binaries' are left to fold.
                write_own_names(&mut out, &own_names).map_err(out_err)?;
                None
            }
        };
        out.close().map_err(|e| out_err(e.into()))?;
        // The namer read the held files until here.
        drop(held_files);
        let bytes = std::fs::metadata(&opts.output).map_or(0, |m| m.len());
        if let (None, Some(p)) = (exit, pid) {
            if signals_seen < 2 {
                // -d elapsed: the command keeps running unrecorded; wait for it so
                // flamerec still exits with its status.
                exit = wait_blocking(p);
            }
        }
        warnings.extend(loss_warning);
        let recorder_cpu = procfs::own_cpu_ticks()
            .ok()
            .map(|t| Duration::from_millis(t * 1000 / procfs::TICKS_PER_SECOND));
        Ok(RecordSummary {
            samples,
            lost: counts.lost_samples,
            processes: counts.processes,
            threads: counts.threads,
            duration,
            bytes,
            output: opts.output.clone(),
            exit,
            truncated_stacks: counts.truncated_stacks,
            completed_stacks: counts.completed_stacks,
            stopped_by,
            warnings,
            names,
            recorder_cpu,
            ring_readers,
        })
    }
}

/// The Python walker with the ring its walks come in, and whether it is
/// attached to each event as it is opened.
type Walker = ((crate::python::Python, flamerec_bpf::RingBuffer), bool);

/// The Python walker, made before the events are opened, and whether it
/// is to be attached to them as they are: why Python frames cannot be read
/// where it cannot be made.
/// The processes a recording keeps: as the options say, and never
/// flamerec's own when it records more than its command.
fn selection(opts: &RecordOptions) -> Selection {
    let mut s = opts.selection.clone();
    if matches!(opts.target, Target::System | Target::Cgroup(_)) {
        s.exclude.push(ProcessRule::Pid(sys::getpid()));
    }
    s
}

fn python_walker(
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
                Err(why) => (None, Some(why)),
            }
        }
    }
}

/// Recording begins: the command started is named, or what runs already
/// is described and the events enabled (then described again: what started
/// meanwhile left no record); the command's pid.
fn begin<W: io::Write>(
    st: &mut State<W>,
    events: &[Event],
    target: &Target,
    started_child: Option<(i32, &PathBuf)>,
) -> Result<Option<i32>, RecordError> {
    let pid = match started_child {
        Some((pid, program)) => {
            let comm = program
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            st.command_started(pid as u32, &truncate_comm(&comm));
            Some(pid)
        }
        None => {
            let described = describe_running(st, target, &HashSet::new());
            for e in events {
                sys::enable(&e.fd).map_err(|e| RecordError::sys("enabling perf events", e))?;
            }
            // Processes started between the first look and the events'
            // enabling (a child forked and exec'd meanwhile) left no
            // record: they are described now, from /proc.
            describe_running(st, target, &described);
            None
        }
    };
    Ok(pid)
}

/// Attached, system-wide or a cgroup: the names and executable mappings of
/// what runs now, from /proc, but the processes `done` (described before);
/// returns every process described so far. With `--pid`, the processes
/// given and, once `done` is not empty, their descendants (started while
/// the events were set up, before they recorded anything of them).
fn describe_running<W: io::Write>(
    st: &mut State<W>,
    target: &Target,
    done: &HashSet<u32>,
) -> HashSet<u32> {
    let pids = match target {
        Target::Pids(p) if done.is_empty() => p.clone(),
        Target::Pids(p) => procfs::descendants(p),
        Target::Cgroup(name) => procfs::view::cgroup_dir(name)
            .map(|dir| procfs::view::processes_in(&dir))
            .unwrap_or_default(),
        _ => procfs::all_pids().unwrap_or_default(),
    };
    let own = sys::getpid();
    if matches!(target, Target::System) && done.is_empty() {
        st.synth_comm(0, 0, "swapper");
    }
    let mut described = done.clone();
    for p in pids {
        if p == own && !matches!(target, Target::Pids(_)) || !described.insert(p) {
            continue;
        }
        for t in procfs::threads_of(p).unwrap_or_default() {
            if let Ok(name) = procfs::comm_of(p, t) {
                st.synth_comm(p, t, &name);
            }
        }
        for m in exec_maps(p) {
            st.synth_mapping(p, m.start, m.end, m.pgoff, &m.path);
        }
    }
    described
}

/// The names of frames the recorder named itself alone, as a names
/// section that leaves every other frame to `fold`.
fn write_own_names<W: io::Write>(
    out: &mut W,
    names: &[(u32, Vec<String>)],
) -> Result<(), flamerec_format::FormatError> {
    if names.is_empty() {
        return Ok(());
    }
    flamerec_format::write_names(out, names, false).map(drop)
}

/// What the user should know about samples of CPython threads that kept
/// their native frames only (more than 1% of them), and about perf
/// trampolines that named other code than the Python frame they called.
fn python_warnings(s: &crate::python::PythonStats, fp: bool) -> Vec<String> {
    let mut out = Vec::new();
    let alone = s.unwalked + s.unpaired;
    let all = alone + s.spliced;
    if alone * 100 > all {
        // Frame pointers stop at the first CPython function built without
        // them, short of the eval-loop calls the runs stand for.
        let help = if fp && s.unpaired * 2 > all {
            "; with frame pointers only, the native stack of a CPython built without them does not reach its eval loop: record with -g dwarf (the default) to see Python frames"
        } else {
            ""
        };
        out.push(format!(
            "{alone} of {all} samples of CPython threads kept their native frames only: {} came with no walk of their Python frames at the sample (taken before flamerec knew their thread, which it reads when it first samples one it does not know, or not walked by the kernel), {} had runs of Python frames and eval-loop frames that did not pair one for one{help}",
            s.unwalked, s.unpaired
        ));
    }
    if s.code_gone > 0 {
        use flamerec_python::bpf::{FILE_BYTES, NAMED_FRAMES, NAME_BYTES};
        out.push(format!(
            "{} Python frames are shown as [Python code freed before it was named]: their code object was freed after the sample, before flamerec read its name, and the walk at the sample did not read it (it reads the names of the innermost {NAMED_FRAMES} frames' code, ASCII names under {NAME_BYTES} characters and file names under {FILE_BYTES})",
            s.code_gone
        ));
    }
    if s.walks_full > 0 {
        out.push(format!(
            "{} samples ran more than {} Python frames deep (the most one walk reads): the Python frames of their innermost eval-loop calls are shown, the outer calls keep their native frames",
            s.walks_full,
            flamerec_python::bpf::MAX_BPF_FRAMES,
        ));
    }
    if s.trampolines_named_otherwise > 0 {
        out.push(format!(
            "{} of {} perf trampolines (-X perf) named other code than the Python frame they called, read at the sample; both are shown",
            s.trampolines_named_otherwise,
            s.trampolines_named_otherwise + s.trampolines_named_alike
        ));
    }
    out
}

/// Moves the rings of `events` to `n` reader threads.
fn start_readers(
    events: &mut [Event],
    n: usize,
    allowed: &[usize],
) -> Result<Readers, RecordError> {
    Readers::start(events, n, allowed)
        .map_err(|e| RecordError::sys("starting the threads that read the ring buffers", e))
}

/// Readers started when the loop falls behind with `rings` rings: one per
/// group of up to 8 neighbouring CPUs, and at least two, so that one CPU
/// kept busy does not stop the reading.
fn auto_readers(rings: usize) -> usize {
    rings.div_ceil(8).max(2).min(rings.max(1))
}

/// The kernel symbol table from its loader thread (empty without one, or
/// if it failed).
fn join_kallsyms(loader: Option<std::thread::JoinHandle<Kallsyms>>) -> Kallsyms {
    loader.and_then(|h| h.join().ok()).unwrap_or_default()
}

fn wait_blocking(pid: i32) -> Option<WaitStatus> {
    loop {
        match sys::wait_nohang(pid) {
            Ok(Some(s)) => return Some(s),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
}

/// The kernel keeps 15 bytes of a task name.
fn truncate_comm(s: &str) -> String {
    let mut end = s.len().min(15);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
