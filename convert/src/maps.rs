//! Each process's mappings, so a user address becomes (module, file offset)
//! when it is converted and the recording folds without any process state.
//!
//! Records may come late: the recorder's ring readers hand over each CPU's
//! records on their own, and a reader kept from every CPU for a while hands
//! over an exec, mmap or fork after newer records of the same process from
//! other CPUs were applied. Applied then as if new, an exec that came
//! before the program's own mappings would erase them, and every later
//! sample would lose its names. So each process keeps when its state last
//! changed, and a record older than that changes only what it still can:
//! a late exec erases nothing, a mapping older than the process's last
//! exec is of an image already replaced, and a late fork does not overwrite
//! what the child did since.

use std::collections::{BTreeMap, HashMap, VecDeque};

use flamerec_format::{Frame, ModuleId, ModuleKind};

#[derive(Debug, Clone, Copy)]
struct Map {
    end: u64,
    pgoff: u64,
    module: ModuleId,
    kind: ModuleKind,
}

/// When a process's state last changed (ns, the records' clock).
#[derive(Debug, Default, Clone, Copy)]
struct Changed {
    /// Its last exec.
    exec: u64,
    /// Its last exec, fork or mapping.
    any: u64,
}

/// How long an exited process's mappings stay (ns, the records' clock):
/// a sample taken before the exit is converted after it when its ring is
/// read late, or when it waits for a later part (a live read of a deeper
/// stack, a deferred callchain) — milliseconds to seconds. Past this they
/// go, so a system-wide recording does not keep the mappings of every
/// process it saw end (the agent beside 1,000 short processes a minute
/// held 11 MB of them by the end of its ten-minute recordings).
pub const EXITED_LINGER_NS: u64 = 30_000_000_000;

/// Executable mappings per process.
#[derive(Debug, Default)]
pub struct Processes {
    maps: HashMap<u32, BTreeMap<u64, Map>>,
    changed: HashMap<u32, Changed>,
    /// Processes that exited (time, pid), oldest first, and the latest
    /// exit time seen.
    exited: VecDeque<(u64, u32)>,
    latest_exit: u64,
}

impl Processes {
    /// Whether a record of `pid` at `time` is older than one already
    /// applied to it.
    pub fn is_late(&self, pid: u32, time: u64) -> bool {
        self.changed.get(&pid).is_some_and(|c| time < c.any)
    }

    fn touch(&mut self, pid: u32, time: u64, exec: bool) {
        let c = self.changed.entry(pid).or_default();
        c.any = c.any.max(time);
        if exec {
            c.exec = c.exec.max(time);
        }
    }

    /// Adds a mapping made at `time`, replacing whatever it overlaps;
    /// returns false, changing nothing, when the process has called exec
    /// since (the record came late).
    #[allow(clippy::too_many_arguments)]
    pub fn map(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        module: ModuleId,
        kind: ModuleKind,
        time: u64,
    ) -> bool {
        let end = start.saturating_add(len);
        if end == start {
            return false;
        }
        if self.changed.get(&pid).is_some_and(|c| time < c.exec) {
            return false;
        }
        self.touch(pid, time, false);
        let maps = self.maps.entry(pid).or_default();
        let overlapping: Vec<u64> = maps
            .range(..end)
            .rev()
            .take_while(|(_, m)| m.end > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            if let Some(old) = maps.remove(&s) {
                // Keep the parts of the old mapping outside the new one.
                if s < start {
                    maps.insert(s, Map { end: start, ..old });
                }
                if old.end > end {
                    let pgoff = old.pgoff.wrapping_add(end - s);
                    maps.insert(end, Map { pgoff, ..old });
                }
            }
        }
        maps.insert(
            start,
            Map {
                end,
                pgoff,
                module,
                kind,
            },
        );
        true
    }

    /// exec at `time` replaced the address space; returns false, changing
    /// nothing, when newer records of the process were applied already
    /// (they describe the new image, or a later one).
    pub fn exec(&mut self, pid: u32, time: u64) -> bool {
        if self.is_late(pid, time) {
            return false;
        }
        self.maps.remove(&pid);
        self.touch(pid, time, true);
        true
    }

    /// A new process, forked at `time`, starts with a copy of its parent's
    /// mappings; returns false, changing nothing, for a thread (`parent ==
    /// child`) or when newer records of the child were applied already.
    pub fn fork(&mut self, parent: u32, child: u32, time: u64) -> bool {
        if parent == child || self.is_late(child, time) {
            return false;
        }
        match self.maps.get(&parent).cloned() {
            Some(m) => self.maps.insert(child, m),
            None => self.maps.remove(&child),
        };
        // The child's image is its parent's, exec'd no later than the fork.
        self.changed.insert(
            child,
            Changed {
                exec: time,
                any: time,
            },
        );
        true
    }

    /// Process `pid` exited at `time`: its mappings go [`EXITED_LINGER_NS`]
    /// later (by the exits seen since), unless the pid was used again by
    /// then (a fork, exec or mapping after the exit keeps what it made).
    pub fn exit(&mut self, pid: u32, time: u64) {
        self.exited.push_back((time, pid));
        self.latest_exit = self.latest_exit.max(time);
        while let Some(&(at, gone)) = self.exited.front() {
            if at.saturating_add(EXITED_LINGER_NS) > self.latest_exit {
                break;
            }
            self.exited.pop_front();
            if self.changed.get(&gone).is_none_or(|c| c.any <= at) {
                self.maps.remove(&gone);
                self.changed.remove(&gone);
            }
        }
    }

