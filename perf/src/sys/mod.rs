//! Every system call of this crate that needs `unsafe`: `perf_event_open`
//! and its ioctls, the ring buffer mapping, `poll`, and the clock.
//!
//! Each item here is a safe wrapper; callers never see a raw pointer. The
//! rest of the crate is safe code that works on owned bytes.

mod remote;
mod ring;

pub use remote::{read_remote, read_remote_append, read_remote_words};
pub use ring::RingBuffer;

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use perf_event_open_sys as pes;
use pes::bindings as b;

/// `PERF_RECORD_MISC_MMAP_BUILD_ID`: an MMAP2 record carries a build id.
pub const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
/// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT`: the task was switched out while still runnable.
pub const MISC_SWITCH_OUT_PREEMPT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT as u16;
/// `PERF_RECORD_MISC_SWITCH_OUT`: a SWITCH record is a switch-out.
pub const MISC_SWITCH_OUT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT as u16;
/// `PERF_RECORD_MISC_COMM_EXEC`: a COMM record comes from an exec.
pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;
// The callchain markers live in flamerec_unwind::callchain, shared with the
// perf.data import; they must be the kernel's.
const _: () = {
    use flamerec_unwind::callchain as c;
    assert!(c::PERF_CONTEXT_MAX == b::PERF_CONTEXT_MAX);
    assert!(c::PERF_CONTEXT_KERNEL == b::PERF_CONTEXT_KERNEL);
    assert!(c::PERF_CONTEXT_USER == b::PERF_CONTEXT_USER);
};
/// `PERF_CONTEXT_USER_DEFERRED`: ends a sample's callchain whose user part
/// comes later, in a [`record_type::CALLCHAIN_DEFERRED`] record; the entry
/// after it is the cookie that names that record (Linux 6.19+).
pub const PERF_CONTEXT_USER_DEFERRED: u64 = b::PERF_CONTEXT_USER_DEFERRED;

/// Sample fields flamerec asks for.
pub mod sample {
    use super::b;
    /// Instruction pointer.
    pub const IP: u64 = b::PERF_SAMPLE_IP as u64;
    /// pid and tid.
    pub const TID: u64 = b::PERF_SAMPLE_TID as u64;
    /// Timestamp.
    pub const TIME: u64 = b::PERF_SAMPLE_TIME as u64;
    /// CPU number.
    pub const CPU: u64 = b::PERF_SAMPLE_CPU as u64;
    /// Period of the event at this sample.
    pub const PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
    /// Kernel (and user) callchain.
    pub const CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
    /// Raw tracepoint data.
    pub const RAW: u64 = b::PERF_SAMPLE_RAW as u64;
    /// User registers at the sample.
    pub const REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;
    /// A copy of the user stack.
    pub const STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;
}

/// Perf record types flamerec reads.
pub mod record_type {
    use super::b;
    /// Mapping (old format).
    pub const MMAP: u32 = b::PERF_RECORD_MMAP;
    /// Samples were lost.
    pub const LOST: u32 = b::PERF_RECORD_LOST;
    /// Thread name.
    pub const COMM: u32 = b::PERF_RECORD_COMM;
    /// Thread exit.
    pub const EXIT: u32 = b::PERF_RECORD_EXIT;
    /// Throttling started.
    pub const THROTTLE: u32 = b::PERF_RECORD_THROTTLE;
    /// Process or thread creation.
    pub const FORK: u32 = b::PERF_RECORD_FORK;
    /// A sample.
    pub const SAMPLE: u32 = b::PERF_RECORD_SAMPLE;
    /// Mapping with inode or build id.
    pub const MMAP2: u32 = b::PERF_RECORD_MMAP2;
    /// Samples lost by the sampling code itself.
    pub const LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES;
    /// A monitored task was switched in or out.
    pub const SWITCH: u32 = b::PERF_RECORD_SWITCH;
    /// A switch on a CPU of a CPU-wide event (`-a`, a cgroup): the same as
    /// `SWITCH` for the task in its trailer, plus the task on the other side.
    pub const SWITCH_CPU_WIDE: u32 = b::PERF_RECORD_SWITCH_CPU_WIDE;
    /// The user part of the callchains of the samples that share its cookie.
    pub const CALLCHAIN_DEFERRED: u32 = b::PERF_RECORD_CALLCHAIN_DEFERRED;
}

