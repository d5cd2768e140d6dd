//! One recording: open the events, run the loop that drains the ring
//! buffers into the writer, stop cleanly, write the trailer.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flamerec_format::{Metadata, Totals, Writer};

use crate::defer::Deferred;
use crate::depth::MaxStack;
use crate::embed::{Names, Pending};
use crate::launch::{c_strings, find_program};
use crate::loss::Phase;
use crate::readers::{drain_socket, Readers};
use crate::rings::{self, read_trimmed};
use crate::spool::Spool;
use crate::state::{Event, State};
use crate::sys::{self, Counter, EventConfig, RingBuffer, SuspendedChild, WaitStatus};
use crate::{
    CallGraph, EventKind, Progress, RecordError, RecordOptions, RecordSummary, RingReaders, Target,
};
use flamerec_perf::procfs;
use flamerec_symbolize::kallsyms::Kallsyms;
use flamerec_symbolize::live::exec_maps;

/// How often buffered data reaches the file, at the latest.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
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
    counter: Counter,
    /// The command to start: argv, the program found on PATH, C strings.
    launch: Option<Launch>,
    warnings: Vec<String>,
    /// The CPUs the recording may use, as it starts: where ring readers may
    /// run, whatever becomes of the loop's own thread.
    allowed: Vec<usize>,
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
        let counter = match opts.event {
            EventKind::CpuClock => Counter::CpuClock,
            EventKind::TaskClock => Counter::TaskClock,
            EventKind::Cycles => Counter::Cycles,
            EventKind::OffCpu => Counter::ContextSwitches,
        };
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
        };
        Ok(Plan {
            allowed: sys::allowed_cpus(),
            dwarf,
            off_cpu,
            defer,
            call_graph,
            counter,
            launch,
            warnings,
        })
    }
}

/// Signal handlers of a recording, unregistered when it ends (also on an
/// error).
struct Signals {
    /// The last SIGINT or SIGTERM received, 0 when none since last read.
    flag: Arc<AtomicUsize>,
    /// Signals and the command's exit wake the loop through this socket at
    /// once, instead of after the poll timeout.
    wake: UnixStream,
    ids: Vec<signal_hook::SigId>,
}

