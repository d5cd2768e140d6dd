//! One recording: open the events, run the loop that drains the ring
//! buffers into the writer, stop cleanly, write the trailer.

mod plan;
mod running;
mod stop;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::sys::EventConfig;
use flamerec_bpf::RingBuffer;
use flamerec_perf::parse::Layout;
use flamerec_perf::procfs;
use flamerec_symbolize::kallsyms::Kallsyms;

use crate::depth::MaxStack;
use crate::embed::Names;
use crate::kernel::TrimRules;
use crate::loss::Phase;
use crate::open::{event_config, open_output, open_with_fallbacks, Watched};
use crate::python::Python;
use crate::readers::{drain_socket, Readers};
use crate::rings::{self, read_trimmed, Event};
use crate::signals::Signals;
use crate::spool::Spool;
use crate::state::{State, StateConfig};
use crate::sys::{self, SuspendedChild, WaitStatus};
use crate::{Progress, RecordError, RecordOptions, RecordSummary, RingReaders, Target};
use plan::{python_walker, selection, Launch, Plan, MAX_STACK_SIZE};
use running::begin;
use stop::{write_out, Stopped};

/// How often `--pid` recordings look whether their processes still run.
const ALIVE_CHECK_EVERY: Duration = Duration::from_millis(100);
/// How long the loop sleeps when no buffer is near its watermark.
const POLL_MS: i32 = 100;

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
#[derive(Default)]
struct Ended {
    exit: Option<WaitStatus>,
    signals_seen: usize,
    stopped_by: Option<i32>,
}

/// The events as opened, with what opening them settled.
struct Opened {
    events: Vec<Event>,
    /// Their attributes, as the kernel took them.
    cfg: EventConfig,
    /// The user stack copied per sample, in bytes (dwarf mode).
    stack_size: u32,
    max_stack: Option<MaxStack>,
    /// The Python walker on them, or why Python frames cannot be read.
    python: (Option<(Python, RingBuffer)>, Option<String>),
}

impl Session {
    /// Opens the file and the events, starts the command and describes
    /// what already runs: from here on the rings fill.
    fn set_up(opts: &RecordOptions, mut plan: Plan) -> Result<Session, RecordError> {
        // Before anything is started: a failure here leaves nothing behind.
        let names = match &opts.embed_names {
            Some(e) => Some(
                Names::start(e)
                    .map_err(|e| RecordError::sys("starting the thread that names frames", e))?,
            ),
            None => None,
        };
        let kallsyms_loader = load_kallsyms(opts);
        let argv = plan.launch.as_ref().map(|(argv, _, _)| argv.as_slice());
        let writer = open_output(opts, argv, plan.call_graph)?;
        let child = match &plan.launch {
            Some((_, _, (c_path, c_argv, c_envp))) => Some(
                SuspendedChild::spawn(c_path, c_argv, c_envp)
                    .map_err(|e| RecordError::sys("cannot fork", e))?,
            ),
            None => None,
        };
        let mut warnings = std::mem::take(&mut plan.warnings);
        let opened = Opened::open(opts, &plan, child.as_ref().map(|c| c.pid()), &mut warnings)?;
        let signals = Signals::register()?;
        let start_mono = sys::monotonic_ns();
        let started = Instant::now();
        // Start the command before anything else that may wait (the kernel
        // symbol table): its records wait in the ring buffers meanwhile.
        let started_child = match start_command(child, plan.launch.as_ref()) {
            Ok(c) => c,
            Err(e) => {
                drop(signals);
                let _ = std::fs::remove_file(&opts.output);
                return Err(e);
            }
        };
        let (mut st, events, max_stack) =
            opened.into_state(opts, &plan, writer, start_mono, warnings);
        // Samples wait for the kernel symbol table, so the loop can drain the
        // rings from the start. Off-CPU samples are weighed when their thread
        // runs again, against a stack already written: those wait for it here.
        let mut kallsyms_loader = kallsyms_loader;
        if plan.off_cpu || kallsyms_loader.is_none() {
            st.set_kallsyms(join_kallsyms(kallsyms_loader.take()));
        }
        let pid = begin(&mut st, &events, &opts.target, started_child)?;
        Ok(Session {
            st,
            scratch: vec![Vec::new(); events.len()],
            events,
            kallsyms_loader,
            max_stack,
            signals,
            started,
            pid,
            names,
            readers: None,
            allowed: plan.allowed,
        })
    }

