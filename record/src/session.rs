//! One recording: open the events, run the loop that drains the ring
//! buffers into the writer, stop cleanly, write the trailer.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flamerec_format::{
    Frame, FrameId, Mapping, Metadata, Module, ModuleId, ModuleKind, Sample, Totals, Writer,
};

use flamerec_unwind::{StackUnwinder, UserRegs};

use crate::kallsyms::{is_sampling_path, is_scheduler, AddressRanges, Kallsyms};
use crate::launch::{c_strings, find_program};
use crate::parse::{split, Layout, PerfRecord, SampleRecord};
use crate::procs::{module_for, Processes};
use crate::sys::{self, Counter, EventConfig, RingBuffer, SuspendedChild, WaitStatus};
use crate::{CallGraph, EventKind, Progress, RecordError, RecordOptions, RecordSummary, Target};

/// How often buffered data reaches the file, at the latest.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long the loop sleeps when no buffer is near its watermark.
const POLL_MS: i32 = 100;
/// A perf record is at most 64 KiB; the stack copy must leave room for the rest.
const MAX_STACK_SIZE: u32 = 60 * 1024;

struct Event {
    fd: std::os::fd::OwnedFd,
    ring: RingBuffer,
}

/// Records as `opts` says, calling `progress` a few times a second.
pub fn record(
    opts: &RecordOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<RecordSummary, RecordError> {
    let argv = match &opts.target {
        Target::Command(argv) if !argv.is_empty() => argv.clone(),
        Target::Command(_) => return Err(RecordError::NoCommand),
        Target::Pids(_) | Target::System => {
            return Err(RecordError::Unsupported(
                "--pid and --all-cpus are not supported yet; give a command after `--`".into(),
            ))
        }
    };
    let dwarf = opts.call_graph == CallGraph::Dwarf;
    if dwarf && (opts.stack_size < 8 || opts.stack_size > MAX_STACK_SIZE) {
        return Err(RecordError::Unsupported(format!(
            "--stack-size must be between 8 and {MAX_STACK_SIZE} bytes"
        )));
    }
    let counter = match opts.event {
        EventKind::CpuClock => Counter::CpuClock,
        EventKind::TaskClock => Counter::TaskClock,
        EventKind::Cycles => Counter::Cycles,
        EventKind::OffCpu => {
            return Err(RecordError::Unsupported(
                "-e off-cpu is not supported yet".into(),
            ))
        }
    };
    let program = find_program(&argv[0])?;
    let (c_path, c_argv, c_envp) = c_strings(&program, &argv)?;

    // The kernel symbol table takes tens of milliseconds to read: load it
    // while the command starts.
    let kallsyms_loader = opts
        .kernel
        .then(|| std::thread::spawn(|| Kallsyms::load().unwrap_or_default()));

    let file = File::create(&opts.output).map_err(|e| RecordError::Output {
        path: opts.output.clone(),
        source: e.into(),
    })?;
    let meta = Metadata {
        command: argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        target: "command".into(),
        host: read_trimmed("/proc/sys/kernel/hostname"),
        kernel_release: read_trimmed("/proc/sys/kernel/osrelease"),
        start_unix_ns: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        event: opts.event.name().into(),
        frequency_hz: opts.frequency,
        call_graph: opts.call_graph.name().into(),
        weight_unit: "samples".into(),
        flamerec_version: env!("CARGO_PKG_VERSION").into(),
    };
    let out_err = |e| RecordError::Output {
        path: opts.output.clone(),
        source: e,
    };
    let writer = Writer::new(BufWriter::new(file), &meta).map_err(out_err)?;

    let child = SuspendedChild::spawn(&c_path, &c_argv, &c_envp).map_err(|e| RecordError::Sys {
        what: "cannot fork".into(),
        source: e,
    })?;
    let mut sample_type = sys::sample::IP
        | sys::sample::TID
        | sys::sample::TIME
        | sys::sample::CPU
        | sys::sample::PERIOD
        | sys::sample::CALLCHAIN;
    if dwarf {
        sample_type |= sys::sample::REGS_USER | sys::sample::STACK_USER;
    }
    // Dwarf samples carry a stack copy each: give the ring room for ~100 ms of them.
    let default_pages = if dwarf { 1024 } else { 128 };
    let pages = opts
        .mmap_pages
        .unwrap_or(default_pages)
        .max(1)
        .next_power_of_two();
    let cfg = EventConfig {
        counter,
        frequency: opts.frequency,
        sample_type,
        exclude_kernel: !opts.kernel,
        inherit: true,
        enable_on_exec: true,
        side_band: true,
        max_stack: 0,
        wakeup_bytes: (pages * sys::page_size() / 4) as u32,
        exclude_callchain_user: dwarf,
        sample_regs_user: if dwarf { sys::REGS_BP_SP_IP } else { 0 },
        sample_stack_user: if dwarf { opts.stack_size & !7 } else { 0 },
    };
    let mut events = Vec::new();
    for cpu in crate::online_cpus() {
        let fd =
            sys::perf_event_open(&cfg, child.pid(), cpu).map_err(|e| open_error(opts.event, e))?;
        let ring = RingBuffer::map(&fd, pages).map_err(|e| RecordError::RingBuffer {
            mlock_kb: read_trimmed("/proc/sys/kernel/perf_event_mlock_kb"),
            source: e,
        })?;
        events.push(Event { fd, ring });
    }

    let signal = Arc::new(AtomicUsize::new(0));
    let mut sig_ids = Vec::new();
    for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Ok(id) = signal_hook::flag::register_usize(s, Arc::clone(&signal), s as usize) {
            sig_ids.push(id);
        }
    }

    let start_mono = sys::monotonic_ns();
    let started = Instant::now();
    let exec_result = child.start();
    let pid = match exec_result {
        Ok(pid) => pid,
        Err(e) => {
            for id in sig_ids {
                signal_hook::low_level::unregister(id);
            }
            let _ = std::fs::remove_file(&opts.output);
            let command = argv[0].to_string_lossy().into_owned();
            return Err(match e.raw_os_error() {
                Some(libc::ENOENT) => RecordError::CommandNotFound(command),
                _ => RecordError::CommandNotExecutable { command, source: e },
            });
        }
    };

    let kallsyms = kallsyms_loader
        .and_then(|h| h.join().ok())
        .unwrap_or_default();
    let mut st = State::new(writer, kallsyms, opts, start_mono, sample_type);
    let comm = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    st.writer
        .comm(0, pid as u32, pid as u32, &truncate_comm(&comm), true);
    st.seen(pid as u32, pid as u32);

    let mut exit = None;
    let mut signals_seen = 0;
    let mut last_flush = Instant::now();
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); events.len()];
    loop {
        let fds: Vec<_> = events.iter().map(|e| &e.fd).collect();
        sys::poll_readable(&fds, POLL_MS).map_err(|e| RecordError::Sys {
            what: "poll".into(),
            source: e,
        })?;
        st.drain(&mut events, &mut bufs);
        if last_flush.elapsed() >= FLUSH_EVERY || st.writer.wants_flush() {
            st.writer.flush().map_err(out_err)?;
            last_flush = Instant::now();
        }
        progress(&Progress {
            samples: st.writer.samples(),
            lost: st.lost,
            elapsed: started.elapsed(),
        });
        let sig = signal.swap(0, Ordering::SeqCst);
        if sig != 0 {
            signals_seen += 1;
            if signals_seen >= 2 {
                // A second Ctrl-C: stop now, the file is still finished below.
                break;
            }
            let _ = sys::kill(pid, sig as i32);
        }
        match sys::wait_nohang(pid) {
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
        }
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
    }
    for e in &events {
        let _ = sys::disable(&e.fd);
    }
    st.drain(&mut events, &mut bufs);
    let duration = started.elapsed();
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    let truncated_stacks = st.unwinder.as_ref().map_or(0, |u| u.stats().truncated);
    let totals = Totals {
        truncated_stacks,
        lost_samples: st.lost,
        duration_ns: duration.as_nanos() as u64,
        processes: st.pids.len() as u64,
        threads: st.tids.len() as u64,
        ..Default::default()
    };
    let samples = st.writer.samples();
    let lost = st.lost;
    let (processes, threads) = (st.pids.len() as u64, st.tids.len() as u64);
    let mut warnings = st.warnings;
    let out = st.writer.finish(totals).map_err(out_err)?;
    drop(out);
    let bytes = std::fs::metadata(&opts.output).map_or(0, |m| m.len());
    if exit.is_none() && opts.duration.is_some() {
        // -d elapsed: the command keeps running unrecorded; wait for it so
        // flamerec still exits with its status.
        exit = wait_blocking(pid);
    }
    if samples > 0 && lost * 100 > samples + lost {
        warnings.push(format!(
            "{lost} samples were lost ({:.1}%): lower -F or raise --mmap-pages",
            lost as f64 * 100.0 / (samples + lost) as f64
        ));
    }
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
        warnings,
    })
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

