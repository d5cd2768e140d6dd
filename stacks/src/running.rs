//! The stacks of running threads, taken where they run: a short burst of
//! `cpu-clock` samples of each thread (its kernel callchain, its user
//! registers and a copy of its user stack), of which the first is kept.
//! Nothing is stopped.
//!
//! Every thread gets its own event (pid = the thread, any CPU), so a
//! sample comes as soon as the thread has had [`PERIOD_NS`] of CPU; all
//! events of a batch are enabled together and waited for together, up to a
//! deadline, so a thread that waits for a CPU on a busy machine delays the
//! others by nothing. A sample's stack copy ends after 60 KiB; a stack that
//! goes deeper is completed from the thread's memory right after (frames
//! that far out do not change while the thread works below them).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use flamerec_perf::parse::{split, Layout, PerfRecord};
use flamerec_perf::sys::{
    self, disable, enable, perf_event_open, poll_readable, Counter, EventConfig, RingBuffer,
};
use flamerec_unwind::callchain::{self, Side};
use flamerec_unwind::UserRegs;

use crate::blocked::UserStack;
use crate::stackmem;
use flamerec_perf::procfs::Mappings;

/// Sampling period: one sample per 100 µs of the thread's CPU time.
pub(crate) const PERIOD_NS: u64 = 100_000;
/// User stack bytes copied per sample: a perf record must fit in 64 KiB.
const STACK_COPY: u32 = 60 * 1024;
/// Ring buffer size in bytes: room for one whole sample.
const RING_BYTES: usize = 64 * 1024;

/// One running thread's sample.
#[derive(Debug)]
pub(crate) struct Sampled {
    /// Kernel addresses, leaf first; callers already moved back into the call.
    pub kernel: Vec<u64>,
    /// The user stack (`None` for a kernel thread, or a sample of a thread
    /// with no user context).
    pub user: Option<UserStack>,
    /// Nanoseconds from enabling the event to the sample.
    pub after_ns: u64,
}

/// What sampling one thread gave.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A sample.
    Sampled(Sampled),
    /// The thread no longer exists.
    Gone,
    /// No sample came before the deadline.
    NoSample,
    /// The event could not be opened (denied, or another error).
    Failed(io::Error),
}

/// What perf allows here, learned from the first refusal.
#[derive(Debug, Default)]
pub(crate) struct PerfAccess {
    /// Kernel sampling was refused: events are opened user-only.
    pub kernel_refused: bool,
    /// perf_event_open is refused altogether.
    pub refused: Option<String>,
}

/// Samples every thread of `tids` (of process `pid`) once, waiting at most
/// `wait` for all of them. Returns one outcome per thread, in order.
pub(crate) fn sample(
    pid: u32,
    tids: &[u32],
    wait: Duration,
    maps: &mut Mappings,
    access: &mut PerfAccess,
) -> Vec<Outcome> {
    let batch = if sys::is_root() { 64 } else { 4 };
    let mut out = Vec::with_capacity(tids.len());
    for chunk in tids.chunks(batch) {
        out.extend(sample_batch(pid, chunk, wait, maps, access));
    }
    out
}

struct Armed {
    fd: OwnedFd,
    ring: RingBuffer,
    enabled: Instant,
}

fn config(kernel: bool) -> EventConfig {
    let cfg = EventConfig::thread_stack(Counter::CpuClock, PERIOD_NS, STACK_COPY, kernel);
    EventConfig {
        // The leaf's address, also where the user stack cannot be unwound.
        sample_type: cfg.sample_type | sys::sample::IP,
        ..cfg
    }
}

fn is_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// Opens a thread's event, falling back to user-only sampling once kernel
/// sampling is refused.
fn open(tid: u32, access: &mut PerfAccess) -> io::Result<OwnedFd> {
    if !access.kernel_refused {
        match perf_event_open(&config(true), tid as i32, -1) {
            Err(e) if is_refusal(&e) => access.kernel_refused = true,
            other => return other,
        }
    }
    perf_event_open(&config(false), tid as i32, -1)
}

