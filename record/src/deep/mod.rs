//! Whole stacks at any depth: the rest of a thread's stack, read from the
//! live process, for samples whose unwinding runs off the end of the copied
//! slice (compilers, interpreters, deep recursion).
//!
//! The kernel copies at most tens of KiB of user stack per sample. When a
//! sample needs more, its callers are read from a snapshot of the thread's
//! stack (`process_vm_readv`), but only where the frame the copy ends in —
//! from its stack pointer (and its callee's return-address slot just below)
//! to the end of the copy, call it B — is shown to have been active while
//! the snapshot was read. A frame's callers cannot change while it is
//! active, so the snapshot's memory above B is then the sample's.
//!
//! What shows it: the snapshot holds at B the frame the sample copied (its
//! callee's return-address slot equal, and most of its bytes: an active
//! frame changes its own locals), and some sample of the thread taken
//! *after* the snapshot was read (the sample itself, or a later one that
//! also covers B) holds it too, with its stack pointer below B. A frame
//! created after the snapshot could only match it by re-creating, at the
//! same call and the same place, mostly what was there before — which a
//! program does when it calls the same thing again from the same callers,
//! whose frames are then the same too.
//! Comparing with a snapshot read *after* the sample alone would not do:
//! memory below a thread's stack pointer keeps what returned frames left
//! there, so a frame that has returned looks just like an active one.
//! A blocked thread shows it more directly: the kernel says where its stack
//! pointer is (`/proc/PID/task/TID/syscall`).
//!
//! So a sample whose thread has a snapshot from before it (at most
//! [`MAX_EVIDENCE_AGE_NS`] before) that holds its frame is settled at once;
//! others wait (at most a few drain rounds) for the snapshot taken at the
//! end of the round and a later sample, and are written then. A thread's
//! stack is read again for such samples, or once its snapshot is half as
//! old as it may be; not while that snapshot shows its samples. A thread
//! that exits first, whose memory cannot be read, whose frame changed or
//! that was never sampled again leaves its waiting samples cut (their frames
//! from the copy only), counted by cause.
//!
//! Everything past the copy depends only on a frame's registers and the
//! memory above its stack pointer, so the outer frames unwound from such a
//! state are remembered per snapshot and carried to the next one where that
//! memory is unchanged: a long-lived deep stack is unwound once.

mod evidence;
mod snapshot;

use std::collections::{HashMap, HashSet};

use crate::raw::RawSample;
use flamerec_unwind::{Outcome, StackUnwinder, UserRegs};

use evidence::{same_frame, Evidence};
use snapshot::{Maps, Snapshot};

/// A waiting sample is cut after this many drain rounds without evidence.
const MAX_WAIT_ROUNDS: u64 = 3;
/// At most this many samples wait at once; past that, new ones are cut.
const MAX_PENDING: usize = 4096;
/// A snapshot shows the frames of samples taken at most this long after it
/// was read. While a thread's samples are shown by the snapshot it has, its
/// stack is read again only once that is half this old (on a cargo build,
/// 197 reads of ≈ 600 KiB became about 40, and `process_vm_readv` had been
/// 14% of the recorder's CPU); the bound keeps short the time in which a
/// frame could return and another, alike enough to pass [`same_frame`],
/// take its place under other callers.
const MAX_EVIDENCE_AGE_NS: u64 = 100_000_000;
/// A snapshot also reads this much below the lowest boundary its round's
/// samples needed, so the next round's deeper samples find their frame in it
/// — when a thread is sampled often enough for a next sample to come
/// within a snapshot's life (see [`LiveStacks::new`]).
const DEEPER_MARGIN: u64 = 256 << 10;
/// Below this rate a thread is sampled about once in a snapshot's life
/// ([`MAX_EVIDENCE_AGE_NS`]) or less: the margin would be read for nothing.
const MARGIN_FROM_HZ: u64 = 100;

/// Why stacks that needed the live thread stayed cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LiveStats {
    /// The frame the copy ended in had changed (it returned meanwhile).
    pub changed: u64,
    /// The thread or process was gone before it could be shown.
    pub gone: u64,
    /// Reading its memory was not allowed.
    pub denied: u64,
    /// No later sample of the thread showed the frame still active.
    pub unproven: u64,
}

