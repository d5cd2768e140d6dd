//! Off-CPU time: a sample taken at a thread's switch-out waits here until
//! the thread runs again, and is then weighed by the nanoseconds between.
//! Only blocked time counts: a thread switched out while still runnable
//! (preempted) was waiting for a CPU, and adds nothing.

use std::collections::{HashMap, HashSet};

use flamerec_format::Sample;

/// Threads switched out, with their stack and when.
#[derive(Default)]
pub(crate) struct Blocked {
    /// Per thread: (pid, stack, switch-out time in ns).
    out: HashMap<u32, (u32, u32, u64)>,
    /// Threads whose last switch-out was a preemption.
    preempted: HashSet<u32>,
}

impl Blocked {
    /// A switch-out sample of `tid` with its interned stack.
    pub(crate) fn switched_out(&mut self, pid: u32, tid: u32, stack: u32, time_ns: u64) {
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
        let (spid, stack, out_ns) = self.out.remove(&tid)?;
        if self.preempted.remove(&tid) {
            return None;
        }
        weighed(spid.max(pid), tid, stack, out_ns, in_ns)
    }

    /// A thread exited: a thread that exits blocked counts nothing.
    pub(crate) fn exited(&mut self, tid: u32) {
        self.out.remove(&tid);
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
