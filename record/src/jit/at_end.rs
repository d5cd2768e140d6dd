//! Names given at the end to frames no file named when they were sampled:
//! a runtime's files may lag its code (V8 buffers its jitdump records;
//! node writes the last ones at exit), so a frame left in `[anon]` is
//! named once the files are read whole, where that leaves no doubt.

use super::JitNames;

/// The most addresses whose sampled times are kept for the end.
const MAX_SPANS: usize = 1 << 16;

impl JitNames {
    /// A frame at `addr` of `pid` sampled at `time` that no file named then.
    pub(super) fn sampled_unnamed(&mut self, pid: u32, addr: u64, time: u64) {
        if self.spans.len() >= MAX_SPANS && !self.spans.contains_key(&addr) {
            return;
        }
        let spans = self.spans.entry(addr).or_default();
        match spans.iter_mut().find(|(p, _, _)| *p == pid) {
            Some((_, first, last)) => {
                *first = (*first).min(time);
                *last = (*last).max(time);
            }
            None => spans.push((pid, time, time)),
        }
    }

    /// The name of a frame left in `[anon]`: the jitdump load in force at
    /// every time it was sampled, in every process that sampled it (the
    /// dumps' records carry the code's own time, so the load in force is
    /// known once read); else what [`JitNames::name_untimed`] allows.
    pub(super) fn name_at_end(&self, addr: u64) -> Option<&str> {
        self.name_by_time(addr).or_else(|| self.name_untimed(addr))
    }

    /// The one load in force at `addr` over the first to the last time
    /// each process sampled it: in force at the first, and no other load
    /// covering `addr` since, until the last.
    fn name_by_time(&self, addr: u64) -> Option<&str> {
        let spans = self.spans.get(&addr)?;
        let mut name: Option<&str> = None;
        for &(pid, first, last) in spans {
            let s = self.procs.get(&pid)?;
            let (dump, load) = s
                .dumps
                .iter()
                .rev()
                .find_map(|(d, _)| d.lookup(addr, first).map(|l| (d, l)))?;
            let replaced = s
                .dumps
                .iter()
                .flat_map(|(d, _)| d.loads_covering(addr))
                .any(|o| o.time > load.time && o.time <= last);
            if replaced || dump.lookup(addr, last).map(|l| l.name.as_str()) != Some(&load.name) {
                return None;
            }
            match name {
                Some(n) if n != load.name => return None,
                _ => name = Some(&load.name),
            }
        }
        name
    }

    /// The name of a frame left in `[anon]` (its code was not in its
    /// runtime's file yet when sampled: node writes the last records of
    /// both files at exit), which carries neither process nor time: the
    /// one name every load and line that ever covered the address gives,
    /// in every followed process; else the one every line first read at
    /// the end gives (what no earlier line covered, as for timed frames).
    /// Addresses that held code of several names stay unnamed.
    pub(super) fn name_untimed(&self, addr: u64) -> Option<&str> {
        let ever = self.procs.values().flat_map(|s| {
            let dumps = s
                .dumps
                .iter()
                .flat_map(move |(d, _)| d.loads_covering(addr));
            let lines = s.map.entries_covering(addr);
            dumps
                .map(|l| l.name.as_str())
                .chain(lines.map(|e| e.name.as_str()))
        });
        if let Some(name) = one(ever) {
            return Some(name);
        }
        let at_end = self
            .procs
            .values()
            .flat_map(|s| s.map.at_end_covering(addr));
        one(at_end.map(|e| e.name.as_str()))
    }
}

/// The one distinct item, if there is exactly one.
fn one<'a>(mut names: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let first = names.next()?;
    names.all(|n| n == first).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{jitdump, with_map};
    use super::*;
    use flamerec_jit::JitDump;

    /// Code at one address loaded as `f` at 100 and as `g` at 500: a
    /// frame sampled only while `f` was in force is `f`, though the
    /// untimed rule sees two names; one sampled across the reload, or by
    /// processes that saw different loads, stays unnamed.
    #[test]
    fn a_frame_is_named_by_the_load_in_force_over_all_its_samples() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut names = JitNames::default();
        with_map(&mut names, dir.path(), 7, "");
        with_map(&mut names, dir.path(), 8, "");
        let loads = [(0x1000, 0x100, 100, "f"), (0x1000, 0x100, 500, "g")];
        for pid in [7, 8] {
            let path = dir.path().join(format!("jit-{pid}.dump"));
            std::fs::write(&path, jitdump(0, &loads)).expect("write");
            let s = names.procs.get_mut(&pid).expect("followed");
            s.dumps.push((JitDump::new(&path, s.rules), 0));
        }
        names.poll(1_000, None);
        assert_eq!(names.name_untimed(0x1010), None, "two names ever");
        names.sampled_unnamed(7, 0x1010, 300);
        names.sampled_unnamed(7, 0x1010, 200);
        assert_eq!(names.name_at_end(0x1010), Some("f"));
        names.sampled_unnamed(8, 0x1010, 450);
        assert_eq!(names.name_at_end(0x1010), Some("f"), "both saw f");
        names.sampled_unnamed(8, 0x1010, 600);
        assert_eq!(names.name_at_end(0x1010), None, "8 saw both");
        names.sampled_unnamed(7, 0x1020, 700);
        assert_eq!(names.name_at_end(0x1020), Some("g"));
        names.sampled_unnamed(7, 0x1030, 50);
        assert_eq!(names.name_at_end(0x1030), None, "before any load");
    }
}
