//! Opening a recording's file and events: the metadata, the sampling
//! event's attributes as the options say, and the fallbacks where the
//! kernel refuses part of what was asked.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::time::{SystemTime, UNIX_EPOCH};

use flamerec_format::{Metadata, Writer};

use crate::depth::MaxStack;
use crate::rings::{self, read_trimmed, Event};
use crate::spool::Spool;
use crate::sys::{self, Counter, EventConfig, RingBuffer};
use crate::{CallGraph, EventKind, RecordError, RecordOptions, Target};

/// Creates the output file and writes its metadata: what the recording
/// is of (`argv`, or the target) and how it is made.
pub(crate) fn open_output(
    opts: &RecordOptions,
    argv: Option<&[OsString]>,
    call_graph: CallGraph,
) -> Result<Writer<Spool>, RecordError> {
    let off_cpu = opts.event == EventKind::OffCpu;
    let out_err = |e| RecordError::Output {
        path: opts.output.clone(),
        source: e,
    };
    let file = File::create(&opts.output).map_err(|e| out_err(e.into()))?;
    let meta = Metadata {
        command: argv.map_or_else(Vec::new, |argv| {
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
            Target::Cgroup(p) => format!("cgroup {}", p.display()),
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
        window: None,
    };
    let spool = Spool::new(file)
        .map_err(|e| RecordError::sys("starting the thread that writes the output", e))?;
    Writer::new(spool, &meta).map_err(out_err)
}

/// The sampling event's attributes, as the options and the plan say
/// (`max_stack` is set by the caller, which may have to lower it).
pub(crate) fn event_config(
    opts: &RecordOptions,
    dwarf: bool,
    defer: bool,
    stack_size: u32,
    pages: usize,
    command: bool,
) -> EventConfig {
    let off_cpu = opts.event == EventKind::OffCpu;
    let frequency = if off_cpu { 0 } else { opts.frequency };
    let mut sample_type = sys::sample::IP
        | sys::sample::TID
        | sys::sample::TIME
        | sys::sample::CPU
        | sys::sample::PERIOD
        | sys::sample::CALLCHAIN;
    if dwarf {
        sample_type |= sys::sample::REGS_USER | sys::sample::STACK_USER;
    }
    EventConfig {
        counter: opts.event.counter(),
        frequency,
        period: 1,
        context_switch: off_cpu,
        sample_type,
        exclude_kernel: !opts.kernel,
        // Per-CPU events (system-wide, a cgroup) cannot inherit.
        inherit: matches!(opts.target, Target::Command(_) | Target::Pids(_)),
        enable_on_exec: command,
        side_band: true,
        max_stack: 0,
        wakeup_bytes: rings::wakeup_bytes(pages, dwarf.then_some(stack_size), frequency),
        wakeup_events: 0,
        exclude_callchain_user: dwarf,
        sample_regs_user: if dwarf { sys::REGS_BX_BP_SP_IP } else { 0 },
        sample_stack_user: if dwarf { stack_size & !7 } else { 0 },
        defer_user: defer,
        count_lost: true,
    }
}

/// Opens the events, falling back where the kernel refuses what was asked:
/// a `sample_max_stack` another recorder lowered meanwhile (the value in
/// force is taken), and kernel sampling (recording goes on with user stacks
/// only; `cfg.exclude_kernel` then says so).
///
/// `program` is attached to each event as soon as it is opened: a process
/// forked meanwhile takes its inherited events' program as they have it
/// then (an event it cannot be attached to runs without it).
pub(crate) fn open_with_fallbacks(
    opts: &RecordOptions,
    cfg: &mut EventConfig,
    tasks: Watched<'_>,
    pages: usize,
    max_stack: &mut Option<MaxStack>,
    program: Option<&OwnedFd>,
) -> Result<Vec<Event>, RecordError> {
    let open_events =
        |cfg: &EventConfig, event, tasks, pages| open_events(cfg, event, tasks, pages, program);
    match open_events(cfg, opts.event, tasks, pages) {
        Err(RecordError::Sys { source, .. })
            if source.raw_os_error() == Some(libc::EOVERFLOW) && cfg.max_stack > 0 =>
        {
            cfg.max_stack = max_stack.as_mut().map_or(0, MaxStack::lowered);
            open_events(cfg, opts.event, tasks, pages)
        }
        Err(RecordError::PerfDenied { .. }) if opts.kernel && opts.event != EventKind::OffCpu => {
            cfg.exclude_kernel = true;
            open_events(cfg, opts.event, tasks, pages)
        }
        other => other,
    }
}

/// Whether this kernel takes `defer_callchain` (Linux 6.19+; older ones
/// refuse the unknown attribute bit with EINVAL): one sampling event on
/// this thread, opened disabled and closed again.
pub(crate) fn defer_probe() -> io::Result<()> {
    let cfg = EventConfig {
        period: 1_000_000,
        sample_type: sys::sample::TID | sys::sample::CALLCHAIN,
        exclude_kernel: true,
        side_band: true,
        defer_user: true,
        ..EventConfig::bare(Counter::CpuClock)
    };
    sys::perf_event_open(&cfg, 0, -1).map(drop)
}

/// What the events watch on each CPU.
#[derive(Clone, Copy)]
pub(crate) enum Watched<'a> {
    /// These tasks (with inherit, their children); -1 for every task.
    Tasks(&'a [i32]),
    /// The tasks of a cgroup (the open directory) and its descendants.
    Cgroup(&'a File),
}

/// Opens one event per (task, CPU); per CPU the first event owns the ring
/// buffer and the others write into it.
fn open_events(
    cfg: &EventConfig,
    event: EventKind,
    watched: Watched<'_>,
    pages: usize,
    program: Option<&OwnedFd>,
) -> Result<Vec<Event>, RecordError> {
    let mut cfg = cfg.clone();
    let mut events: Vec<Event> = Vec::new();
    let tasks = match watched {
        Watched::Tasks(t) => t,
        Watched::Cgroup(_) => &[-1],
    };
    for cpu in flamerec_perf::procfs::online_cpus() {
        let cpu = cpu as i32;
        let mut owner: Option<usize> = None;
        for &task in tasks {
            let open = |cfg: &EventConfig| match watched {
                Watched::Cgroup(dir) => sys::perf_event_open_cgroup(cfg, dir, cpu),
                Watched::Tasks(_) => sys::perf_event_open(cfg, task, cpu),
            };
            let opened = match open(&cfg) {
                // Linux before 6.0 does not count an event's lost records:
                // losses are then known from the kernel's LOST records only.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cfg.count_lost => {
                    cfg.count_lost = false;
                    open(&cfg)
                }
                other => other,
            };
            let fd = match opened {
                Ok(fd) => fd,
                // A thread of an attached process may exit meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && task > 0 => continue,
                Err(e) => return Err(open_error(event, tasks == [-1], e)),
            };
            if let Some(p) = program {
                let _ = sys::set_bpf(&fd, p);
            }
            let counts_lost = cfg.count_lost;
            match owner {
                Some(i) => {
                    sys::set_output(&fd, &events[i].fd).map_err(|e| {
                        RecordError::sys("sharing a ring buffer (PERF_EVENT_IOC_SET_OUTPUT)", e)
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

fn open_error(event: EventKind, system_wide: bool, e: io::Error) -> RecordError {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => RecordError::PerfDenied {
            paranoid: read_trimmed("/proc/sys/kernel/perf_event_paranoid"),
            needed: if system_wide { 0 } else { 1 },
            source: e,
        },
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            RecordError::EventUnavailable {
                event: event.name(),
                source: e,
            }
        }
        _ => RecordError::sys("perf_event_open", e),
    }
}
