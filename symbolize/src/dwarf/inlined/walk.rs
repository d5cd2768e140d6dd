//! One CU's part of a lookup: its entries walked once for all its
//! addresses (or, once indexed, only the functions holding them), each
//! address's chain of functions named as DWARF names them.

use std::rc::Rc;

use gimli::{AttributeValue, DebugInfoOffset, DebuggingInformationEntry, Unit};
use rayon::prelude::*;
use symbolic_common::Language;

use super::units::{make_unit, UnitIndex};
use super::{Extent, MAX_DIE_DEPTH, MAX_INLINE_DEPTH, MAX_NAME_HOPS, MAX_RANGES, R};
use crate::dwarf::index::{DieIndex, FunctionRange};
use crate::types::RawName;

/// One CU's part of a lookup.
pub(super) struct UnitFrames {
    unit: u64,
    /// Per address (an index into the lookup's addresses), its functions.
    chains: Vec<(usize, Vec<RawName>)>,
    /// Its outermost functions' ranges, when it was walked whole.
    functions: Option<Vec<FunctionRange>>,
}

/// The chains of the addresses `idxs` (in address order) in the CU at
/// `unit_offset`: from the entries of the functions holding them when
/// `dies` knows where those are, else by a walk of the whole CU, which
/// notes them.
pub(super) fn unit_frames<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    index: &UnitIndex<'a>,
    dies: &DieIndex,
    unit_offset: u64,
    idxs: &[usize],
    addrs: &[u64],
) -> UnitFrames {
    let mut done = UnitFrames {
        unit: unit_offset,
        chains: Vec::new(),
        functions: None,
    };
    let Some(unit) = usize::try_from(unit_offset)
        .ok()
        .and_then(|o| dwarf.debug_info.header_from_offset(DebugInfoOffset(o)).ok())
        .and_then(|h| make_unit(dwarf, h))
    else {
        return done;
    };
    let local: Vec<u64> = idxs.iter().map(|&i| addrs[i]).collect();
    let mut chains: Vec<Vec<Option<RawName>>> = vec![Vec::new(); local.len()];
    let lang = {
        let mut cursor = unit.entries();
        match cursor.next_dfs() {
            Ok(Some(_)) => cursor.current().map(language),
            _ => None,
        }
    };
    let Some(lang) = lang else {
        return done;
    };
    let cx = UnitWalk {
        dwarf,
        index,
        unit: &unit,
        lang,
        addrs: &local,
    };
    match dies.entries_for(unit_offset, &local) {
        Some(entries) => cx.walk_functions(&entries, &mut chains),
        None => {
            let mut functions = Vec::new();
            cx.walk(&mut chains, &mut functions);
            functions.sort_unstable();
            done.functions = Some(functions);
        }
    }
    done.chains = chains
        .into_iter()
        .zip(idxs)
        .filter_map(|(chain, &i)| {
            let names: Vec<RawName> = chain.into_iter().flatten().collect();
            (!names.is_empty()).then_some((i, names))
        })
        .collect();
    done
}

/// One CU's walk for a set of addresses.
struct UnitWalk<'a, 'u> {
    dwarf: &'u gimli::Dwarf<R<'a>>,
    index: &'u UnitIndex<'a>,
    unit: &'u Unit<R<'a>>,
    lang: Language,
    /// The addresses, sorted.
    addrs: &'u [u64],
}

/// An entry with children the walk is inside.
struct Scope {
    /// The depth of its children.
    depth: isize,
    /// The addresses inside every function around its children (sorted).
    cands: Rc<[usize]>,
    /// How many functions those are.
    level: usize,
    /// For a function: the chains its name displaced, put back when their
    /// entry gave at least as deep a chain (see [`UnitWalk::walk`]).
    displaced: Option<Vec<(usize, Vec<Option<RawName>>)>>,
}

/// Where an entry's code is, from its attributes.
#[derive(Default)]
struct Pc<'a> {
    low: Option<AttributeValue<R<'a>>>,
    high: Option<AttributeValue<R<'a>>>,
    ranges: Option<AttributeValue<R<'a>>>,
}

impl Scope {
    /// The scope the walk starts in, at `depth`: every address, no
    /// function around it.
    fn outermost(depth: isize, addrs: usize) -> Scope {
        Scope {
            depth,
            cands: (0..addrs).collect(),
            level: 0,
            displaced: None,
        }
    }

    /// The scope of the children of an entry at `depth` that is not a
    /// function (a namespace, a lexical block): the same addresses, at the
    /// same level.
    fn around_children_of_other(&self, depth: isize) -> Scope {
        Scope {
            depth: depth + 1,
            cands: Rc::clone(&self.cands),
            level: self.level,
            displaced: None,
        }
    }
}