/// One sample's user stack.
pub(crate) struct UserStack<'a> {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC ns.
    pub time: u64,
    pub regs: UserRegs,
    pub copy: &'a [u8],
}

impl UserStack<'_> {
    fn end(&self) -> u64 {
        self.regs.sp + self.copy.len() as u64
    }
}

/// A sample waiting to be shown whole, with what writing it needs.
pub(crate) struct Pending {
    pub regs: UserRegs,
    pub copy: Vec<u8>,
    /// The sample, but for the frames unwound from `copy`.
    pub raw: RawSample,
    /// Start of B, the part of the copy the evidence must match.
    pub boundary: u64,
    pub round: u64,
}

impl Pending {
    fn stack(&self) -> UserStack<'_> {
        UserStack {
            pid: self.raw.pid,
            tid: self.raw.tid,
            time: self.raw.time,
            regs: self.regs,
            copy: &self.copy,
        }
    }
}

/// A user stack, unwound.
pub(crate) struct Unwound {
    pub outcome: Outcome,
    /// It needed memory past its copy (and, when complete, got it).
    pub beyond: bool,
    /// Where its B starts when its thread's snapshot was shown to hold its
    /// callers: the thread was below that while the snapshot was read.
    pub shown_below: Option<u64>,
}

/// A waiting sample, now unwound for good.
pub(crate) struct Settled {
    pub sample: Pending,
    pub addrs: Vec<u64>,
    pub unwound: Unwound,
}

#[derive(Default)]
struct Thread {
    pid: u32,
    snap: Option<Snapshot>,
    pending: Vec<Pending>,
    /// The lowest boundary a sample of this round needed and the thread's
    /// snapshot did not show, for the next snapshot.
    low: Option<u64>,
}

/// Snapshot buffers kept for reuse: each up to 16 MiB.
const MAX_SPARE: usize = 4;

/// Live stacks of the recorded threads.
#[derive(Default)]
pub(crate) struct LiveStacks {
    round: u64,
    threads: HashMap<u32, Thread>,
    maps: Maps,
    waiting: usize,
    /// Processes whose memory could not be read.
    pub(crate) denied_pids: HashSet<u32>,
    pub(crate) stats: LiveStats,
    /// Buffers of replaced snapshots, reused by the next reads.
    spare: Vec<Vec<u8>>,
    /// Read below the lowest boundary needed ([`DEEPER_MARGIN`] or 0).
    margin: u64,
}

/// What a sample's unwinding decided about memory past its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Not needed (yet).
    None,
    /// Shown: read the thread's snapshot.
    Accepted,
    /// Not shown yet: wait for evidence (B starts here).
    Wait(u64),
    /// Cannot be shown.
    Refused,
}

impl LiveStacks {
    /// Live stacks for samples taken at `frequency_hz` (0: on events, such
    /// as each switch-out). At 19 Hz (an always-on recorder) a thread's
    /// next sample comes when its snapshot is about to expire, and each
    /// deep sample's read was a third margin.
    pub(crate) fn new(frequency_hz: u64) -> Self {
        let sparse = frequency_hz > 0 && frequency_hz < MARGIN_FROM_HZ;
        LiveStacks {
            margin: if sparse { 0 } else { DEEPER_MARGIN },
            ..LiveStacks::default()
        }
    }

