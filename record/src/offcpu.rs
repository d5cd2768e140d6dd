//! Off-CPU time: a sample taken at a thread's switch-out waits here until
//! the thread runs again, and is then weighed by the nanoseconds between.
//! Only blocked time counts: a thread switched out while still runnable
//! (preempted) was waiting for a CPU, and adds nothing.
//!
//! A CPU-wide event (`-a`, a cgroup) also samples the switch-outs that
//! follow a thread's exit record: its last, when it is dead and will never
//! run again, and on a busy machine preemptions on its way there. None is
//! a block; all are left out.

use std::collections::{HashMap, HashSet};

use flamerec_format::Sample;

use crate::ended::Ended;

/// How long after its exit record a thread's last switch-out is awaited
/// (record time). It follows the exit within microseconds; records of one
/// read round are in time order, and a round is far shorter than this.
const LAST_SWITCH_NS: u64 = 1_000_000_000;

/// Threads switched out, with their stack and when.
#[derive(Default)]
pub(crate) struct Blocked {
    /// Per thread: (pid, stack, switch-out time in ns).
    out: HashMap<u32, (u32, u32, u64)>,
    /// Threads whose last switch-out was a preemption.
    preempted: HashSet<u32>,
    /// Threads that exited, whose last switch-outs may still come: tid →
    /// exit time.
    dead: HashMap<u32, u64>,
    /// The same, oldest first, to forget them after [`LAST_SWITCH_NS`].
    dying: Ended<LAST_SWITCH_NS>,
}

impl Blocked {
    /// A switch-out sample of `tid` with its interned stack.
    pub(crate) fn switched_out(&mut self, pid: u32, tid: u32, stack: u32, time_ns: u64) {
        if self.dead.contains_key(&tid) {
            // After its exit: its last switch, or a preemption on the way
            // there (a loaded machine): it blocks on nothing any more.
            return;
        }
        self.out.insert(tid, (pid, stack, time_ns));
    }

    /// A SWITCH record of a switch-out: whether the thread was still runnable.
    pub(crate) fn switch_out_record(&mut self, tid: u32, preempted: bool) {
        if preempted {
            self.preempted.insert(tid);
        } else {
            self.preempted.remove(&tid);
        }
    }

    /// A thread is back on a CPU at `in_ns`: the sample of the interval it
    /// was blocked, if it was.
    pub(crate) fn switched_in(&mut self, pid: u32, tid: u32, in_ns: u64) -> Option<Sample> {
        // Removed first: a CPU-wide event reports switches of threads that
        // were never sampled (left out by a rule), which must not pile up.
        let preempted = self.preempted.remove(&tid);
        let (spid, stack, out_ns) = self.out.remove(&tid)?;
        if preempted {
            return None;
        }
        weighed(spid.max(pid), tid, stack, out_ns, in_ns)
    }

    /// A thread exited at `time_ns`: a thread that exits blocked counts
    /// nothing, nor does its last switch-out.
    pub(crate) fn exited(&mut self, tid: u32, time_ns: u64) {
        self.out.remove(&tid);
        self.preempted.remove(&tid);
        for (t, old) in self.dying.expired(time_ns) {
            if self.dead.get(&old) == Some(&t) {
                self.dead.remove(&old);
            }
        }
        self.dead.insert(tid, time_ns);
        self.dying.push(time_ns, tid);
    }

    /// A thread was created: its tid names a live thread again.
    pub(crate) fn born(&mut self, tid: u32) {
        self.dead.remove(&tid);
    }

    /// Recording stops at `end_ns`: threads still blocked count until then.
    pub(crate) fn finish(&mut self, end_ns: u64) -> Vec<Sample> {
        let preempted = std::mem::take(&mut self.preempted);
        let mut left: Vec<_> = self
            .out
            .drain()
            .filter(|(tid, _)| !preempted.contains(tid))
            .collect();
        left.sort_unstable_by_key(|&(tid, (_, _, out))| (out, tid));
        left.into_iter()
            .filter_map(|(tid, (pid, stack, out_ns))| weighed(pid, tid, stack, out_ns, end_ns))
            .collect()
    }
}

fn weighed(pid: u32, tid: u32, stack: u32, out_ns: u64, in_ns: u64) -> Option<Sample> {
    (in_ns > out_ns).then_some(Sample {
        time_ns: out_ns,
        pid,
        tid,
        stack,
        weight: in_ns - out_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(samples: &[Sample]) -> Vec<(u32, u64)> {
        samples.iter().map(|s| (s.tid, s.weight)).collect()
    }

    #[test]
    fn a_block_weighs_until_the_thread_runs_again() {
        let mut b = Blocked::default();
        b.switched_out(1, 2, 7, 100);
        b.switch_out_record(2, false);
        let s = b.switched_in(1, 2, 350).unwrap();
        assert_eq!((s.time_ns, s.stack, s.weight), (100, 7, 250));
        assert!(b.finish(1000).is_empty());
    }

    #[test]
    fn a_preemption_is_no_block() {
        let mut b = Blocked::default();
        b.switched_out(1, 2, 7, 100);
        b.switch_out_record(2, true);
        assert!(b.switched_in(1, 2, 350).is_none());
        // Switches of a thread never sampled leave nothing behind.
        b.switch_out_record(9, true);
        assert!(b.switched_in(1, 9, 400).is_none());
        assert!(b.preempted.is_empty());
    }

    #[test]
    fn the_switch_after_an_exit_is_no_block() {
        // As `-a` reports a sleep process's end: its exit record, then the
        // sample of its last switch-out; it never runs again.
        let mut b = Blocked::default();
        b.switched_out(5, 5, 1, 100);
        b.switched_in(5, 5, 200);
        b.exited(5, 300);
        // Preempted on its way out (a busy machine), then its last switch.
        b.switched_out(5, 5, 2, 301);
        b.switch_out_record(5, true);
        assert!(b.switched_in(5, 5, 320).is_none());
        b.switched_out(5, 5, 2, 330);
        b.switch_out_record(5, false);
        // Still blocked at the end: a thread that is alive.
        b.switched_out(6, 6, 3, 400);
        assert_eq!(weights(&b.finish(1000)), [(6, 600)]);
    }

    #[test]
    fn a_tid_used_again_is_a_live_thread() {
        let mut b = Blocked::default();
        b.exited(5, 300);
        b.born(5);
        b.switched_out(5, 5, 2, 400);
        assert_eq!(weights(&b.finish(1000)), [(5, 600)]);
        // Without a last switch (a per-task event has none), the exit is
        // forgotten a second later.
        b.exited(7, 1_000);
        b.exited(8, 1_000 + LAST_SWITCH_NS);
        assert!(!b.dead.contains_key(&7) && b.dead.contains_key(&8));
        assert_eq!(b.dying.len(), 1);
    }
}
