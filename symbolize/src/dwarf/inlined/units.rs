//! The CUs a lookup reads: built without their line programs, and found
//! by offset when a name points into another CU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use gimli::{
    AttributeValue, DebugAddrBase, DebugInfoOffset, DebugRngListsBase, DebugStrOffsetsBase,
    DwarfFileType, Unit, UnitHeader,
};

use super::R;

/// A CU ready to read entries from, built the way gimli's `Dwarf::unit`
/// builds it but without the line program (`.debug_line` is not read).
pub(super) fn make_unit<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    header: UnitHeader<R<'a>>,
) -> Option<Unit<R<'a>>> {
    let abbreviations = dwarf.abbreviations(&header).ok()?;
    let encoding = header.encoding();
    let mut unit = Unit {
        abbreviations,
        name: None,
        comp_dir: None,
        low_pc: 0,
        str_offsets_base: DebugStrOffsetsBase::default_for_encoding_and_file(
            encoding,
            DwarfFileType::Main,
        ),
        addr_base: DebugAddrBase(0),
        loclists_base: gimli::DebugLocListsBase::default_for_encoding_and_file(
            encoding,
            DwarfFileType::Main,
        ),
        rnglists_base: DebugRngListsBase::default_for_encoding_and_file(
            encoding,
            DwarfFileType::Main,
        ),
        line_program: None,
        dwo_id: None,
        header,
    };
    let mut low_pc = None;
    {
        let mut cursor = unit.header.entries(&unit.abbreviations);
        cursor.next_dfs().ok()?;
        let root = cursor.current()?;
        let mut attrs = root.attrs();
        while let Ok(Some(attr)) = attrs.next() {
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_low_pc, v) => low_pc = Some(v),
                (gimli::DW_AT_str_offsets_base, AttributeValue::DebugStrOffsetsBase(base)) => {
                    unit.str_offsets_base = base
                }
                (
                    gimli::DW_AT_addr_base | gimli::DW_AT_GNU_addr_base,
                    AttributeValue::DebugAddrBase(base),
                ) => unit.addr_base = base,
                (
                    gimli::DW_AT_rnglists_base | gimli::DW_AT_GNU_ranges_base,
                    AttributeValue::DebugRngListsBase(base),
                ) => unit.rnglists_base = base,
                _ => {}
            }
        }
    }
    if let Some(v) = low_pc {
        if let Ok(Some(addr)) = dwarf.attr_address(&unit, v) {
            unit.low_pc = addr;
        }
    }
    Some(unit)
}

/// The starts of the CUs in the inflated part of `.debug_info`, found when a
/// name first points into another CU, and the CUs built for such names (a
/// Rust CU's inlined calls name functions of a few other CUs, many times).
#[derive(Default)]
pub(super) struct UnitIndex<'a> {
    starts: OnceLock<Vec<u64>>,
    units: Mutex<HashMap<u64, Arc<Unit<R<'a>>>>>,
}

impl<'a> UnitIndex<'a> {
    /// The CU holding the entry at `offset`.
    pub(super) fn unit_of(
        &self,
        dwarf: &gimli::Dwarf<R<'a>>,
        offset: DebugInfoOffset,
    ) -> Option<Arc<Unit<R<'a>>>> {
        let starts = self.starts.get_or_init(|| {
            let mut v = Vec::new();
            let mut iter = dwarf.units();
            while let Ok(Some(h)) = iter.next() {
                if let Some(o) = h.offset().as_debug_info_offset() {
                    v.push(o.0 as u64);
                }
            }
            v
        });
        let at = starts.partition_point(|&s| s <= offset.0 as u64);
        let start = *starts.get(at.checked_sub(1)?)?;
        if let Some(u) = self.units.lock().ok()?.get(&start) {
            return Some(Arc::clone(u));
        }
        let header = dwarf
            .debug_info
            .header_from_offset(DebugInfoOffset(start as usize))
            .ok()?;
        let unit = Arc::new(make_unit(dwarf, header)?);
        self.units.lock().ok()?.insert(start, Arc::clone(&unit));
        Some(unit)
    }
}