/// A function entry's address attributes, read from where `raw` stands
/// (its attributes, as `abbrev` lists them); `None` where one cannot be read.
fn read_pc<'a>(
    raw: &mut gimli::EntriesRaw<'_, '_, R<'a>>,
    abbrev: &gimli::Abbreviation,
) -> Option<Pc<'a>> {
    let mut pc = Pc::default();
    for &spec in abbrev.attributes() {
        let attr = raw.read_attribute(spec).ok()?;
        match attr.name() {
            gimli::DW_AT_low_pc => pc.low = Some(attr.value()),
            gimli::DW_AT_high_pc => pc.high = Some(attr.value()),
            gimli::DW_AT_ranges => pc.ranges = Some(attr.value()),
            _ => {}
        }
    }
    Some(pc)
}

impl<'a> UnitWalk<'a, '_> {
    /// Walks the CU's entries once, in order, parsing the attributes of
    /// functions (`DW_TAG_subprogram`, `DW_TAG_inlined_subroutine`) only and
    /// skipping the rest by their abbreviations' sizes; a function that holds
    /// none of the addresses is skipped whole, children included.
    ///
    /// When sibling entries cover the same address (aliases, or a bare
    /// duplicate of a function next to the entry holding its inlined calls),
    /// the one giving the longest chain wins, the first on a tie: every
    /// sibling is looked at, and an earlier claim is put back when it was
    /// at least as deep.
    ///
    /// Every outermost function's ranges and entry go to `functions`.
    fn walk(&self, chains: &mut [Vec<Option<RawName>>], functions: &mut Vec<FunctionRange>) {
        let Ok(mut raw) = self.unit.entries_raw(None) else {
            return;
        };
        // The root: its children are where the walk starts.
        match raw.read_abbreviation() {
            Ok(Some(root)) if root.has_children() => {
                if raw.skip_attributes(root.attributes()).is_err() {
                    return;
                }
            }
            _ => return,
        }
        self.walk_from(raw, chains, Extent::Unit(functions));
    }

    /// Walks only the entries of the outermost functions at `entries`
    /// (`.debug_info` offsets, in order) and their children: the whole
    /// walk's result for addresses those functions hold, as it would have
    /// met them, siblings in the same order.
    fn walk_functions(&self, entries: &[u64], chains: &mut [Vec<Option<RawName>>]) {
        for &entry in entries {
            let at = usize::try_from(entry)
                .ok()
                .and_then(|e| DebugInfoOffset(e).to_unit_offset(&self.unit.header));
            let Some(Ok(raw)) = at.map(|at| self.unit.entries_raw(Some(at))) else {
                continue;
            };
            self.walk_from(raw, chains, Extent::Function);
        }
    }

    /// The walk from where `raw` stands over `extent`.
    fn walk_from(
        &self,
        mut raw: gimli::EntriesRaw<'_, '_, R<'a>>,
        chains: &mut [Vec<Option<RawName>>],
        mut extent: Extent<'_>,
    ) {
        let one = matches!(extent, Extent::Function);
        let first_depth = raw.next_depth();
        let mut stack = vec![Scope::outermost(first_depth, self.addrs.len())];
        let mut first = true;
        // A function's address ranges (reused: every function has some).
        let mut ranges = Vec::new();
        // Entries deeper than this are skipped.
        let mut skip_below: Option<isize> = None;
        while !raw.is_empty() && !stack.is_empty() {
            let offset = raw.next_offset();
            let depth = raw.next_depth();
            if one && !first && depth <= first_depth {
                break;
            }
            first = false;
            let abbrev = match raw.read_abbreviation() {
                Ok(Some(a)) => a,
                Ok(None) => {
                    close_ended(&mut stack, chains, raw.next_depth());
                    continue;
                }
                Err(_) => break,
            };
            if let Some(d) = skip_below {
                if depth > d {
                    if raw.skip_attributes(abbrev.attributes()).is_err() {
                        break;
                    }
                    continue;
                }
                skip_below = None;
            }
            let Some(top) = stack.last() else { break };
            let is_function = matches!(
                abbrev.tag(),
                gimli::DW_TAG_subprogram | gimli::DW_TAG_inlined_subroutine
            );
            if !is_function {
                if raw.skip_attributes(abbrev.attributes()).is_err() {
                    break;
                }
                if abbrev.has_children() {
                    let scope = top.around_children_of_other(depth);
                    skip_below = open_or_skip(&mut stack, chains, scope, depth);
                }
                continue;
            }
            let Some(pc) = read_pc(&mut raw, abbrev) else {
                break;
            };
            let level = top.level;
            self.ranges(&pc, &mut ranges);
            if level == 0 {
                self.note_outermost(&mut extent, offset, &ranges);
            }
            let inside = self.covered(&ranges, &top.cands);
            if inside.is_empty() || level >= MAX_INLINE_DEPTH {
                if abbrev.has_children() {
                    skip_below = Some(depth);
                }
                continue;
            }
            let scope = self.enter_function(offset, depth, level, inside, chains);
            if abbrev.has_children() {
                skip_below = open_or_skip(&mut stack, chains, scope, depth);
            } else {
                put_back(chains, scope);
            }
        }
        // Damaged or cut short: close what is open, as its end would have.
        close_ended(&mut stack, chains, isize::MIN);
    }

    /// An outermost function's ranges and entry, for the index (when the
    /// walk covers the unit).
    fn note_outermost(
        &self,
        extent: &mut Extent<'_>,
        offset: gimli::UnitOffset,
        ranges: &[(u64, u64)],
    ) {
        if let (Extent::Unit(list), Some(entry)) =
            (extent, offset.to_debug_info_offset(&self.unit.header))
        {
            list.extend(ranges.iter().map(|&(begin, end)| FunctionRange {
                begin,
                end,
                entry: entry.0 as u64,
            }));
        }
    }

    /// A function entry (at `offset`, `depth`, inside `level` others)
    /// holding the addresses `inside`: its name goes on their chains at
    /// `level` (what was deeper there is displaced, to be put back if its
    /// entry gave as deep a chain); the scope of its children.
    fn enter_function(
        &self,
        offset: gimli::UnitOffset,
        depth: isize,
        level: usize,
        inside: Vec<usize>,
        chains: &mut [Vec<Option<RawName>>],
    ) -> Scope {
        let name = self
            .unit
            .entry(offset)
            .ok()
            .and_then(|entry| name_in(self.dwarf, self.index, self.unit, &entry, 0))
            .map(|n| RawName::new(n, self.lang));
        let mut displaced = Vec::new();
        for &i in &inside {
            if chains[i].len() > level {
                displaced.push((i, chains[i].split_off(level)));
            }
            chains[i].push(name.clone());
        }
        Scope {
            depth: depth + 1,
            cands: inside.into(),
            level: level + 1,
            displaced: Some(displaced),
        }
    }

    /// The candidates inside `ranges`.
    fn covered(&self, ranges: &[(u64, u64)], cands: &[usize]) -> Vec<usize> {
        let mut inside = Vec::new();
        for &(begin, end) in ranges {
            let from = cands.partition_point(|&i| self.addrs[i] < begin);
            for &i in &cands[from..] {
                if self.addrs[i] >= end {
                    break;
                }
                inside.push(i);
            }
        }
        inside.sort_unstable();
        inside.dedup();
        inside
    }

    /// The address ranges `pc` gives, into `out`; empty ones and those at
    /// 0 (code the linker dropped) left out.
    fn ranges(&self, pc: &Pc<'a>, out: &mut Vec<(u64, u64)>) {
        out.clear();
        let mut take = |begin: u64, end: u64| {
            if begin != 0 && begin < end {
                out.push((begin, end));
            }
        };
        if let Some(v) = &pc.ranges {
            if let Ok(Some(mut list)) = self.dwarf.attr_ranges(self.unit, *v) {
                let mut seen = 0;
                while let Ok(Some(r)) = list.next() {
                    seen += 1;
                    if seen > MAX_RANGES {
                        break;
                    }
                    take(r.begin, r.end);
                }
            }
        } else if let Some(low) = pc.low {
            let begin = self.dwarf.attr_address(self.unit, low).ok().flatten();
            let end = match (&pc.high, begin) {
                (Some(AttributeValue::Udata(size)), Some(b)) => b.checked_add(*size),
                (Some(v), _) => self.dwarf.attr_address(self.unit, *v).ok().flatten(),
                (None, _) => None,
            };
            if let (Some(b), Some(e)) = (begin, end) {
                take(b, e);
            }
        }
    }
}