    /// Unwinds `s`, past its copy where the thread's snapshot is shown to
    /// hold the sample's callers. `Err(boundary)` when the sample must wait
    /// for evidence: then [`LiveStacks::wait`] it with that boundary.
    pub(crate) fn unwind(
        &mut self,
        u: &mut StackUnwinder,
        s: &UserStack<'_>,
        out: &mut Vec<u64>,
    ) -> Result<Unwound, u64> {
        let start = out.len();
        let mut ev = Evidence {
            live: self,
            s,
            settled: false,
            decision: Decision::None,
            boundary: None,
        };
        let outcome = u.unwind_beyond(s.pid, s.regs, s.copy, Some(&mut ev), out);
        let (decision, shown_below) = (ev.decision, ev.boundary);
        match decision {
            Decision::Wait(b) if self.waiting < MAX_PENDING => {
                out.truncate(start);
                Err(b)
            }
            Decision::Wait(_) => {
                self.stats.unproven += 1;
                Ok(Unwound {
                    outcome,
                    beyond: true,
                    shown_below: None,
                })
            }
            d => Ok(Unwound {
                outcome,
                beyond: d != Decision::None,
                shown_below: (d == Decision::Accepted).then_some(shown_below).flatten(),
            }),
        }
    }

    /// Keeps a sample [`LiveStacks::unwind`] could not settle yet; B starts
    /// at `boundary`.
    pub(crate) fn wait(&mut self, mut p: Pending, boundary: u64) {
        p.boundary = boundary;
        p.round = self.round;
        let t = self.threads.entry(p.raw.tid).or_default();
        t.pid = p.raw.pid;
        t.low = Some(t.low.map_or(p.boundary, |l| l.min(p.boundary)));
        t.pending.push(p);
        self.waiting += 1;
    }

    /// The waiting samples of `s`'s thread that `s` (a later sample, just
    /// unwound into `unwound`) settles: whole where it shows their frame
    /// active while the snapshot was read — it holds that frame itself, or
    /// it was shown to have been below it then — cut where it shows the
    /// frame gone.
    pub(crate) fn settle(
        &mut self,
        u: &mut StackUnwinder,
        s: &UserStack<'_>,
        unwound: Option<&Unwound>,
    ) -> Vec<Settled> {
        let below = unwound.and_then(|w| w.shown_below);
        let Some(t) = self.threads.get_mut(&s.tid) else {
            return Vec::new();
        };
        let Some(snap) = &t.snap else {
            return Vec::new();
        };
        if t.pending.is_empty() || (below.is_none() && s.time <= snap.read_until) {
            return Vec::new();
        }
        let mut verdicts = Vec::new();
        let mut keep = Vec::new();
        for p in std::mem::take(&mut t.pending) {
            if p.raw.time >= snap.read_from {
                keep.push(p);
                continue;
            }
            let b = p.boundary;
            let end = p.stack().end();
            let copied = p.copy.get((b - p.regs.sp) as usize..);
            let held = |snap: &Snapshot| match (copied, snap.slice(b, end)) {
                (Some(x), Some(z)) => same_frame(x, z),
                _ => false,
            };
            if below.is_some_and(|by| by <= b) {
                // This sample's frame, deeper than B or at it, was active
                // while the snapshot was read: so was whatever stood at B.
                let shown = held(snap);
                verdicts.push((p, shown));
            } else if s.regs.sp > b {
                // The thread is above B now: that frame has returned.
                verdicts.push((p, false));
            } else if s.end() >= end {
                let later = s
                    .copy
                    .get((b - s.regs.sp) as usize..(end - s.regs.sp) as usize);
                let shown = match (copied, later) {
                    (Some(x), Some(y)) => same_frame(x, y) && held(snap),
                    _ => false,
                };
                verdicts.push((p, shown));
            } else {
                // Deeper than B's reach: another sample may tell.
                keep.push(p);
            }
        }
        t.pending = keep;
        self.waiting -= verdicts.len();
        verdicts
            .into_iter()
            .map(|(p, shown)| {
                if !shown {
                    self.stats.changed += 1;
                }
                self.finish(u, p, shown)
            })
            .collect()
    }

    /// Unwinds a waiting sample for good: through the snapshot when shown,
    /// else from its copy alone.
    fn finish(&mut self, u: &mut StackUnwinder, p: Pending, shown: bool) -> Settled {
        let mut addrs = Vec::new();
        let outcome = if shown {
            let stack = p.stack();
            let mut ev = Evidence {
                live: self,
                s: &stack,
                settled: true,
                decision: Decision::None,
                boundary: None,
            };
            u.unwind_beyond(p.raw.pid, p.regs, &p.copy, Some(&mut ev), &mut addrs)
        } else {
            u.unwind(p.raw.pid, p.regs, &p.copy, &mut addrs)
        };
        Settled {
            sample: p,
            addrs,
            unwound: Unwound {
                outcome,
                beyond: true,
                shown_below: None,
            },
        }
    }

