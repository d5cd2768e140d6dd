//! Address ranges that hold from a time on: which one covered an address
//! at a given time. JIT code is freed and its addresses reused, and neither
//! a perf map nor a jitdump says when code goes away; a later range over the
//! same addresses ends the earlier one from its own time on.
//!
//! Invariant: the ranges in force at any one time do not overlap. A range
//! ends every open range it overlaps, from its time; a range older than an
//! open one it overlaps (records come slightly out of order from several
//! threads) ends itself where the newer one starts.

use std::collections::BTreeMap;

/// One range: `start..end` in force over `from..until`, naming `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u64,
    pub end: u64,
    pub from: u64,
    pub until: u64,
    pub id: u32,
}

/// Ranges by start address, each start with its history.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    spans: Vec<Span>,
    /// Start address → indexes into `spans`.
    by_start: BTreeMap<u64, Vec<u32>>,
    /// The ranges not ended yet, by start; they do not overlap.
    open: BTreeMap<u64, u32>,
    /// The longest range: how far before an address a range holding it
    /// can start.
    max_len: u64,
}

impl Timeline {
    /// Adds `start..end` in force from `from`, naming `id`. Empty ranges
    /// and more than `u32::MAX` ranges are ignored (the caller bounds the
    /// input long before).
    pub fn insert(&mut self, start: u64, end: u64, from: u64, id: u32) {
        let Ok(index) = u32::try_from(self.spans.len()) else {
            return;
        };
        if end <= start {
            return;
        }
        let mut until = u64::MAX;
        // Open ranges overlapping this one: those starting before `end`
        // whose end lies past `start` (they do not overlap each other, so
        // the walk back stops at the first that ends before `start`).
        let overlapping: Vec<(u64, u32)> = self
            .open
            .range(..end)
            .rev()
            .take_while(|(_, &i)| self.spans[i as usize].end > start)
            .map(|(&s, &i)| (s, i))
            .collect();
        for (s, i) in overlapping {
            let older = &mut self.spans[i as usize];
            if older.from <= from {
                older.until = from;
                self.open.remove(&s);
            } else {
                until = until.min(older.from);
            }
        }
        self.spans.push(Span {
            start,
            end,
            from,
            until,
            id,
        });
        self.by_start.entry(start).or_default().push(index);
        if until == u64::MAX {
            self.open.insert(start, index);
        }
        self.max_len = self.max_len.max(end - start);
    }

    /// Ends the open range starting at `start` at `time` (code moved away).
    pub fn end(&mut self, start: u64, time: u64) {
        if let Some(&i) = self.open.get(&start) {
            let span = &mut self.spans[i as usize];
            if span.from <= time {
                span.until = time;
                self.open.remove(&start);
            }
        }
    }

    /// The range holding `addr` at `time`.
    pub fn lookup(&self, addr: u64, time: u64) -> Option<&Span> {
        let lowest = addr.saturating_sub(self.max_len);
        for (_, indexes) in self.by_start.range(lowest..=addr).rev() {
            let in_force = indexes
                .iter()
                .map(|&i| &self.spans[i as usize])
                .find(|s| s.from <= time && time < s.until);
            if let Some(s) = in_force {
                // Ranges in force at one time do not overlap: one that
                // starts before this one ends before it, so before `addr`.
                return (addr < s.end).then_some(s);
            }
        }
        None
    }

    /// Every range that ever held `addr`.
    pub fn covering(&self, addr: u64) -> impl Iterator<Item = &Span> {
        let lowest = addr.saturating_sub(self.max_len);
        self.by_start
            .range(lowest..=addr)
            .flat_map(|(_, indexes)| indexes.iter().map(|&i| &self.spans[i as usize]))
            .filter(move |s| addr < s.end)
    }

    /// The ranges still open (not replaced by a later one), by start.
    pub fn open(&self) -> impl Iterator<Item = &Span> {
        self.open.values().map(|&i| &self.spans[i as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_range_at_the_same_address_replaces_the_earlier_from_its_time() {
        let mut t = Timeline::default();
        t.insert(0x1000, 0x1100, 10, 1);
        t.insert(0x1000, 0x1100, 20, 2);
        t.insert(0x1000, 0x1100, 30, 1);
        assert_eq!(t.lookup(0x1050, 5).map(|s| s.id), None);
        assert_eq!(t.lookup(0x1050, 10).map(|s| s.id), Some(1));
        assert_eq!(t.lookup(0x1050, 19).map(|s| s.id), Some(1));
        assert_eq!(t.lookup(0x1050, 20).map(|s| s.id), Some(2));
        assert_eq!(t.lookup(0x1050, 29).map(|s| s.id), Some(2));
        assert_eq!(t.lookup(0x1050, 1000).map(|s| s.id), Some(1));
        assert_eq!(t.lookup(0x1100, 1000), None);
        assert_eq!(t.open().count(), 1);
    }

    #[test]
    fn a_range_overlapping_two_ends_both_and_leaves_its_neighbours() {
        let mut t = Timeline::default();
        t.insert(0x1000, 0x1100, 1, 1);
        t.insert(0x1100, 0x1200, 1, 2);
        t.insert(0x1200, 0x1300, 1, 3);
        t.insert(0x1080, 0x1180, 5, 4);
        assert_eq!(t.lookup(0x1010, 4).map(|s| s.id), Some(1));
        // Range 1 is gone from time 5, also where 4 does not cover it.
        assert_eq!(t.lookup(0x1010, 5).map(|s| s.id), None);
        assert_eq!(t.lookup(0x1090, 5).map(|s| s.id), Some(4));
        assert_eq!(t.lookup(0x1190, 5).map(|s| s.id), None);
        assert_eq!(t.lookup(0x1190, 4).map(|s| s.id), Some(2));
        assert_eq!(t.lookup(0x1250, 9).map(|s| s.id), Some(3));
        let ever: Vec<u32> = t.covering(0x1090).map(|s| s.id).collect();
        assert_eq!(ever, vec![1, 4]);
    }

    #[test]
    fn a_range_read_after_a_newer_one_ends_where_the_newer_starts() {
        let mut t = Timeline::default();
        t.insert(0x1000, 0x1100, 50, 2);
        t.insert(0x1000, 0x1100, 40, 1);
        assert_eq!(t.lookup(0x1000, 45).map(|s| s.id), Some(1));
        assert_eq!(t.lookup(0x1000, 50).map(|s| s.id), Some(2));
        assert_eq!(t.lookup(0x1000, 60).map(|s| s.id), Some(2));
    }
}
