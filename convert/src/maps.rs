//! Each process's mappings, so a user address becomes (module, file offset)
//! when it is converted and the recording folds without any process state.

use std::collections::{BTreeMap, HashMap};

use flamerec_format::{Frame, ModuleId, ModuleKind};

#[derive(Debug, Clone, Copy)]
struct Map {
    end: u64,
    pgoff: u64,
    module: ModuleId,
    kind: ModuleKind,
}

/// Executable mappings per process.
#[derive(Debug, Default)]
pub struct Processes {
    maps: HashMap<u32, BTreeMap<u64, Map>>,
}

impl Processes {
    /// Adds a mapping, replacing whatever it overlaps.
    pub fn map(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        module: ModuleId,
        kind: ModuleKind,
    ) {
        let end = start.saturating_add(len);
        if end == start {
            return;
        }
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
    }

    /// exec replaced the address space.
    pub fn exec(&mut self, pid: u32) {
        self.maps.remove(&pid);
    }

    /// A new process starts with a copy of its parent's mappings.
    pub fn fork(&mut self, parent: u32, child: u32) {
        if parent == child {
            return;
        }
        if let Some(m) = self.maps.get(&parent).cloned() {
            self.maps.insert(child, m);
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
        p.map(1, 0x1000, 0x3000, 0x100, 7, ModuleKind::File);
        assert_eq!(p.resolve(1, 0x1010).unwrap().address, 0x110);
        assert!(p.resolve(1, 0x4000).is_none());
        // A new mapping in the middle splits the old one.
        p.map(1, 0x2000, 0x1000, 0, 8, ModuleKind::Anonymous);
        assert_eq!(p.resolve(1, 0x2010).unwrap().module, 8);
        assert_eq!(p.resolve(1, 0x2010).unwrap().address, 0x2010);
        let tail = p.resolve(1, 0x3010).unwrap();
        assert_eq!((tail.module, tail.address), (7, 0x2110));
        p.fork(1, 2);
        assert!(p.resolve(2, 0x1010).is_some());
        p.exec(2);
        assert!(p.resolve(2, 0x1010).is_none());
        assert!(p.resolve(1, 0x1010).is_some());
        // Empty mappings are ignored; an offset past u64 resolves to nothing.
        p.map(3, 0x1000, 0, 0, 7, ModuleKind::File);
        assert!(p.resolve(3, 0x1000).is_none());
        p.map(3, 0x1000, 0x1000, u64::MAX, 7, ModuleKind::File);
        assert!(p.resolve(3, 0x1010).is_none());
    }
}