/// Which counter drives sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Software `cpu-clock`.
    CpuClock,
    /// Software `task-clock`.
    TaskClock,
    /// Hardware cycles.
    Cycles,
    /// Software context switches (one sample per switch-out).
    ContextSwitches,
}

/// A safe description of the perf_event_attr flamerec uses.
#[derive(Debug, Clone)]
pub struct EventConfig {
    /// The counter.
    pub counter: Counter,
    /// Samples per second (frequency mode); 0 samples every `period` events.
    pub frequency: u64,
    /// Without a frequency: one sample every this many events (nanoseconds
    /// for the clock counters); 0 counts as 1.
    pub period: u64,
    /// Also report every switch of a monitored task (PERF_RECORD_SWITCH).
    pub context_switch: bool,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// Do not sample kernel code.
    pub exclude_kernel: bool,
    /// Sampled tasks' children and threads are sampled too.
    pub inherit: bool,
    /// Start disabled and enable when the target calls exec.
    pub enable_on_exec: bool,
    /// Ask for MMAP2/COMM/FORK/EXIT side-band records.
    pub side_band: bool,
    /// Maximum callchain depth wanted (0 = kernel default).
    pub max_stack: u16,
    /// Wake a poller once this many bytes are in the buffer.
    pub wakeup_bytes: u32,
    /// Wake a poller after this many samples instead (0: by bytes).
    pub wakeup_events: u32,
    /// Leave user frames out of the callchain (they are unwound from a stack copy).
    pub exclude_callchain_user: bool,
    /// `PERF_REG_X86_*` bits of user registers to sample.
    pub sample_regs_user: u64,
    /// Bytes of user stack to copy per sample (0: none).
    pub sample_stack_user: u32,
    /// Defer the user part of callchains to the task's return to user space
    /// (`defer_callchain`), and, with `side_band`, receive the
    /// CALLCHAIN_DEFERRED records that carry it (`defer_output`).
    pub defer_user: bool,
    /// Keep the count of records the kernel could not write for the event
    /// (`PERF_FORMAT_LOST`, Linux 6.0+; older kernels refuse the open with
    /// EINVAL), read with [`lost_records`].
    pub count_lost: bool,
}

impl EventConfig {
    /// `counter` alone: a sample per event (or per nanosecond of a clock)
    /// holding its tid, nothing else recorded, a poller woken at every
    /// sample, no inheritance; what callers build on with `..`.
    pub fn bare(counter: Counter) -> Self {
        EventConfig {
            counter,
            frequency: 0,
            period: 1,
            context_switch: false,
            sample_type: sample::TID,
            exclude_kernel: false,
            inherit: false,
            enable_on_exec: false,
            side_band: false,
            max_stack: 0,
            wakeup_bytes: 0,
            wakeup_events: 1,
            exclude_callchain_user: false,
            sample_regs_user: 0,
            sample_stack_user: 0,
            defer_user: false,
            count_lost: false,
        }
    }

    /// One thread sampled every `period_ns` nanoseconds of `counter`: the
    /// kernel's callchain without user frames (none with `kernel` false),
    /// the user registers bp, sp and ip and `stack_bytes` of user stack to
    /// unwind, tid and time; a poller woken at every sample; no inheritance,
    /// no side band. What `flamerec stacks` and the stall library open per
    /// thread (each adds what it needs on top).
    pub fn thread_stack(counter: Counter, period_ns: u64, stack_bytes: u32, kernel: bool) -> Self {
        EventConfig {
            period: period_ns,
            sample_type: sample::TID
                | sample::TIME
                | sample::CALLCHAIN
                | sample::REGS_USER
                | sample::STACK_USER,
            exclude_kernel: !kernel,
            exclude_callchain_user: true,
            sample_regs_user: REGS_BP_SP_IP,
            sample_stack_user: stack_bytes,
            ..EventConfig::bare(counter)
        }
    }
}