fn arm(tid: u32, access: &mut PerfAccess) -> Result<Armed, Outcome> {
    if let Some(why) = &access.refused {
        return Err(Outcome::Failed(io::Error::other(why.clone())));
    }
    let fd = match open(tid, access) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(Outcome::Gone),
        Err(e) => {
            if is_refusal(&e) {
                access.refused = Some(e.to_string());
            }
            return Err(Outcome::Failed(e));
        }
    };
    let pages = RING_BYTES.div_ceil(sys::page_size()).next_power_of_two();
    let ring = RingBuffer::map(&fd, pages).map_err(Outcome::Failed)?;
    enable(&fd).map_err(Outcome::Failed)?;
    Ok(Armed {
        fd,
        ring,
        enabled: Instant::now(),
    })
}

fn sample_batch(
    pid: u32,
    tids: &[u32],
    wait: Duration,
    maps: &mut Mappings,
    access: &mut PerfAccess,
) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(tids.len());
    let mut armed: Vec<Option<Armed>> = Vec::with_capacity(tids.len());
    for &tid in tids {
        match arm(tid, access) {
            Ok(a) => {
                armed.push(Some(a));
                outcomes.push(None);
            }
            Err(o) => {
                armed.push(None);
                outcomes.push(Some(o));
            }
        }
    }
    let layout = Layout {
        sample_type: config(true).sample_type,
        regs_user: config(true).sample_regs_user,
    };
    let deadline = Instant::now() + wait;
    let mut buf = Vec::new();
    loop {
        for (i, slot) in armed.iter_mut().enumerate() {
            let Some(a) = slot else { continue };
            buf.clear();
            a.ring.drain(&mut buf);
            if let Some(s) = first_sample(&layout, &buf, tids[i]) {
                let _ = disable(&a.fd);
                let user = s.user.map(|(regs, mut bytes)| {
                    // The copy may have cut the stack (the kernel also
                    // shortens it to fit the record): read the rest now.
                    // Where that is refused, the sample's copy stands alone.
                    let _ = stackmem::copy(pid, regs.sp, maps, &mut bytes);
                    UserStack::with_regs(regs, bytes)
                });
                outcomes[i] = Some(Outcome::Sampled(Sampled {
                    kernel: s.kernel,
                    user,
                    after_ns: a.enabled.elapsed().as_nanos() as u64,
                }));
                *slot = None;
            }
        }
        let now = Instant::now();
        let waiting: Vec<_> = armed.iter().flatten().map(|a| a.fd.as_fd()).collect();
        if waiting.is_empty() || now >= deadline {
            break;
        }
        let left_ms = (deadline - now).as_millis().clamp(1, i32::MAX as u128) as i32;
        if let Err(e) = poll_readable(&waiting, left_ms) {
            for (i, slot) in armed.iter_mut().enumerate() {
                if slot.take().is_some() {
                    outcomes[i] = Some(Outcome::Failed(io::Error::new(e.kind(), e.to_string())));
                }
            }
            break;
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Outcome::NoSample))
        .collect()
}

/// The parts of a sample this module keeps.
struct FirstSample {
    kernel: Vec<u64>,
    user: Option<(UserRegs, Vec<u8>)>,
}

/// The first sample of `tid` among the records in `buf`.
fn first_sample(layout: &Layout, buf: &[u8], tid: u32) -> Option<FirstSample> {
    let mut malformed = 0;
    split(buf, &mut malformed)
        .into_iter()
        .find_map(|(ty, misc, body)| {
            let PerfRecord::Sample(s) = layout.decode(ty, misc, body)? else {
                return None;
            };
            if s.tid != tid {
                return None;
            }
            let kernel = callchain::frames(s.callchain(), None)
                .filter(|&(side, _)| side == Side::Kernel)
                .map(|(_, addr)| addr)
                .collect();
            let user = s.user_regs.and_then(|[bp, sp, ip]| {
                // A kernel thread's sample has no user context.
                (sp != 0 && ip != 0).then(|| {
                    (
                        UserRegs {
                            ip,
                            sp,
                            bp,
                            bx: None,
                        },
                        s.user_stack.to_vec(),
                    )
                })
            });
            Some(FirstSample { kernel, user })
        })
}