fn open_error(event: EventKind, e: io::Error) -> RecordError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => RecordError::PerfDenied {
            paranoid: read_trimmed("/proc/sys/kernel/perf_event_paranoid"),
            source: e,
        },
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            RecordError::EventUnavailable {
                event: event.name(),
                source: e,
            }
        }
        _ => RecordError::Sys {
            what: "perf_event_open".into(),
            source: e,
        },
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The kernel keeps 15 bytes of a task name.
fn truncate_comm(s: &str) -> String {
    let mut end = s.len().min(15);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Everything the loop keeps between rounds.
struct State<W: io::Write> {
    writer: Writer<W>,
    kallsyms: Kallsyms,
    kernel_module: ModuleId,
    unknown_module: ModuleId,
    kernel_frames: HashMap<u64, FrameId>,
    symbols_written: HashSet<usize>,
    trim: AddressRanges,
    trim_sched: AddressRanges,
    off_cpu: bool,
    procs: Processes,
    layout: Layout,
    start_mono: u64,
    lost: u64,
    malformed: u64,
    pids: HashSet<u32>,
    tids: HashSet<u32>,
    warnings: Vec<String>,
    frames: Vec<FrameId>,
    unwinder: Option<StackUnwinder>,
    user_addrs: Vec<u64>,
}

impl<W: io::Write> State<W> {
    fn new(
        mut writer: Writer<W>,
        kallsyms: Kallsyms,
        opts: &RecordOptions,
        start_mono: u64,
        sample_type: u64,
    ) -> Self {
        let kernel_module = writer.module(&Module {
            kind: ModuleKind::Kernel,
            path: "[kernel.kallsyms]".into(),
            build_id: Vec::new(),
        });
        let unknown_module = writer.module(&Module {
            kind: ModuleKind::Anonymous,
            path: "[unknown]".into(),
            build_id: Vec::new(),
        });
        let extra: HashSet<&str> = opts.trim.iter().map(String::as_str).collect();
        let keep = opts.keep_profiler_frames;
        let trim = kallsyms.ranges(|n| (!keep && is_sampling_path(n)) || extra.contains(n));
        let trim_sched = kallsyms.ranges(|n| !keep && is_scheduler(n));
        let mut warnings = Vec::new();
        if opts.kernel && kallsyms.is_empty() {
            warnings.push(
                "kernel symbols are hidden (/proc/kallsyms shows no addresses: check kernel.kptr_restrict); kernel frames will show as addresses"
                    .into(),
            );
        }
        State {
            writer,
            kallsyms,
            kernel_module,
            unknown_module,
            kernel_frames: HashMap::new(),
            symbols_written: HashSet::new(),
            trim,
            trim_sched,
            off_cpu: opts.event == EventKind::OffCpu,
            procs: Processes::default(),
            layout: Layout { sample_type },
            start_mono,
            lost: 0,
            malformed: 0,
            pids: HashSet::new(),
            tids: HashSet::new(),
            warnings,
            frames: Vec::new(),
            unwinder: (opts.call_graph == CallGraph::Dwarf).then(new_unwinder),
            user_addrs: Vec::new(),
        }
    }

    fn seen(&mut self, pid: u32, tid: u32) {
        self.pids.insert(pid);
        self.tids.insert(tid);
    }

    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.start_mono)
    }

    /// Copies every ring out, then handles the records of all CPUs in time
    /// order, so an exec or mmap on one CPU precedes samples on another.
    fn drain(&mut self, events: &mut [Event], bufs: &mut [Vec<u8>]) {
        for (e, buf) in events.iter_mut().zip(bufs.iter_mut()) {
            buf.clear();
            e.ring.drain(buf);
        }
        let mut recs = Vec::new();
        for buf in bufs.iter() {
            for (ty, misc, body) in split(buf, &mut self.malformed) {
                match self.layout.decode(ty, misc, body) {
                    Some(r) => recs.push(r),
                    None => self.malformed += 1,
                }
            }
        }
        recs.sort_by_key(record_time);
        for r in recs {
            self.handle(r);
        }
    }

    fn handle(&mut self, r: PerfRecord<'_>) {
        match r {
            PerfRecord::Sample(s) => self.sample(&s),
            PerfRecord::Mmap {
                pid,
                addr,
                len,
                pgoff,
                build_id,
                filename,
                time,
            } => {
                let module = module_for(filename, build_id.unwrap_or(&[]));
                let kind = module.kind;
                if let Some(u) = &mut self.unwinder {
                    let end = addr.saturating_add(len);
                    u.add_mapping(pid, addr, end, pgoff, filename, &module.build_id);
                }
                let id = self.writer.module(&module);
                self.procs.map(pid, addr, len, pgoff, id, kind);
                let time_ns = self.rel(time);
                self.writer.mapping(&Mapping {
                    time_ns,
                    pid,
                    start: addr,
                    end: addr.saturating_add(len),
                    pgoff,
                    module: id,
                });
            }
            PerfRecord::Comm {
                pid,
                tid,
                name,
                exec,
                time,
            } => {
                if exec {
                    self.procs.exec(pid);
                    if let Some(u) = &mut self.unwinder {
                        u.exec(pid);
                    }
                }
                self.seen(pid, tid);
                let t = self.rel(time);
                self.writer.comm(t, pid, tid, name, exec);
            }
            PerfRecord::Task {
                exit,
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                let t = self.rel(time);
                if exit {
                    self.writer.exit(t, pid, tid);
                } else {
                    self.procs.fork(ppid, pid);
                    if let Some(u) = &mut self.unwinder {
                        u.fork(ppid, pid);
                    }
                    self.seen(pid, tid);
                    self.writer.fork(t, pid, ppid, tid, ptid);
                }
            }
            PerfRecord::Lost { count, time } => {
                self.lost += count;
                let t = self.rel(time);
                self.writer.lost(t, count);
            }
            PerfRecord::Throttle | PerfRecord::Other => {}
        }
    }

    /// Whether a leading kernel frame belongs to the profiler, not the workload.
    fn trimmed(&self, addr: u64) -> bool {
        self.trim.contains(addr) || (self.off_cpu && self.trim_sched.contains(addr))
    }

    fn kernel_frame(&mut self, addr: u64) -> FrameId {
        if let Some(&f) = self.kernel_frames.get(&addr) {
            return f;
        }
        if let Some(i) = self.kallsyms.lookup(addr) {
            if self.symbols_written.insert(i) {
                let sym = self.kallsyms.symbol(i);
                self.writer.kernel_symbol(&sym);
            }
        }
        let f = self.writer.frame(Frame {
            module: self.kernel_module,
            address: addr,
        });
        self.kernel_frames.insert(addr, f);
        f
    }

    fn sample(&mut self, s: &SampleRecord<'_>) {
        self.seen(s.pid, s.tid);
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        let mut context = 0u64;
        let mut first_in_context = true;
        let mut trimming = true;
        for ip in s.callchain() {
            if ip >= sys::PERF_CONTEXT_MAX {
                context = ip;
                first_in_context = true;
                continue;
            }
            // Caller frames hold return addresses: step back into the call.
            let addr = if first_in_context {
                ip
            } else {
                ip.wrapping_sub(1)
            };
            first_in_context = false;
            if context == sys::PERF_CONTEXT_KERNEL {
                if trimming && self.trimmed(addr) {
                    continue;
                }
                trimming = false;
                let f = self.kernel_frame(addr);
                frames.push(f);
            } else if context == sys::PERF_CONTEXT_USER {
                trimming = false;
                let frame = self.procs.resolve(s.pid, addr).unwrap_or(Frame {
                    module: self.unknown_module,
                    address: addr,
                });
                frames.push(self.writer.frame(frame));
            }
        }
        if let (Some(u), Some([bp, sp, ip])) = (&mut self.unwinder, s.user_regs) {
            let mut addrs = std::mem::take(&mut self.user_addrs);
            addrs.clear();
            u.unwind(s.pid, UserRegs { ip, sp, bp }, s.user_stack, &mut addrs);
            for (i, &a) in addrs.iter().enumerate() {
                // Return addresses step back into the call instruction.
                let addr = if i == 0 { a } else { a.wrapping_sub(1) };
                let frame = self.procs.resolve(s.pid, addr).unwrap_or(Frame {
                    module: self.unknown_module,
                    address: addr,
                });
                frames.push(self.writer.frame(frame));
            }
            self.user_addrs = addrs;
        }
        if frames.is_empty() && s.ip != 0 {
            let f = if s.ip >= 1 << 63 {
                self.kernel_frame(s.ip)
            } else {
                let frame = self.procs.resolve(s.pid, s.ip).unwrap_or(Frame {
                    module: self.unknown_module,
                    address: s.ip,
                });
                self.writer.frame(frame)
            };
            frames.push(f);
        }
        frames.reverse();
        let stack = self.writer.stack(&frames);
        self.frames = frames;
        let time_ns = self.rel(s.time);
        self.writer.sample(Sample {
            time_ns,
            pid: s.pid,
            tid: s.tid,
            stack,
            weight: 1,
        });
    }
}

fn record_time(r: &PerfRecord<'_>) -> u64 {
    match r {
        PerfRecord::Sample(s) => s.time,
        PerfRecord::Mmap { time, .. }
        | PerfRecord::Comm { time, .. }
        | PerfRecord::Task { time, .. }
        | PerfRecord::Lost { time, .. } => *time,
        PerfRecord::Throttle | PerfRecord::Other => 0,
    }
}

/// An unwinder that also knows this kernel's vDSO, read from our own
/// address space (every process maps the same image).
fn new_unwinder() -> StackUnwinder {
    let mut u = StackUnwinder::new();
    if let Some(image) = own_vdso() {
        u.add_image("[vdso]", &image);
    }
    u
}

fn own_vdso() -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (a, b) = range.split_once('-')?;
    let (start, end) = (u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?);
    let len = usize::try_from(end.checked_sub(start)?).ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mem = File::open("/proc/self/mem").ok()?;
    let mut buf = vec![0u8; len];
    mem.read_exact_at(&mut buf, start).ok()?;
    Some(buf)
}