/// The user registers flamerec samples for unwinding: bp, sp, ip (in this
/// order in the sample, as their bit numbers ascend).
pub const REGS_BP_SP_IP: u64 =
    (1 << b::PERF_REG_X86_BP) | (1 << b::PERF_REG_X86_SP) | (1 << b::PERF_REG_X86_IP);
/// [`REGS_BP_SP_IP`] and bx before them: the recorder's set, so frames that
/// keep their CFA in rbx (glibc's lazy-binding trampoline) unwind too.
pub const REGS_BX_BP_SP_IP: u64 = REGS_BP_SP_IP | (1 << b::PERF_REG_X86_BX);
/// Bit numbers of the registers above, as sampled.
pub mod reg {
    use super::b;
    /// rbx.
    pub const BX: u32 = b::PERF_REG_X86_BX;
    /// rbp.
    pub const BP: u32 = b::PERF_REG_X86_BP;
    /// rsp.
    pub const SP: u32 = b::PERF_REG_X86_SP;
    /// rip.
    pub const IP: u32 = b::PERF_REG_X86_IP;
}

fn attr_from(cfg: &EventConfig) -> b::perf_event_attr {
    let mut a = b::perf_event_attr {
        size: std::mem::size_of::<b::perf_event_attr>() as u32,
        ..Default::default()
    };
    let (ty, config) = match cfg.counter {
        Counter::CpuClock => (b::PERF_TYPE_SOFTWARE, b::PERF_COUNT_SW_CPU_CLOCK as u64),
        Counter::TaskClock => (b::PERF_TYPE_SOFTWARE, b::PERF_COUNT_SW_TASK_CLOCK as u64),
        Counter::Cycles => (b::PERF_TYPE_HARDWARE, b::PERF_COUNT_HW_CPU_CYCLES as u64),
        Counter::ContextSwitches => (
            b::PERF_TYPE_SOFTWARE,
            b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64,
        ),
    };
    a.type_ = ty;
    a.config = config;
    if cfg.frequency > 0 {
        a.__bindgen_anon_1.sample_freq = cfg.frequency;
        a.set_freq(1);
    } else {
        a.__bindgen_anon_1.sample_period = cfg.period.max(1);
    }
    a.set_context_switch(u64::from(cfg.context_switch));
    a.sample_type = cfg.sample_type;
    a.set_disabled(1);
    a.set_inherit(u64::from(cfg.inherit));
    a.set_enable_on_exec(u64::from(cfg.enable_on_exec));
    a.set_exclude_kernel(u64::from(cfg.exclude_kernel));
    a.set_exclude_hv(1);
    if cfg.side_band {
        a.set_mmap(1);
        a.set_mmap2(1);
        a.set_comm(1);
        a.set_comm_exec(1);
        a.set_task(1);
        a.set_build_id(1);
    }
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    if cfg.wakeup_events > 0 {
        a.__bindgen_anon_2.wakeup_events = cfg.wakeup_events;
    } else {
        a.set_watermark(1);
        a.__bindgen_anon_2.wakeup_watermark = cfg.wakeup_bytes;
    }
    a.sample_max_stack = cfg.max_stack;
    a.set_exclude_callchain_user(u64::from(cfg.exclude_callchain_user));
    a.sample_regs_user = cfg.sample_regs_user;
    a.sample_stack_user = cfg.sample_stack_user;
    if cfg.defer_user {
        a.set_defer_callchain(1);
        a.set_defer_output(u64::from(cfg.side_band));
    }
    if cfg.count_lost {
        a.read_format = u64::from(b::PERF_FORMAT_LOST);
    }
    a
}