/// Closes the scopes whose children's depth is below `next` (the depth of
/// the next entry: a list of children ended), as their ends say.
fn close_ended(stack: &mut Vec<Scope>, chains: &mut [Vec<Option<RawName>>], next: isize) {
    while stack.last().is_some_and(|s| s.depth > next) {
        if let Some(done) = stack.pop() {
            put_back(chains, done);
        }
    }
}

/// Opens `scope` for the children of the entry at `depth`, unless they
/// are nested too deep to look at: then it is closed at once and they are
/// skipped (the depth below which entries are skipped).
fn open_or_skip(
    stack: &mut Vec<Scope>,
    chains: &mut [Vec<Option<RawName>>],
    scope: Scope,
    depth: isize,
) -> Option<isize> {
    if depth + 1 < MAX_DIE_DEPTH as isize {
        stack.push(scope);
        None
    } else {
        put_back(chains, scope);
        Some(depth)
    }
}

/// A function's children are done: the chains it displaced come back where
/// they were at least as deep as what it gave.
fn put_back(chains: &mut [Vec<Option<RawName>>], done: Scope) {
    let Some(displaced) = done.displaced else {
        return;
    };
    let level = done.level - 1;
    for (i, old) in displaced {
        if old.len() >= chains[i].len() - level {
            chains[i].truncate(level);
            chains[i].extend(old);
        }
    }
}