    /// Drains the rings until the command ends, the processes are gone, the
    /// duration is over or a signal says stop.
    fn run(
        &mut self,
        opts: &RecordOptions,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Ended, RecordError> {
        // The command (forked above) keeps its priority; this thread drains
        // ahead of it, so a workload on every core does not starve the reads
        // (as root; refused otherwise, and then the loss cause says so).
        let _ = sys::raise_recorder_priority();
        // Readers started from here on share that priority.
        if let RingReaders::Threads(n) = opts.ring_readers {
            self.readers = Some((
                start_readers(&mut self.events, n, &self.allowed)?,
                self.started.elapsed(),
            ));
        }
        let mut ended = Ended::default();
        let mut last_flush = Instant::now();
        let mut last_alive_check = Instant::now();
        loop {
            self.wait_for_records()?;
            self.drain(opts)?;
            self.name_and_write(opts, &mut last_flush)?;
            progress(&Progress {
                samples: self.st.writer().samples(),
                lost: self.st.losses().total(),
                elapsed: self.started.elapsed(),
            });
            if self.signalled(&mut ended) || self.over(opts, &mut ended, &mut last_alive_check)? {
                return Ok(ended);
            }
        }
    }

    /// Waits until a ring is near its watermark, a reader thread or a
    /// signal wakes the loop, or the poll times out.
    fn wait_for_records(&mut self) -> Result<(), RecordError> {
        let mut fds: Vec<_> = self
            .events
            .iter()
            .filter(|e| e.ring.is_some())
            .map(|e| e.fd.as_fd())
            .collect();
        fds.push(self.signals.wake.as_fd());
        if let Some((r, _)) = self.readers.as_ref() {
            fds.push(r.wake_fd());
        }
        self.st.losses().phase_begins();
        sys::poll_readable(&fds, POLL_MS).map_err(|e| RecordError::sys("poll", e))?;
        drain_socket(&self.signals.wake);
        if let Some((r, _)) = self.readers.as_ref() {
            r.clear_wake();
        }
        self.st.losses().phase_done(Phase::Poll);
        Ok(())
    }

    /// Drains the rings (and what the reader threads took) into the state;
    /// starts reader threads when a ring was found over half full.
    fn drain(&mut self, opts: &RecordOptions) -> Result<(), RecordError> {
        let taken = self
            .readers
            .as_ref()
            .map_or_else(Vec::new, |(r, _)| r.take());
        let late = self.st.drain(&mut self.events, &mut self.scratch, taken);
        if late && self.readers.is_none() && opts.ring_readers == RingReaders::Auto {
            // A ring was over half full when the loop came to it: the next
            // wait for a CPU could overrun it.
            let n = self.events.iter().filter(|e| e.ring.is_some()).count();
            self.readers = Some((
                start_readers(&mut self.events, auto_readers(n), &self.allowed)?,
                self.started.elapsed(),
            ));
        }
        self.st.losses().phase_done(Phase::Drain);
        Ok(())
    }

    /// Hands new modules to the namer and writes what it found; takes the
    /// kernel symbol table once loaded; flushes the output when due.
    fn name_and_write(
        &mut self,
        opts: &RecordOptions,
        last_flush: &mut Instant,
    ) -> Result<(), RecordError> {
        let st = &mut self.st;
        if let Some(n) = &mut self.names {
            n.locate(st.take_located());
            n.offer(st.writer());
            n.write_found(st.writer_mut());
            st.losses().phase_done(Phase::Names);
        }
        if self
            .kallsyms_loader
            .as_ref()
            .is_some_and(|h| h.is_finished())
        {
            st.set_kallsyms(join_kallsyms(self.kallsyms_loader.take()));
        }
        if last_flush.elapsed() >= opts.chunk_every || st.writer().wants_flush() {
            st.writer_mut().flush().map_err(|e| output_error(opts, e))?;
            *last_flush = Instant::now();
            st.losses().phase_done(Phase::Write);
        }
        Ok(())
    }

    /// Whether a SIGINT or SIGTERM ends the loop: the command decides how
    /// to end on the first (it is passed on), a second stops at once;
    /// without a command, the first.
    fn signalled(&mut self, ended: &mut Ended) -> bool {
        let signal = self.signals.flag.swap(0, Ordering::SeqCst);
        if signal == 0 {
            return false;
        }
        ended.signals_seen += 1;
        match self.pid {
            Some(p) if ended.signals_seen < 2 => {
                let _ = sys::kill(p, signal as i32);
                false
            }
            Some(_) => {
                ended.stopped_by = Some(signal as i32);
                true
            }
            None => true,
        }
    }

    /// Whether the recording is over: the command exited, the processes
    /// attached to are gone, or the duration passed.
    fn over(
        &self,
        opts: &RecordOptions,
        ended: &mut Ended,
        last_alive_check: &mut Instant,
    ) -> Result<bool, RecordError> {
        match self.pid {
            Some(p) => match sys::wait_nohang(p) {
                Ok(Some(status)) => {
                    ended.exit = Some(status);
                    return Ok(true);
                }
                Ok(None) => {}
                Err(e) => return Err(RecordError::sys("waitpid", e)),
            },
            // Reading /proc/PID/stat each round cost a fifth of the
            // recorder's CPU when attached at 4999 Hz: ten times a second is
            // soon enough to notice the processes are gone.
            None => {
                if let Target::Pids(pids) = &opts.target {
                    if last_alive_check.elapsed() >= ALIVE_CHECK_EVERY {
                        *last_alive_check = Instant::now();
                        if !pids.iter().any(|&p| procfs::alive(p)) {
                            return Ok(true);
                        }
                    }
                }
            }
        }
        Ok(opts.duration.is_some_and(|d| self.started.elapsed() >= d))
    }

    /// Stops sampling, drains what is left, writes the trailer and the names.
    fn finish(self, opts: &RecordOptions, mut ended: Ended) -> Result<RecordSummary, RecordError> {
        let pid = self.pid;
        let Stopped {
            finished,
            duration,
            ring_readers,
            names,
        } = self.stop();
        let (written, bytes) = write_out(opts, finished, names)?;
        if let (None, Some(p)) = (ended.exit, pid) {
            if ended.signals_seen < 2 {
                // -d elapsed: the command keeps running unrecorded; wait for
                // it so flamerec still exits with its status.
                ended.exit = wait_blocking(p);
            }
        }
        let recorder_cpu = procfs::own_cpu_ticks()
            .ok()
            .map(|t| Duration::from_millis(t * 1000 / procfs::TICKS_PER_SECOND));
        let counts = written.counts;
        Ok(RecordSummary {
            samples: written.samples,
            lost: counts.lost_samples,
            processes: counts.processes,
            threads: counts.threads,
            duration,
            bytes,
            output: opts.output.clone(),
            exit: ended.exit,
            truncated_stacks: counts.truncated_stacks,
            completed_stacks: counts.completed_stacks,
            stopped_by: ended.stopped_by,
            warnings: written.warnings,
            names: written.names,
            recorder_cpu,
            ring_readers,
        })
    }
}

impl Opened {
    /// Opens the events for the plan (the command's pid, when one was
    /// forked), with the Python walker attached as they open where it must
    /// be; the notes on what the kernel allowed go to `warnings`.
    fn open(
        opts: &RecordOptions,
        plan: &Plan,
        command: Option<i32>,
        warnings: &mut Vec<String>,
    ) -> Result<Opened, RecordError> {
        let cpus = procfs::online_cpus().len();
        let (stack_size, pages, ring_warning) =
            rings::fit(plan.dwarf, opts.stack_size, opts.mmap_pages, cpus);
        warnings.extend(ring_warning);
        // Frame-pointer chains are as deep as the kernel lets them be.
        let mut max_stack = (!plan.dwarf).then(|| MaxStack::raise(sys::is_root()));
        let mut cfg = event_config(
            opts,
            plan.dwarf,
            plan.defer,
            stack_size,
            pages,
            command.is_some(),
        );
        cfg.max_stack = max_stack.as_ref().map_or(0, |m| m.value);
        // Every (task, CPU) pair to open: the command, each thread of the
        // attached processes, or every task (-1) on each CPU.
        let tasks: Vec<i32> = match (&opts.target, command) {
            (_, Some(pid)) => vec![pid],
            (Target::Pids(pids), _) => pids
                .iter()
                .flat_map(|&p| procfs::threads_of(p).unwrap_or_default())
                .map(|t| t as i32)
                .collect(),
            _ => vec![-1],
        };
        let watched = match &plan.cgroup {
            Some(dir) => Watched::Cgroup(dir),
            None => Watched::Tasks(&tasks),
        };
        let (python, python_unread) = python_walker(opts, plan.launch.as_ref());
        let program: Option<&OwnedFd> = python
            .as_ref()
            .filter(|(_, now)| *now)
            .map(|((p, _), _)| p.program());
        let events = open_with_fallbacks(opts, &mut cfg, watched, pages, &mut max_stack, program)?;
        // The walker at once on the events that want it, before anything else.
        let python = match python {
            Some(((mut p, ring), now)) => match p.events(&events, now) {
                Ok(()) => (Some((p, ring)), python_unread),
                Err(why) => (None, Some(plan::unread_by_bpf(&why))),
            },
            None => (None, python_unread),
        };
        if cfg.exclude_kernel && opts.kernel {
            warnings.push(format!(
                "kernel sampling is not allowed (kernel.perf_event_paranoid is {}); recording user stacks only, as with --no-kernel",
                read_trimmed("/proc/sys/kernel/perf_event_paranoid")
            ));
        }
        warnings.extend(max_stack.as_ref().and_then(|m| m.note.clone()));
        Ok(Opened {
            events,
            cfg,
            stack_size,
            max_stack,
            python,
        })
    }