    /// Ends a drain round: reads the stacks of threads that needed memory
    /// past their copies (the next samples settle against these), and
    /// returns the samples that waited too long or can no longer be shown.
    pub(crate) fn end_round(&mut self, u: &mut StackUnwinder) -> Vec<Settled> {
        self.round += 1;
        let round = self.round;
        let mut cut: Vec<(Pending, bool)> = Vec::new();
        let tids: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.low.is_some() || !t.pending.is_empty())
            .map(|(&tid, _)| tid)
            .collect();
        for tid in tids {
            let Some(t) = self.threads.get_mut(&tid) else {
                continue;
            };
            let low = t.pending.iter().map(|p| p.boundary).chain(t.low).min();
            t.low = None;
            let (pid, expired): (u32, Vec<Pending>) = {
                let (old, young) = std::mem::take(&mut t.pending)
                    .into_iter()
                    .partition(|p| p.round + MAX_WAIT_ROUNDS <= round);
                t.pending = young;
                (t.pid, old)
            };
            self.stats.unproven += expired.len() as u64;
            cut.extend(expired.into_iter().map(|p| (p, false)));
            let Some(low) = low else { continue };
            let read = match self.maps.holding(pid, low, round) {
                Some((start, top)) => {
                    let buf = self.spare.pop().unwrap_or_default();
                    Snapshot::read(tid, low.saturating_sub(self.margin).max(start), top, buf)
                }
                None => Err(std::io::Error::from_raw_os_error(libc::ESRCH)),
            };
            let Some(t) = self.threads.get_mut(&tid) else {
                continue;
            };
            match read {
                Ok(mut fresh) => {
                    if let Some(old) = t.snap.take() {
                        let buf = fresh.inherit(old);
                        if self.spare.len() < MAX_SPARE {
                            self.spare.push(buf);
                        }
                    }
                    t.snap = Some(fresh);
                }
                Err(e) => {
                    let denied = matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES));
                    let n = t.pending.len() as u64;
                    if denied {
                        self.stats.denied += n;
                        self.denied_pids.insert(pid);
                    } else {
                        self.stats.gone += n;
                    }
                    cut.extend(
                        std::mem::take(&mut t.pending)
                            .into_iter()
                            .map(|p| (p, false)),
                    );
                }
            }
        }
        self.waiting -= cut.len();
        cut.into_iter()
            .map(|(p, shown)| self.finish(u, p, shown))
            .collect()
    }

    /// A thread exited: its waiting samples stay cut.
    pub(crate) fn exit(&mut self, u: &mut StackUnwinder, tid: u32) -> Vec<Settled> {
        let Some(t) = self.threads.remove(&tid) else {
            return Vec::new();
        };
        self.waiting -= t.pending.len();
        self.stats.gone += t.pending.len() as u64;
        t.pending
            .into_iter()
            .map(|p| self.finish(u, p, false))
            .collect()
    }

    /// `pid` exec'd or exited: its mappings and its threads' stacks are gone.
    pub(crate) fn forget_process(&mut self, u: &mut StackUnwinder, pid: u32) -> Vec<Settled> {
        self.maps.forget(pid);
        let tids: Vec<u32> = self
            .threads
            .iter()
            .filter(|(_, t)| t.pid == pid)
            .map(|(&tid, _)| tid)
            .collect();
        tids.into_iter().flat_map(|t| self.exit(u, t)).collect()
    }

    /// Recording ends: whatever still waits stays cut.
    pub(crate) fn finish_all(&mut self, u: &mut StackUnwinder) -> Vec<Settled> {
        let tids: Vec<u32> = self.threads.keys().copied().collect();
        tids.into_iter().flat_map(|t| self.exit(u, t)).collect()
    }
}