/// The name of the function `entry` is (or is an inlined copy of).
fn name_in<'a>(
    dwarf: &gimli::Dwarf<R<'a>>,
    index: &UnitIndex<'a>,
    unit: &Unit<R<'a>>,
    entry: &DebuggingInformationEntry<'_, '_, R<'a>>,
    hops: usize,
) -> Option<String> {
    let mut name = None;
    let mut next = None;
    let mut attrs = entry.attrs();
    while let Ok(Some(attr)) = attrs.next() {
        match attr.name() {
            gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name => {
                if let Ok(s) = dwarf.attr_string(unit, attr.value()) {
                    return Some(s.to_string_lossy().into_owned());
                }
            }
            gimli::DW_AT_name => {
                if let Ok(s) = dwarf.attr_string(unit, attr.value()) {
                    name = Some(s.to_string_lossy().into_owned());
                }
            }
            gimli::DW_AT_abstract_origin | gimli::DW_AT_specification => next = Some(attr.value()),
            _ => {}
        }
    }
    if name.is_some() || hops >= MAX_NAME_HOPS {
        return name;
    }
    match next? {
        AttributeValue::UnitRef(off) => {
            let e = unit.entry(off).ok()?;
            name_in(dwarf, index, unit, &e, hops + 1)
        }
        AttributeValue::DebugInfoRef(off) => {
            let other = index.unit_of(dwarf, off)?;
            let e = other.entry(off.to_unit_offset(&other.header)?).ok()?;
            name_in(dwarf, index, &other, &e, hops + 1)
        }
        _ => None,
    }
}

fn language(root: &DebuggingInformationEntry<'_, '_, R<'_>>) -> Language {
    let lang = match root.attr_value(gimli::DW_AT_language) {
        Ok(Some(AttributeValue::Language(l))) => l,
        _ => return Language::Unknown,
    };
    match lang {
        gimli::DW_LANG_Rust => Language::Rust,
        gimli::DW_LANG_C_plus_plus
        | gimli::DW_LANG_C_plus_plus_03
        | gimli::DW_LANG_C_plus_plus_11
        | gimli::DW_LANG_C_plus_plus_14 => Language::Cpp,
        gimli::DW_LANG_C | gimli::DW_LANG_C89 | gimli::DW_LANG_C99 | gimli::DW_LANG_C11 => {
            Language::C
        }
        _ => Language::Unknown,
    }
}

/// The function chains of `addrs` in each unit of `groups` (in parallel),
/// as (index into `addrs`, chain); the outermost functions of units
/// walked whole go to `dies`, which then reads them by their functions.
pub(super) fn walk_units(
    dwarf: &gimli::Dwarf<R<'_>>,
    groups: &[(u64, Vec<usize>)],
    addrs: &[u64],
    dies: &mut DieIndex,
) -> Vec<(usize, Vec<RawName>)> {
    let index = UnitIndex::default();
    let known: &DieIndex = dies;
    let walked: Vec<UnitFrames> = groups
        .par_iter()
        .map(|(unit, idxs)| unit_frames(dwarf, &index, known, *unit, idxs, addrs))
        .collect();
    let mut found = Vec::new();
    for w in walked {
        found.extend(w.chains);
        if let Some(functions) = w.functions {
            // A unit the index knows is read by its functions, never walked
            // whole again.
            let before = dies.functions.insert(w.unit, functions);
            debug_assert!(before.is_none(), "unit {:#x} walked whole twice", w.unit);
            dies.changed = true;
        }
    }
    found
}
