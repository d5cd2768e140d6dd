//! Where each function of a compilation unit (CU) starts in `.debug_info`,
//! by address: what a later lookup in a unit already walked once needs to
//! go straight to the functions holding its addresses, instead of walking
//! the unit's every entry again (a Rust CU holds thousands of functions,
//! and the entries of those that hold no address are still read to be
//! skipped). Built by the walk at no extra pass, kept per build id in the
//! symbol cache (`cache::store`).

use std::collections::BTreeMap;

/// An address range and the CU (its `.debug_info` offset) holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Arange {
    pub begin: u64,
    pub end: u64,
    pub unit: u64,
}

/// One address range of an outermost function (a `DW_TAG_subprogram` not
/// inside another function) and where its entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FunctionRange {
    pub begin: u64,
    pub end: u64,
    /// The entry's offset in `.debug_info`.
    pub entry: u64,
}

/// What is known of one DWARF file's layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DieIndex {
    /// The uncompressed size of `.debug_info` it was built from: an index
    /// of other DWARF under the same build id is not used.
    pub info_len: u64,
    /// What each CU covers, when `.debug_aranges` does not say (read from
    /// every CU's root entry once).
    pub units: Option<Vec<Arange>>,
    /// Per CU walked whole, its functions' ranges, sorted.
    pub functions: BTreeMap<u64, Vec<FunctionRange>>,
    /// Something was added since it was loaded.
    pub changed: bool,
}

impl DieIndex {
    /// An empty index for DWARF whose `.debug_info` is `info_len` bytes.
    pub(crate) fn new(info_len: u64) -> Self {
        DieIndex {
            info_len,
            ..DieIndex::default()
        }
    }

    /// The entries of the unit's outermost functions holding any of
    /// `addrs` (sorted), in `.debug_info` order; `None` when the unit was
    /// never walked whole.
    pub(crate) fn entries_for(&self, unit: u64, addrs: &[u64]) -> Option<Vec<u64>> {
        let ranges = self.functions.get(&unit)?;
        let mut entries = Vec::new();
        for &a in addrs {
            let at = ranges.partition_point(|r| r.begin <= a);
            entries.extend(
                ranges[..at]
                    .iter()
                    .rev()
                    .take(super::OVERLAPPING)
                    .filter(|r| a < r.end)
                    .map(|r| r.entry),
            );
        }
        entries.sort_unstable();
        entries.dedup();
        Some(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_holding_addresses_come_in_entry_order() {
        let mut index = DieIndex::new(1000);
        let r = |begin, end, entry| FunctionRange { begin, end, entry };
        index.functions.insert(
            0,
            vec![
                r(0x100, 0x200, 90),
                r(0x180, 0x190, 40),
                r(0x300, 0x400, 10),
            ],
        );
        assert_eq!(
            index.entries_for(0, &[0x185, 0x350]),
            Some(vec![10, 40, 90])
        );
        assert_eq!(index.entries_for(0, &[0x250]), Some(vec![]));
        assert_eq!(index.entries_for(7, &[0x185]), None, "a unit never walked");
    }
}