    /// Resolves a user address of `pid`; `None` when no mapping holds it.
    pub fn resolve(&self, pid: u32, addr: u64) -> Option<Frame> {
        let maps = self.maps.get(&pid)?;
        let (&start, m) = maps.range(..=addr).next_back()?;
        if addr >= m.end {
            return None;
        }
        let address = match m.kind {
            // A perf.data file may hold any offset: one that overflows
            // resolves to nothing rather than to a wrong frame.
            ModuleKind::File => (addr - start).checked_add(m.pgoff)?,
            ModuleKind::Vdso => addr - start,
            _ => addr,
        };
        Some(Frame {
            module: m.module,
            address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_file_offsets_and_handles_overlaps() {
        let mut p = Processes::default();
        p.map(1, 0x1000, 0x3000, 0x100, 7, ModuleKind::File, 1);
        assert_eq!(p.resolve(1, 0x1010).unwrap().address, 0x110);
        assert!(p.resolve(1, 0x4000).is_none());
        // A new mapping in the middle splits the old one.
        p.map(1, 0x2000, 0x1000, 0, 8, ModuleKind::Anonymous, 2);
        assert_eq!(p.resolve(1, 0x2010).unwrap().module, 8);
        assert_eq!(p.resolve(1, 0x2010).unwrap().address, 0x2010);
        let tail = p.resolve(1, 0x3010).unwrap();
        assert_eq!((tail.module, tail.address), (7, 0x2110));
        assert!(p.fork(1, 2, 3));
        assert!(p.resolve(2, 0x1010).is_some());
        assert!(p.exec(2, 4));
        assert!(p.resolve(2, 0x1010).is_none());
        assert!(p.resolve(1, 0x1010).is_some());
        // Empty mappings are ignored; an offset past u64 resolves to nothing.
        assert!(!p.map(3, 0x1000, 0, 0, 7, ModuleKind::File, 5));
        assert!(p.resolve(3, 0x1000).is_none());
        p.map(3, 0x1000, 0x1000, u64::MAX, 7, ModuleKind::File, 6);
        assert!(p.resolve(3, 0x1010).is_none());
    }

    /// What a ring read late delivers: `taskset -c 1 prog` exec'd taskset
    /// on CPU 0 (time 10, its binary mapped at 11) and prog on CPU 1 (time
    /// 20, mapped at 21), and CPU 0's records arrive after CPU 1's.
    #[test]
    fn records_that_come_late_do_not_undo_newer_ones() {
        let mut p = Processes::default();
        assert!(p.exec(1, 20));
        assert!(p.map(1, 0x5000, 0x1000, 0, 9, ModuleKind::File, 21));
        assert!(!p.is_late(1, 21));
        assert!(p.is_late(1, 10));
        assert!(!p.exec(1, 10), "a late exec erases nothing");
        assert!(!p.map(1, 0x7000, 0x1000, 0, 8, ModuleKind::File, 11));
        assert_eq!(p.resolve(1, 0x5010).unwrap().module, 9);
        assert!(
            p.resolve(1, 0x7010).is_none(),
            "the replaced image's mapping"
        );
        // A fork applied after the child's own exec leaves the child alone;
        // in order, it gives the child its parent's mappings, and a
        // reused pid loses the mappings of the process that had it before.
        assert!(p.exec(2, 30));
        assert!(p.map(2, 0x9000, 0x1000, 0, 7, ModuleKind::File, 31));
        assert!(!p.fork(1, 2, 25));
        assert_eq!(p.resolve(2, 0x9010).unwrap().module, 7);
        assert!(p.fork(1, 2, 40));
        assert!(p.resolve(2, 0x9010).is_none());
        assert_eq!(p.resolve(2, 0x5010).unwrap().module, 9);
        assert!(!p.map(2, 0x9000, 0x1000, 0, 7, ModuleKind::File, 35));
        // Threads share their process's mappings: a clone changes nothing.
        assert!(!p.fork(1, 1, 50));
    }

    /// An exited process's mappings resolve for a while after its exit (late
    /// samples), then go; a pid used again meanwhile keeps its new mappings.
    #[test]
    fn exited_processes_mappings_go_after_a_while() {
        let mut p = Processes::default();
        let s = 1_000_000_000;
        p.map(1, 0x1000, 0x1000, 0, 7, ModuleKind::File, s);
        p.map(2, 0x1000, 0x1000, 0, 8, ModuleKind::File, s);
        p.exit(1, 2 * s);
        p.exit(2, 2 * s);
        assert!(p.resolve(1, 0x1010).is_some(), "a late sample of 1");
        // Pid 2 is used again: forked from 1 before 1's mappings go.
        assert!(p.fork(1, 2, 3 * s));
        p.exit(3, 2 * s + EXITED_LINGER_NS - 1);
        assert!(p.resolve(1, 0x1010).is_some(), "not yet");
        p.exit(4, 2 * s + EXITED_LINGER_NS);
        assert!(p.resolve(1, 0x1010).is_none(), "1 is gone");
        assert_eq!(p.resolve(2, 0x1010).map(|f| f.module), Some(7), "2 again");
        assert_eq!((p.maps.len(), p.changed.len()), (1, 1));
    }
}