/// The warning about stacks left cut, when they are 1% or more of
/// `samples`: how many, and what would help — or that nothing would.
/// `copy_is_largest`: no larger `--stack-size` exists to advise; `java`:
/// a JVM's JIT code ran, whose frames keep frame pointers only when asked.
pub(crate) fn cut_warning(
    truncated: u64,
    live: &LiveStacks,
    samples: u64,
    copy_is_largest: bool,
    java: bool,
) -> Option<String> {
    if samples < 100 || truncated * 100 < samples {
        return None;
    }
    let pct = truncated as f64 * 100.0 / samples as f64;
    let l = live.stats;
    let mut causes = Vec::new();
    if l.denied > 0 {
        let mut pids: Vec<u32> = live.denied_pids.iter().copied().collect();
        pids.sort_unstable();
        pids.truncate(5);
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        causes.push(format!(
            "{} needed memory of processes flamerec may not read (pid {}): record as root, or as their owner with kernel.yama.ptrace_scope=0",
            l.denied,
            pids.join(", ")
        ));
    }
    if l.changed + l.unproven > 0 {
        let help = if copy_is_largest {
            "the copy is already as large as the kernel takes (--stack-size 61440)"
        } else {
            "a larger --stack-size ends the copy in longer-lived frames"
        };
        causes.push(format!(
            "{} could not be shown to be still in the frames their stack copy ended in when the rest was read (those frames returned quickly): {help}",
            l.changed + l.unproven
        ));
    }
    if l.gone > 0 {
        causes.push(format!(
            "{} belonged to threads that exited before the rest of their stack could be shown",
            l.gone
        ));
    }
    let other = truncated.saturating_sub(l.denied + l.changed + l.gone + l.unproven);
    if other > 0 {
        let help = if java {
            " (JIT code is unwound by frame pointers, which java keeps only with \
             -XX:+PreserveFramePointer)"
        } else {
            " (-g fp walks past such code where it keeps frame pointers)"
        };
        causes.push(format!(
            "{other} ran through code without usable unwind information{help}"
        ));
    }
    Some(format!(
        "{pct:.1}% of user stacks were cut short: {}",
        causes.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::{cut_warning, same_frame, LiveStacks};

    /// The flag that keeps Java's frame pointers is advised for a JVM's
    /// recording only: node's or a C program's cut stacks are not java's.
    #[test]
    fn the_cut_warning_names_javas_flag_only_where_a_jvm_ran() {
        let live = LiveStacks::new(999);
        let java = cut_warning(50, &live, 1000, false, true).expect("5% cut");
        assert!(java.contains("-XX:+PreserveFramePointer"), "{java}");
        let other = cut_warning(50, &live, 1000, false, false).expect("5% cut");
        assert!(!other.contains("java"), "{other}");
        assert!(other.ends_with("(-g fp walks past such code where it keeps frame pointers)"));
        assert!(
            cut_warning(5, &live, 1000, false, true).is_none(),
            "under 1%"
        );
    }

    #[test]
    fn a_frame_is_the_same_with_a_few_locals_changed_but_not_with_another_call() {
        let a: Vec<u8> = (0..256u32)
            .flat_map(|i| u64::from(i).to_le_bytes())
            .collect();
        let mut b = a.clone();
        assert!(same_frame(&a, &b));
        // A few locals changed: still the same activation.
        for w in [3usize, 40, 100, 200] {
            b[w * 8] ^= 0xff;
        }
        assert!(same_frame(&a, &b));
        // Another call site (the return-address slot): not the same.
        let mut c = a.clone();
        c[0] ^= 1;
        assert!(!same_frame(&a, &c));
        // Mostly other bytes: another frame.
        let d: Vec<u8> = a.iter().map(|x| x.wrapping_add(1)).collect();
        let mut d = d;
        d[..8].copy_from_slice(&a[..8]);
        assert!(!same_frame(&a, &d));
        // A small part must be equal whole.
        assert!(same_frame(&a[..64], &a[..64]));
        let mut e = a[..64].to_vec();
        e[40] ^= 1;
        assert!(!same_frame(&a[..64], &e));
        assert!(!same_frame(&a[..64], &a[..72]));
    }
}