    /// The state that reads these events' records into `writer`, with the
    /// events and the raised stack depth kept for the stop.
    fn into_state(
        self,
        opts: &RecordOptions,
        plan: &Plan,
        writer: flamerec_format::Writer<Spool>,
        start_mono: u64,
        warnings: Vec<String>,
    ) -> (State<Spool>, Vec<Event>, Option<MaxStack>) {
        let Opened {
            events,
            cfg,
            stack_size,
            max_stack,
            python: (python, python_unread),
        } = self;
        let st = State::new(StateConfig {
            writer,
            dwarf: plan.dwarf,
            off_cpu: plan.off_cpu,
            trim: TrimRules {
                sampled: !cfg.exclude_kernel,
                keep_profiler_frames: opts.keep_profiler_frames,
                extra: opts.trim.clone(),
                off_cpu: plan.off_cpu,
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
            defer: plan.defer,
            selection: selection(opts),
            copy_is_largest: stack_size >= MAX_STACK_SIZE,
            frequency_hz: if plan.off_cpu { 0 } else { opts.frequency },
            warnings,
            python,
            python_unread,
            python_interpreter: opts.python_interpreter,
        });
        (st, events, max_stack)
    }
}

/// The kernel symbol table takes tens of milliseconds to read: loaded
/// while the command starts, when kernel frames are recorded.
fn load_kallsyms(opts: &RecordOptions) -> Option<std::thread::JoinHandle<Kallsyms>> {
    opts.kernel.then(|| {
        let cache = opts.embed_names.as_ref().and_then(|e| e.cache_dir.clone());
        std::thread::spawn(move || Kallsyms::load_cached(cache.as_deref()).unwrap_or_default())
    })
}

/// Lets the forked command run: its pid and program, or why it could not
/// be started.
fn start_command(
    child: Option<SuspendedChild>,
    launch: Option<&Launch>,
) -> Result<Option<(i32, &Path)>, RecordError> {
    let (Some(child), Some((argv, program, _))) = (child, launch) else {
        return Ok(None);
    };
    match child.start() {
        Ok(pid) => Ok(Some((pid, program.as_path()))),
        Err(e) => {
            let command = argv[0].to_string_lossy().into_owned();
            Err(match e.raw_os_error() {
                Some(libc::ENOENT) => RecordError::CommandNotFound(command),
                _ => RecordError::CommandNotExecutable { command, source: e },
            })
        }
    }
}

/// An error writing the output file.
fn output_error(opts: &RecordOptions, source: flamerec_format::FormatError) -> RecordError {
    RecordError::Output {
        path: opts.output.clone(),
        source,
    }
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