impl Signals {
    fn register() -> Result<Signals, RecordError> {
        let flag = Arc::new(AtomicUsize::new(0));
        let mut ids = Vec::new();
        for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            if let Ok(id) = signal_hook::flag::register_usize(s, Arc::clone(&flag), s as usize) {
                ids.push(id);
            }
        }
        let (wake_rx, wake_tx) = UnixStream::pair().map_err(|e| RecordError::Sys {
            what: "creating a wake-up socket".into(),
            source: e,
        })?;
        let _ = wake_rx.set_nonblocking(true);
        for s in [
            signal_hook::consts::SIGCHLD,
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ] {
            if let Ok(tx) = wake_tx.try_clone() {
                if let Ok(id) = signal_hook::low_level::pipe::register(s, tx) {
                    ids.push(id);
                }
            }
        }
        Ok(Signals {
            flag,
            wake: wake_rx,
            ids,
        })
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
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
            counter,
            launch,
            mut warnings,
            allowed,
        } = plan;
        // Before anything is started: a failure here leaves nothing behind.
        let names = match &opts.embed_names {
            Some(e) => Some(Names::start(e).map_err(|e| RecordError::Sys {
                what: "starting the thread that names frames".into(),
                source: e,
            })?),
            None => None,
        };
        // The kernel symbol table takes tens of milliseconds to read: load it
        // while the command starts.
        let kallsyms_loader = opts.kernel.then(|| {
            let cache = opts.embed_names.as_ref().and_then(|e| e.cache_dir.clone());
            std::thread::spawn(move || Kallsyms::load_cached(cache.as_deref()).unwrap_or_default())
        });

        let file = File::create(&opts.output).map_err(|e| RecordError::Output {
            path: opts.output.clone(),
            source: e.into(),
        })?;
        let meta = Metadata {
            command: launch.as_ref().map_or_else(Vec::new, |(argv, _, _)| {
                argv.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect()
            }),
            target: match &opts.target {
                Target::Command(_) => "command".into(),
                Target::Pids(p) => format!(
                    "pid {}",
                    p.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                ),
                Target::System => "system".into(),
            },
            host: read_trimmed("/proc/sys/kernel/hostname"),
            kernel_release: read_trimmed("/proc/sys/kernel/osrelease"),
            start_unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            event: opts.event.name().into(),
            frequency_hz: if off_cpu { 0 } else { opts.frequency },
            call_graph: call_graph.name().into(),
            weight_unit: if off_cpu { "ns" } else { "samples" }.into(),
            flamerec_version: env!("CARGO_PKG_VERSION").into(),
            embeds_names: opts.embed_names.is_some(),
        };
        let out_err = |e| RecordError::Output {
            path: opts.output.clone(),
            source: e,
        };
        let spool = Spool::new(file).map_err(|e| RecordError::Sys {
            what: "starting the thread that writes the output".into(),
            source: e,
        })?;
        let writer = Writer::new(spool, &meta).map_err(out_err)?;

        let child = match &launch {
            Some((_, _, (c_path, c_argv, c_envp))) => {
                Some(SuspendedChild::spawn(c_path, c_argv, c_envp).map_err(|e| {
                    RecordError::Sys {
                        what: "cannot fork".into(),
                        source: e,
                    }
                })?)
            }
            None => None,
        };
        let mut sample_type = sys::sample::IP
            | sys::sample::TID
            | sys::sample::TIME
            | sys::sample::CPU
            | sys::sample::PERIOD
            | sys::sample::CALLCHAIN;
        if dwarf {
            sample_type |= sys::sample::REGS_USER | sys::sample::STACK_USER;
        }
        let cpus = crate::online_cpus().len();
        let (stack_size, pages, ring_warning) =
            rings::fit(dwarf, opts.stack_size, opts.mmap_pages, cpus);
        // Frame-pointer chains are as deep as the kernel lets them be.
        let mut max_stack = (!dwarf).then(|| MaxStack::raise(sys::is_root()));
        let mut cfg = EventConfig {
            counter,
            frequency: if off_cpu { 0 } else { opts.frequency },
            period: 1,
            context_switch: off_cpu,
            sample_type,
            exclude_kernel: !opts.kernel,
            inherit: !matches!(opts.target, Target::System),
            enable_on_exec: child.is_some(),
            side_band: true,
            max_stack: max_stack.as_ref().map_or(0, |m| m.value),
            wakeup_bytes: rings::wakeup_bytes(
                pages,
                dwarf.then_some(stack_size),
                if off_cpu { 0 } else { opts.frequency },
            ),
            wakeup_events: 0,
            exclude_callchain_user: dwarf,
            sample_regs_user: if dwarf { sys::REGS_BX_BP_SP_IP } else { 0 },
            sample_stack_user: if dwarf { stack_size & !7 } else { 0 },
            defer_user: defer,
            count_lost: true,
        };
        warnings.extend(ring_warning);
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
        let events = match open_events(&cfg, &tasks, pages) {
            // Another recorder put kernel.perf_event_max_stack back below what
            // was read a moment ago: take what is in force now.
            Err(RecordError::Sys { source, .. })
                if source.raw_os_error() == Some(libc::EOVERFLOW) && cfg.max_stack > 0 =>
            {
                let now = max_stack.as_mut().map_or(0, MaxStack::lowered);
                cfg.max_stack = now;
                open_events(&cfg, &tasks, pages)?
            }
            Err(RecordError::PerfDenied { .. }) if opts.kernel && !off_cpu => {
                // Kernel sampling may be what is refused: go on with user stacks only.
                cfg.exclude_kernel = true;
                let events = open_events(&cfg, &tasks, pages)?;
                warnings.push(format!(
                    "kernel sampling is not allowed (kernel.perf_event_paranoid is {}); recording user stacks only, as with --no-kernel",
                    read_trimmed("/proc/sys/kernel/perf_event_paranoid")
                ));
                events
            }
            other => other?,
        };
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
        let layout = (sample_type, cfg.sample_regs_user);
        let mut st = State::new(writer, opts, start_mono, layout, !cfg.exclude_kernel);
        st.warnings.append(&mut warnings);
        st.fp_cap = max_stack
            .as_ref()
            .filter(|m| m.value > 0)
            .map(|m| usize::from(m.value));
        st.deferred = defer.then(Deferred::default);
        // Samples wait for the kernel symbol table, so the loop can drain the
        // rings from the start. Off-CPU samples are weighed when their thread
        // runs again, against a stack already written: those wait for it here.
        let mut kallsyms_loader = kallsyms_loader;
        if off_cpu || kallsyms_loader.is_none() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let pid = match started_child {
            Some((pid, program)) => {
                let comm = program
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                st.conv
                    .writer_mut()
                    .comm(0, pid as u32, pid as u32, &truncate_comm(&comm), true);
                st.seen(pid as u32, pid as u32);
                Some(pid)
            }
            _ => {
                // Running processes: describe what exists, then start sampling.
                let pids = match &opts.target {
                    Target::Pids(p) => p.clone(),
                    _ => procfs::all_pids().unwrap_or_default(),
                };
                if matches!(opts.target, Target::System) {
                    st.exclude_pid = Some(sys::getpid());
                    st.synth_comm(0, 0, "swapper");
                }
                for p in pids {
                    if st.exclude_pid == Some(p) {
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
                for e in &events {
                    sys::enable(&e.fd).map_err(|e| RecordError::Sys {
                        what: "enabling perf events".into(),
                        source: e,
                    })?;
                }
                None
            }
        };
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
            st.losses.phase_begins();
            sys::poll_readable(&fds, POLL_MS).map_err(|e| RecordError::Sys {
                what: "poll".into(),
                source: e,
            })?;
            drain_socket(&sig.wake);
            if let Some((r, _)) = readers.as_ref() {
                r.clear_wake();
            }
            st.losses.phase_done(Phase::Poll);
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
            st.losses.phase_done(Phase::Drain);
            if let Some(n) = names {
                n.offer(st.conv.writer());
                st.losses.phase_done(Phase::Names);
            }
            if kallsyms_loader.as_ref().is_some_and(|h| h.is_finished()) {
                st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
            }
            if last_flush.elapsed() >= FLUSH_EVERY || st.conv.writer().wants_flush() {
                st.conv.writer_mut().flush().map_err(out_err)?;
                last_flush = Instant::now();
                st.losses.phase_done(Phase::Write);
            }
            progress(&Progress {
                samples: st.conv.writer().samples(),
                lost: st.losses.total(),
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
                    Err(e) => {
                        return Err(RecordError::Sys {
                            what: "waitpid".into(),
                            source: e,
                        })
                    }
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
        // while events with callchains are open.
        drop(events);
        if kallsyms_loader.is_some() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let duration = started.elapsed();
        st.finish_blocked(duration.as_nanos() as u64);
        drop(signals);
        st.finish_waiting();
        st.finish_deferred();
        if let Some(m) = &mut max_stack {
            st.warnings.extend(m.restore());
        }
        let deferred = st.deferred.as_ref().map(|d| d.stats).unwrap_or_default();
        // Cut short by the unwinder (dwarf), and at the kernel's callchain caps.
        let (unwind_cut, completed_stacks) = (st.truncated_stacks, st.completed_stacks);
        let truncated_stacks = unwind_cut + st.cut_at_cap;
        let mut totals = Totals {
            truncated_stacks,
            completed_stacks,
            deferred_stitched: deferred.stitched,
            deferred_unmatched_samples: deferred.unmatched_samples,
            deferred_orphan_records: deferred.orphan_records,
            duration_ns: duration.as_nanos() as u64,
            processes: st.pids.len() as u64,
            threads: st.tids.len() as u64,
            ..Default::default()
        };
        st.losses.fill(&mut totals);
        let samples = st.conv.writer().samples();
        let lost = st.losses.total();
        let (processes, threads) = (st.pids.len() as u64, st.tids.len() as u64);
        let mut warnings = std::mem::take(&mut st.warnings);
        warnings.extend(crate::deep::cut_warning(unwind_cut, &st.live, samples));
        warnings.extend(depth_warnings(&st, samples, &deferred));
        if st.throttles > 0 {
            warnings.push(format!(
                "the kernel throttled sampling {} times (kernel.perf_event_max_sample_rate): lower -F",
                st.throttles
            ));
        }
        // The last frames are named while the trailer is written; the
        // names follow it.
        let pending = names.map(|n| n.last_batch(st.conv.writer()));
        let mut out = st.conv.into_writer().finish(totals).map_err(out_err)?;
        let names = match pending.map(Pending::wait) {
            Some(Some(l)) => Some(l.write(&mut out, &mut warnings).map_err(out_err)?),
            Some(None) => {
                warnings
                    .push("looking up names to embed failed; fold will read the binaries".into());
                None
            }
            None => None,
        };
        out.close().map_err(|e| out_err(e.into()))?;
        let bytes = std::fs::metadata(&opts.output).map_or(0, |m| m.len());
        if let (None, Some(p)) = (exit, pid) {
            if signals_seen < 2 {
                // -d elapsed: the command keeps running unrecorded; wait for it so
                // flamerec still exits with its status.
                exit = wait_blocking(p);
            }
        }
        warnings.extend(st.losses.warning(samples));
        let recorder_cpu = procfs::own_cpu_ticks()
            .ok()
            .map(|t| Duration::from_millis(t * 1000 / procfs::TICKS_PER_SECOND));
        Ok(RecordSummary {
            samples,
            lost,
            processes,
            threads,
            duration,
            bytes,
            output: opts.output.clone(),
            exit,
            truncated_stacks,
            completed_stacks,
            stopped_by,
            warnings,
            names,
            recorder_cpu,
            ring_readers,
        })
    }
}

/// Moves the rings of `events` to `n` reader threads.
fn start_readers(
    events: &mut [Event],
    n: usize,
    allowed: &[usize],
) -> Result<Readers, RecordError> {
    Readers::start(events, n, allowed).map_err(|e| RecordError::Sys {
        what: "starting the threads that read the ring buffers".into(),
        source: e,
    })
}

/// Readers started when the loop falls behind with `rings` rings: one per
/// group of up to 8 neighbouring CPUs, and at least two, so that one CPU
/// kept busy does not stop the reading.
fn auto_readers(rings: usize) -> usize {
    rings.div_ceil(8).max(2).min(rings.max(1))
}

/// Whether this kernel takes `defer_callchain` (Linux 6.19+; older ones
/// refuse the unknown attribute bit with EINVAL): one sampling event on
/// this thread, opened disabled and closed again.
fn defer_probe() -> io::Result<()> {
    let cfg = EventConfig {
        counter: Counter::CpuClock,
        frequency: 0,
        period: 1_000_000,
        context_switch: false,
        sample_type: sys::sample::TID | sys::sample::CALLCHAIN,
        exclude_kernel: true,
        inherit: false,
        enable_on_exec: false,
        side_band: true,
        max_stack: 0,
        wakeup_bytes: 0,
        wakeup_events: 1,
        exclude_callchain_user: false,
        sample_regs_user: 0,
        sample_stack_user: 0,
        defer_user: true,
        count_lost: false,
    };
    sys::perf_event_open(&cfg, 0, -1).map(drop)
}

/// What the user should know about stacks cut at the kernel's caps and
/// deferred user parts that never met their samples.
fn depth_warnings<W: io::Write>(
    st: &State<W>,
    samples: u64,
    d: &crate::defer::DeferStats,
) -> Vec<String> {
    let mut out = Vec::new();
    if st.cut_at_cap > 0 {
        let cap = st.fp_cap.unwrap_or(0);
        out.push(format!(
            "{} of {samples} stacks reached the kernel's callchain cap ({cap} frames{}) and are cut there{}",
            st.cut_at_cap,
            if st.deferred.is_some() {
                format!(", {} for a deferred user part", crate::depth::DEFERRED_CAP)
            } else {
                String::new()
            },
            if sys::is_root() || cap >= usize::from(crate::depth::WANTED) {
                String::new()
            } else {
                format!(
                    "; as root flamerec raises kernel.perf_event_max_stack to {} for the recording",
                    crate::depth::WANTED
                )
            }
        ));
    }
    if d.unmatched_samples > 0 {
        let why = if st.losses.total() > 0 {
            "their user stack was in a record the kernel dropped with the lost samples, or their thread exited, or recording stopped, before it returned to user space"
        } else {
            "their thread exited, or recording stopped, before it returned to user space, where the kernel walks the user stack (-g fp,defer)"
        };
        out.push(format!(
            "{} samples kept only their kernel frames: {why}",
            d.unmatched_samples
        ));
    }
    if d.orphan_records > 0 {
        out.push(format!(
            "{} deferred user stacks came for samples that were lost",
            d.orphan_records
        ));
    }
    out
}

/// Opens one event per (task, CPU); per CPU the first event owns the ring
/// buffer and the others write into it.
fn open_events(cfg: &EventConfig, tasks: &[i32], pages: usize) -> Result<Vec<Event>, RecordError> {
    let mut cfg = cfg.clone();
    let mut events: Vec<Event> = Vec::new();
    for cpu in crate::online_cpus() {
        let mut owner: Option<usize> = None;
        for &task in tasks {
            let opened = match sys::perf_event_open(&cfg, task, cpu) {
                // Linux before 6.0 does not count an event's lost records:
                // losses are then known from the kernel's LOST records only.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cfg.count_lost => {
                    cfg.count_lost = false;
                    sys::perf_event_open(&cfg, task, cpu)
                }
                other => other,
            };
            let fd = match opened {
                Ok(fd) => fd,
                // A thread of an attached process may exit meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && task > 0 => continue,
                Err(e) => return Err(open_error(cfg.counter, tasks == [-1], e)),
            };
            let counts_lost = cfg.count_lost;
            match owner {
                Some(i) => {
                    sys::set_output(&fd, &events[i].fd).map_err(|e| RecordError::Sys {
                        what: "sharing a ring buffer (PERF_EVENT_IOC_SET_OUTPUT)".into(),
                        source: e,
                    })?;
                    events.push(Event {
                        fd,
                        ring: None,
                        cpu: cpu as u32,
                        counts_lost,
                    });
                }
                None => {
                    let ring =
                        RingBuffer::map(&fd, pages).map_err(|e| RecordError::RingBuffer {
                            mlock_kb: read_trimmed("/proc/sys/kernel/perf_event_mlock_kb"),
                            source: e,
                        })?;
                    owner = Some(events.len());
                    events.push(Event {
                        fd,
                        ring: Some(ring),
                        cpu: cpu as u32,
                        counts_lost,
                    });
                }
            }
        }
    }
    Ok(events)
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

fn open_error(counter: Counter, system_wide: bool, e: io::Error) -> RecordError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => RecordError::PerfDenied {
            paranoid: read_trimmed("/proc/sys/kernel/perf_event_paranoid"),
            needed: if system_wide { 0 } else { 1 },
            source: e,
        },
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            RecordError::EventUnavailable {
                event: match counter {
                    Counter::CpuClock => "cpu-clock",
                    Counter::TaskClock => "task-clock",
                    Counter::Cycles => "cycles",
                    Counter::ContextSwitches => "off-cpu",
                },
                source: e,
            }
        }
        _ => RecordError::Sys {
            what: "perf_event_open".into(),
            source: e,
        },
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
