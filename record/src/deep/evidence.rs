//! What one sample may read past its copy: the frame the copy ends in
//! (B) decided shown or not by the thread's snapshot and its samples, and
//! the snapshot's memory above B read as the sample's.

use flamerec_unwind::{Beyond, FrameState, OuterFrames};

use super::snapshot::{blocked_at, Snapshot};
use super::{Decision, LiveStacks, UserStack, MAX_EVIDENCE_AGE_NS, MAX_SPARE};

/// What one sample may read past its copy, and whether it is shown.
pub(super) struct Evidence<'a, 's> {
    pub(super) live: &'a mut LiveStacks,
    pub(super) s: &'a UserStack<'s>,
    /// Already shown (a waiting sample being finished).
    pub(super) settled: bool,
    pub(super) decision: Decision,
    /// Where B starts, once decided.
    pub(super) boundary: Option<u64>,
}

impl Evidence<'_, '_> {
    fn snapshot(&self) -> Option<&Snapshot> {
        self.live.threads.get(&self.s.tid)?.snap.as_ref()
    }

    /// Whether the thread's snapshot holds the frame `copied` at `b`.
    fn snapshot_holds(&self, b: u64, copied: &[u8]) -> bool {
        self.snapshot()
            .and_then(|snap| snap.slice(b, self.s.end()))
            .is_some_and(|held| same_frame(copied, held))
    }

    fn decide(&mut self, frame_sp: u64) -> Decision {
        let s = self.s;
        let b = frame_sp.saturating_sub(8).max(s.regs.sp);
        self.boundary = Some(b);
        let Some(copied) = s.copy.get((b - s.regs.sp) as usize..) else {
            return Decision::Refused;
        };
        // A snapshot read before the sample, not long before, that holds
        // its frame.
        let age = self
            .snapshot()
            .filter(|snap| snap.read_until < s.time)
            .map(|snap| s.time - snap.read_from);
        let shown = age.is_some_and(|a| a <= MAX_EVIDENCE_AGE_NS) && self.snapshot_holds(b, copied);
        // Not shown by the snapshot the thread has, or by one past half its
        // time: the end of the round reads a new one, down to here (so the
        // thread's samples need not wait when the old one expires).
        let t = self.live.threads.entry(s.tid).or_default();
        t.pid = s.pid;
        if !shown || age.is_some_and(|a| a > MAX_EVIDENCE_AGE_NS / 2) {
            t.low = Some(t.low.map_or(b, |l| l.min(b)));
        }
        if shown {
            return Decision::Accepted;
        }
        // A thread blocked with its stack pointer below B: read it now.
        if let Some((sp, pc)) = blocked_at(s.pid, s.tid).filter(|&(sp, _)| sp <= b) {
            let round = self.live.round;
            let read = self.live.maps.holding(s.pid, b, round).map(|(_, top)| {
                let buf = self.live.spare.pop().unwrap_or_default();
                Snapshot::read(s.tid, b, top, buf)
            });
            match read {
                Some(Ok(mut fresh)) => {
                    let still = blocked_at(s.pid, s.tid) == Some((sp, pc));
                    let t = self.live.threads.entry(s.tid).or_default();
                    if let Some(old) = t.snap.take() {
                        let buf = fresh.inherit(old);
                        if self.live.spare.len() < MAX_SPARE {
                            self.live.spare.push(buf);
                        }
                    }
                    t.snap = Some(fresh);
                    if still && self.snapshot_holds(b, copied) {
                        return Decision::Accepted;
                    }
                }
                Some(Err(e)) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    self.live.stats.denied += 1;
                    self.live.denied_pids.insert(s.pid);
                    return Decision::Refused;
                }
                _ => {}
            }
        }
        Decision::Wait(b)
    }
}

impl Beyond for Evidence<'_, '_> {
    fn enter(&mut self, frame_sp: u64) -> bool {
        if self.settled {
            self.decision = Decision::Accepted;
            return true;
        }
        if self.decision == Decision::None {
            self.decision = self.decide(frame_sp);
        }
        self.decision == Decision::Accepted
    }

    fn read(&mut self, addr: u64) -> Option<u64> {
        if self.decision != Decision::Accepted {
            return None;
        }
        let b = self.snapshot()?.slice(addr, addr.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn recall(&mut self, state: FrameState) -> Option<OuterFrames> {
        if self.decision != Decision::Accepted {
            return None;
        }
        self.snapshot()?.memo.get(&state).cloned()
    }

    fn remember(&mut self, state: FrameState, outer: OuterFrames) {
        let tid = self.s.tid;
        if let Some(snap) = self
            .live
            .threads
            .get_mut(&tid)
            .and_then(|t| t.snap.as_mut())
        {
            if state.sp >= snap.base {
                snap.memo.insert(state, outer);
            }
        }
    }
}

/// Whether two copies of B (a callee's return-address slot, then the visible
/// part of the frame the copy ended in) show the same activation of that
/// frame: the return-address slot equal — the frame is at the same call —
/// and its bytes mostly equal. Only mostly: a frame that is still active
/// changes its own locals as it goes (rustc keeps its whole compiler state
/// in one), while another frame in its place, or the same one for another
/// caller, differs throughout. Small parts must be equal whole.
pub(super) fn same_frame(a: &[u8], b: &[u8]) -> bool {
    /// Words of the frame's part that may differ: one in four.
    const LOOSE_FROM: usize = 9;
    if a.len() != b.len() || a.len() < 8 || a[..8] != b[..8] {
        return false;
    }
    let words = a.len() / 8;
    if words < LOOSE_FROM {
        return a == b;
    }
    let equal = a
        .chunks_exact(8)
        .zip(b.chunks_exact(8))
        .filter(|(x, y)| x == y)
        .count();
    equal * 4 >= words * 3
}