/// How many records the kernel could not write for an event opened with
/// [`EventConfig::count_lost`] (its inherited copies' included), whether or
/// not a LOST record ever reported them: one the kernel owes is written
/// only once the ring has room again, which it may never have.
pub fn lost_records(fd: &OwnedFd) -> io::Result<u64> {
    // With read_format = PERF_FORMAT_LOST alone: the count, then lost.
    let mut values = [0u64; 2];
    // SAFETY: `values` is 16 writable bytes that live across the call, and
    // `fd` keeps the descriptor open.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            values.as_mut_ptr().cast::<libc::c_void>(),
            std::mem::size_of_val(&values),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != std::mem::size_of_val(&values) {
        return Err(io::Error::other(format!(
            "read {n} bytes of an event's count and lost records, not 16"
        )));
    }
    Ok(values[1])
}

/// Opens one perf event for `pid` (-1 = every task) on `cpu` (-1 = any).
pub fn perf_event_open(cfg: &EventConfig, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    let mut attr = attr_from(cfg);
    // SAFETY: `attr` is a fully initialized perf_event_attr whose `size`
    // field matches the struct we pass; the kernel only reads it (and may
    // write back `size` on E2BIG, which stays inside the struct).
    let fd = unsafe {
        pes::perf_event_open(
            &mut attr,
            pid,
            cpu,
            -1,
            b::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens a perf event counting the tasks of one cgroup (v2: the
/// directory `cgroup` is open on, and its descendants) on `cpu`, as
/// `perf record -G` does; cgroup events are per CPU.
pub fn perf_event_open_cgroup(
    cfg: &EventConfig,
    cgroup: &std::fs::File,
    cpu: i32,
) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    let mut attr = attr_from(cfg);
    let flags = b::PERF_FLAG_FD_CLOEXEC | b::PERF_FLAG_PID_CGROUP;
    // SAFETY: as in `perf_event_open`; with PERF_FLAG_PID_CGROUP the pid
    // argument is the descriptor of the cgroup's directory, which `cgroup`
    // keeps open for the call.
    let fd = unsafe {
        pes::perf_event_open(
            &mut attr,
            cgroup.as_raw_fd(),
            cpu,
            -1,
            flags as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd` as a new descriptor that nothing
    // else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Enables a perf event that was opened disabled.
pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: ENABLE takes an integer argument and only affects the event
    // behind this descriptor, which `fd` keeps open.
    let r = unsafe { pes::ioctls::ENABLE(fd.as_raw_fd(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends the records of `fd` to the ring buffer mapped for `target`
/// (events of one CPU then share one buffer).
pub fn set_output(fd: &OwnedFd, target: &OwnedFd) -> io::Result<()> {
    // SAFETY: SET_OUTPUT takes another perf event descriptor, which `target`
    // keeps open for the duration of the call.
    let r = unsafe { pes::ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs the BPF program `prog` (a `BPF_PROG_TYPE_PERF_EVENT` program's
/// descriptor) at each of `fd`'s samples; it decides whether the sample is
/// written.
pub fn set_bpf(fd: &OwnedFd, prog: &OwnedFd) -> io::Result<()> {
    // SAFETY: SET_BPF takes a BPF program descriptor, which `prog` keeps
    // open for the duration of the call (the kernel takes its own reference).
    let r = unsafe { pes::ioctls::SET_BPF(fd.as_raw_fd(), prog.as_raw_fd() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Disables a perf event (it stops producing samples).
pub fn disable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: as in `enable`.
    let r = unsafe { pes::ioctls::DISABLE(fd.as_raw_fd(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until one of `fds` is readable or `timeout_ms` passes.
pub fn poll_readable(fds: &[std::os::fd::BorrowedFd<'_>], timeout_ms: i32) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs that
    // lives across the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock samples are stamped with.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write to; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// This process's pid.
pub fn getpid() -> u32 {
    std::process::id()
}

/// Whether flamerec runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
