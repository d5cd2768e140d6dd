//! The functions inlined at an address, from DWARF, reading as little of it
//! as the addresses need.
//!
//! A profile samples a few functions of a big library, so the work is
//! proportional to those, not to the library:
//!
//! 1. `.debug_aranges` names the compilation unit (CU) holding each address.
//!    Addresses it does not cover get no DWARF names (the caller falls back
//!    to the symbol table). Without `.debug_aranges` (Rust and clang
//!    binaries), every CU's root entry says what it covers instead.
//! 2. `.debug_info` is inflated only up to the end of the last CU needed,
//!    while the small sections inflate on the other threads; `.debug_line`
//!    is never read: only function names are wanted, not lines.
//! 3. Each needed CU (in parallel) parses its own abbreviations and walks its
//!    entries once for all its addresses: the `DW_TAG_subprogram` whose
//!    ranges hold an address, then the `DW_TAG_inlined_subroutine`s nested in
//!    it that hold it too, skipping every function that holds none. The walk
//!    also notes where each outermost function's entry is (`index`): a CU
//!    walked once is then read only at the functions holding the addresses.
//!
//! Names follow `DW_AT_linkage_name`, then `DW_AT_name`, then
//! `DW_AT_abstract_origin`/`DW_AT_specification`, within a CU or across CUs;
//! a name in a CU beyond what was inflated is left out of the chain.
//! Damaged DWARF leaves addresses unnamed, never fails the fold.

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use gimli::{EndianSlice, Reader as _, RunTimeEndian, SectionId};
use rayon::prelude::*;

use super::index::{Arange, DieIndex, FunctionRange};
use crate::elf::sections::{Bytes, Reader, Section, Sections};
use crate::types::RawName;

mod units;
mod walk;

use units::make_unit;
use walk::walk_units;

type R<'a> = EndianSlice<'a, RunTimeEndian>;

/// Inline nesting deeper than this is cut (a guard against broken DWARF).
const MAX_INLINE_DEPTH: usize = 64;
/// Entries nested deeper than this are not looked at (bounds the recursion).
const MAX_DIE_DEPTH: usize = 256;
/// Links followed from one entry to the one that names it.
const MAX_NAME_HOPS: usize = 16;
/// Address ranges looked at per entry.
const MAX_RANGES: usize = 4096;

/// The small sections a lookup reads whole.
const SMALL: [(SectionId, &str); 7] = [
    (SectionId::DebugAbbrev, "abbrev"),
    (SectionId::DebugStr, "str"),
    (SectionId::DebugLineStr, "line_str"),
    (SectionId::DebugStrOffsets, "str_offsets"),
    (SectionId::DebugAddr, "addr"),
    (SectionId::DebugRngLists, "rnglists"),
    (SectionId::DebugRanges, "ranges"),
];

/// An ELF image's DWARF, located but not yet read.
pub(crate) struct DwarfFile<'d> {
    sections: Sections<'d>,
    endian: RunTimeEndian,
    /// `.debug_info` as far as it was inflated ahead (see `prefetch`).
    prefetched: Mutex<Option<Reader<'d>>>,
    /// Compressed sections inflated by earlier lookups, kept for the next
    /// (see [`Kept`]).
    kept: Kept<'d>,
}

/// Most bytes of inflated DWARF kept between lookups, by every file of the
/// process together: an always-on recorder's memory budget is 100 MiB, and
/// Debian's libc debug file and a Go service's binary keep 7 and 9 MiB.
const KEPT_BUDGET: usize = 24 << 20;
/// Inflated bytes kept now (see [`KEPT_BUDGET`]).
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

/// What a file whose DWARF is looked up again and again (a binary the
/// recorder's namer keeps open) keeps of its compressed sections: inflating
/// `.debug_info` up to a unit and the small sections again for each batch of
/// new addresses was most of the naming of an always-on recorder (Debian's
/// libc debug file: 5.8 MB of `.debug_info`, 1 MB of abbreviations). Plain
/// sections are not kept: they are mapped again at no cost. Within
/// [`KEPT_BUDGET`] (each file reserves a section's whole inflated size
/// before keeping it); past it, sections are inflated per lookup as before.
#[derive(Default)]
struct Kept<'d> {
    /// `.debug_info`'s reader, as far as it was inflated.
    info: Mutex<Option<Reader<'d>>>,
    /// The compressed small sections, inflated whole.
    small: OnceLock<Vec<(SectionId, Bytes<'d>)>>,
    /// `.debug_aranges` parsed.
    aranges: OnceLock<Vec<Arange>>,
    /// Bytes reserved from [`KEPT_BYTES`].
    reserved: AtomicUsize,
}

impl Kept<'_> {
    /// Reserves `n` bytes of the budget: whether they fit.
    fn reserve(&self, n: u64) -> bool {
        let Ok(n) = usize::try_from(n) else {
            return false;
        };
        let fits = KEPT_BYTES
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |kept| {
                kept.checked_add(n).filter(|&t| t <= KEPT_BUDGET)
            })
            .is_ok();
        if fits {
            self.reserved.fetch_add(n, Ordering::Relaxed);
        }
        fits
    }
}

impl Drop for Kept<'_> {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(*self.reserved.get_mut(), Ordering::Relaxed);
    }
}

impl<'d> DwarfFile<'d> {
    /// `None` when `data` has no `.debug_info`. With `file`, section
    /// contents are read from it rather than from `data`.
    pub(crate) fn new(
        data: &'d [u8],
        file: Option<Arc<File>>,
        prefetched: Option<Reader<'d>>,
    ) -> Option<Self> {
        let sections = Sections::parse(data, file)?;
        let info = sections.debug("info")?;
        // Only a reader of this very section helps.
        let prefetched = prefetched.filter(|r| r.section().same_as(&info));
        let endian = if sections.little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        Some(DwarfFile {
            sections,
            endian,
            prefetched: Mutex::new(prefetched),
            kept: Kept::default(),
        })
    }

    /// Which unit holds which addresses: `.debug_aranges` (parsed once and
    /// kept), else the units' own ranges from an earlier lookup, else
    /// nothing yet.
    fn unit_table<'t>(&'t self, dies: &'t DieIndex) -> &'t [Arange] {
        let from_aranges = self.kept.aranges.get_or_init(|| {
            self.sections
                .debug("aranges")
                .map(|s| arange_table(&s.full(), self.endian))
                .unwrap_or_default()
        });
        match (&from_aranges[..], &dies.units) {
            ([], Some(units)) => &units[..],
            (t, _) => t,
        }
    }

    /// Per address, the functions there, outermost first; `None` where
    /// DWARF names none. `dies` is what earlier lookups in this DWARF
    /// learnt of its layout (empty, or from the symbol cache); what this
    /// one learns is added to it.
    pub(crate) fn frames(&self, addrs: &[u64], dies: &mut DieIndex) -> Vec<Option<Vec<RawName>>> {
        let mut out = vec![None; addrs.len()];
        let Some(info) = self.sections.debug("info") else {
            return out;
        };
        if dies.info_len != info.size() {
            *dies = DieIndex::new(info.size());
        }
        let table = self.unit_table(dies);
        let units_of = |table: &[Arange]| -> Vec<(u64, Vec<usize>)> { group(table, addrs) };

        // With aranges (or the CUs' ranges from an earlier lookup): the CUs
        // are known before .debug_info is read, and only the part of it up
        // to the last one is inflated.
        let by_aranges = (!table.is_empty()).then(|| units_of(table));
        let mut prefetched = self.prefetched.lock().ok().and_then(|mut p| p.take());
        // A compressed `.debug_info` is kept inflated for the next lookup
        // (when the budget allows); a plain one is mapped for this one.
        let mut kept_info = self
            .kept
            .info
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept_info.is_none() && info.is_compressed() && self.kept.reserve(info.size()) {
            *kept_info = Some(prefetched.take().unwrap_or_else(|| info.reader()));
        }
        let kept_reader: Option<&mut Reader<'d>> = kept_info.as_mut();
        let last = by_aranges
            .as_ref()
            .map(|groups| groups.iter().map(|(u, _)| *u).max());
        let read_info = move || -> Option<Bytes<'d>> {
            match kept_reader {
                Some(reader) => {
                    read_through(reader, last, self.endian);
                    None
                }
                None => {
                    let mut reader = prefetched.unwrap_or_else(|| info.reader());
                    read_through(&mut reader, last, self.endian);
                    Some(reader.into_bytes())
                }
            }
        };
        let read_small = || self.small_sections();
        let (fresh_info, small) = rayon::join(read_info, read_small);
        let info_bytes: &[u8] = match (&fresh_info, kept_info.as_ref()) {
            (Some(b), _) => b,
            (None, Some(r)) => r.bytes(),
            (None, None) => &[],
        };

        let Ok(dwarf) = load_dwarf(info_bytes, &small, self.endian) else {
            return out;
        };
        let groups = match by_aranges {
            Some(groups) => groups,
            None => {
                let table = unit_ranges(&dwarf);
                let groups = units_of(&table);
                dies.units = Some(table);
                dies.changed = true;
                groups
            }
        };
        for (i, chain) in walk_units(&dwarf, &groups, addrs, dies) {
            if let Some(slot) = out.get_mut(i) {
                // Claimed by two CUs: the deeper chain, the first CU's on a tie.
                if slot.as_ref().is_none_or(|old| chain.len() > old.len()) {
                    *slot = Some(chain);
                }
            }
        }
        out
    }

    /// The small sections, whole: the compressed ones as kept inflated
    /// (inflated the first time, within the budget), the others mapped.
    fn small_sections(&self) -> Vec<(SectionId, Bytes<'_>)> {
        let present: Vec<(SectionId, Section<'d>)> = SMALL
            .iter()
            .filter_map(|&(id, name)| Some((id, self.sections.debug(name)?)))
            .collect();
        let compressed: u64 = present
            .iter()
            .filter(|(_, s)| s.is_compressed())
            .map(|(_, s)| s.size())
            .sum();
        let kept = (compressed > 0)
            .then(|| {
                self.kept.small.get_or_init(|| {
                    if !self.kept.reserve(compressed) {
                        return Vec::new();
                    }
                    present
                        .par_iter()
                        .filter(|(_, s)| s.is_compressed())
                        .map(|(id, s)| (*id, s.full()))
                        .collect()
                })
            })
            .filter(|k| !k.is_empty());
        present
            .par_iter()
            .map(|(id, s)| {
                let held = kept.and_then(|k| k.iter().find(|(i, _)| i == id));
                match held {
                    Some((_, b)) => (*id, Bytes::Borrowed(&b[..])),
                    None => (*id, s.full()),
                }
            })
            .collect()
    }
}

/// The DWARF of a lookup: `.debug_info` as read so far, the small
/// sections whole, every other section empty.
fn load_dwarf<'a>(
    info: &'a [u8],
    small: &'a [(SectionId, Bytes<'_>)],
    endian: RunTimeEndian,
) -> Result<gimli::Dwarf<R<'a>>, gimli::Error> {
    gimli::Dwarf::load(|id| -> Result<R<'a>, gimli::Error> {
        let bytes: &[u8] = if id == SectionId::DebugInfo {
            info
        } else {
            small
                .iter()
                .find(|(i, _)| *i == id)
                .map_or(&[][..], |(_, b)| b)
        };
        Ok(EndianSlice::new(bytes, endian))
    })
}

/// `.debug_aranges` as a sorted table; empty ranges and ranges at 0 (code
/// the linker dropped) left out.
fn arange_table(bytes: &[u8], endian: RunTimeEndian) -> Vec<Arange> {
    let aranges = gimli::DebugAranges::new(bytes, endian);
    let mut table = Vec::new();
    let mut headers = aranges.headers();
    while let Ok(Some(header)) = headers.next() {
        let unit = header.debug_info_offset().0 as u64;
        let mut entries = header.entries();
        while let Ok(Some(e)) = entries.next() {
            let r = e.range();
            if r.begin != 0 && r.begin < r.end {
                table.push(Arange {
                    begin: r.begin,
                    end: r.end,
                    unit,
                });
            }
        }
    }
    table.sort_unstable();
    table
}

/// Without `.debug_aranges`: what each CU's root entry covers (every CU's
/// abbreviations are parsed, so this is the slow path; in parallel).
fn unit_ranges(dwarf: &gimli::Dwarf<R<'_>>) -> Vec<Arange> {
    let mut headers = Vec::new();
    let mut iter = dwarf.units();
    while let Ok(Some(h)) = iter.next() {
        headers.push(h);
    }
    let mut table: Vec<Arange> = headers
        .into_par_iter()
        .flat_map_iter(|header| {
            let unit_off = header.offset().as_debug_info_offset().map(|o| o.0 as u64);
            let mut found = Vec::new();
            if let (Some(off), Some(unit)) = (unit_off, make_unit(dwarf, header)) {
                if let Ok(mut ranges) = dwarf.unit_ranges(&unit) {
                    while let Ok(Some(r)) = ranges.next() {
                        if found.len() == MAX_RANGES {
                            break;
                        }
                        if r.begin != 0 && r.begin < r.end {
                            found.push(Arange {
                                begin: r.begin,
                                end: r.end,
                                unit: off,
                            });
                        }
                    }
                }
            }
            found
        })
        .collect();
    table.sort_unstable();
    table
}

/// What one walk covers.
enum Extent<'f> {
    /// The rest of a unit's list of entries; every outermost function's
    /// ranges and entry go to the index.
    Unit(&'f mut Vec<FunctionRange>),
    /// One function's entry and its children: the walk ends where its
    /// siblings begin.
    Function,
}

/// The addresses (indices into `addrs`) each CU holds, in address order. An
/// address two CUs claim (a weak duplicate of a function in another codegen
/// unit) goes to both; the deeper chain wins later.
fn group(table: &[Arange], addrs: &[u64]) -> Vec<(u64, Vec<usize>)> {
    let mut order: Vec<usize> = (0..addrs.len()).collect();
    order.sort_unstable_by_key(|&i| addrs[i]);
    let mut by_unit: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
    for i in order {
        let a = addrs[i];
        let at = table.partition_point(|r| r.begin <= a);
        let mut units: Vec<u64> = table[..at]
            .iter()
            .rev()
            .take(super::OVERLAPPING)
            .filter(|r| a >= r.begin && a < r.end)
            .map(|r| r.unit)
            .collect();
        units.sort_unstable();
        units.dedup();
        for u in units {
            by_unit.entry(u).or_default().push(i);
        }
    }
    by_unit.into_iter().collect()
}

/// `.debug_info` read through the end of the CU at `last` (`Some(None)`:
/// none is needed; `None`: every CU is, the whole section).
fn read_through(reader: &mut Reader<'_>, last: Option<Option<u64>>, endian: RunTimeEndian) {
    let last = match last {
        None => return reader.read_to(u64::MAX),
        Some(None) => return,
        Some(Some(last)) => last,
    };
    // The unit's length: 4 bytes, or 0xffffffff and 8 bytes (64-bit DWARF).
    reader.read_to(last.saturating_add(12));
    let head = usize::try_from(last)
        .ok()
        .and_then(|at| reader.bytes().get(at..))
        .unwrap_or_default();
    if let Ok((len, format)) = EndianSlice::new(head, endian).read_initial_length() {
        let header = u64::from(format.initial_length_size());
        reader.read_to(last.saturating_add(header).saturating_add(len as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_group_by_the_unit_holding_them() {
        let table = [
            Arange {
                begin: 0x100,
                end: 0x200,
                unit: 0,
            },
            Arange {
                begin: 0x200,
                end: 0x300,
                unit: 50,
            },
            Arange {
                begin: 0x400,
                end: 0x500,
                unit: 0,
            },
        ];
        let addrs = [0x450, 0x150, 0x2ff, 0x300, 0x50];
        assert_eq!(group(&table, &addrs), vec![(0, vec![1, 0]), (50, vec![2])]);
    }

    /// Functions at `addrs` according to addr2line (an independent
    /// reader: whole-binary index, its own inline walk), outermost first.
    fn addr2line_frames(data: &[u8], addrs: &[u64]) -> Vec<Option<Vec<String>>> {
        let secs = Sections::parse(data, None).expect("sections");
        let ids = [
            SectionId::DebugAbbrev,
            SectionId::DebugAddr,
            SectionId::DebugAranges,
            SectionId::DebugInfo,
            SectionId::DebugLine,
            SectionId::DebugLineStr,
            SectionId::DebugRanges,
            SectionId::DebugRngLists,
            SectionId::DebugStr,
            SectionId::DebugStrOffsets,
        ];
        let owned: Vec<(SectionId, Vec<u8>)> = ids
            .iter()
            .map(|&id| {
                let name = id.name().trim_start_matches(".debug_");
                let bytes = secs.debug(name).map(|s| s.full().to_vec());
                (id, bytes.unwrap_or_default())
            })
            .collect();
        let dwarf = gimli::Dwarf::load(|id| {
            let b = owned
                .iter()
                .find(|(i, _)| *i == id)
                .map_or(&[][..], |(_, b)| b);
            Ok::<_, gimli::Error>(EndianSlice::new(b, RunTimeEndian::Little))
        })
        .expect("dwarf");
        let ctx = addr2line::Context::from_dwarf(dwarf).expect("addr2line");
        addrs
            .iter()
            .map(|&a| {
                let mut frames = ctx.find_frames(a).skip_all_loads().ok()?;
                let mut names = Vec::new();
                while let Ok(Some(f)) = frames.next() {
                    if let Some(n) = f
                        .function
                        .and_then(|n| n.raw_name().ok().map(|c| c.into_owned()))
                    {
                        names.push(n);
                    }
                }
                names.reverse();
                (!names.is_empty()).then_some(names)
            })
            .collect()
    }

    /// Addresses spread over the executable segment of `data`.
    fn code_addresses(data: &[u8], count: u64) -> Vec<u64> {
        let elf = goblin::elf::Elf::parse(data).expect("ELF");
        let text = elf
            .program_headers
            .iter()
            .find(|p| p.p_type == goblin::elf::program_header::PT_LOAD && p.is_executable())
            .expect("code segment");
        let step = (text.p_memsz / count).max(1) | 1; // odd: not always at a function start
        (0..count)
            .map(|i| text.p_vaddr + i * step)
            .filter(|&a| a < text.p_vaddr + text.p_memsz)
            .collect()
    }

    /// `dir/p`: a C program, `cc -O2 -g` (`.debug_aranges`), of `body`
    /// after an always-inlined `sq`.
    fn compile_c(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
        compile_c_with(dir, body, &[])
    }

    /// [`compile_c`] with more compiler flags.
    fn compile_c_with(dir: &std::path::Path, body: &str, flags: &[&str]) -> std::path::PathBuf {
        let src = dir.join("p.c");
        let head = "static inline __attribute__((always_inline)) int sq(int x) { return x * x; }\n";
        std::fs::write(&src, format!("{head}{body}")).expect("write");
        let bin = dir.join("p");
        let built = std::process::Command::new("cc")
            .args(["-O2", "-g"])
            .args(flags)
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .status()
            .expect("cc runs");
        assert!(built.success(), "cc failed");
        bin
    }

    /// Every address of a C program (`cc -O2 -g`: aranges, inlined static
    /// functions) gets the inline chain addr2line gives, and every address of
    /// this test binary (Rust, no `.debug_aranges`) a start of it.
    #[test]
    fn inline_chains_agree_with_addr2line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c_bin = compile_c(
            dir.path(),
            "static int __attribute__((noinline)) sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += sq(i) ^ n; return s; }\n\
             int main(int argc, char **argv) { (void)argv; return sum(argc * 1000) & 1; }\n",
        );
        let exe = std::env::current_exe().expect("exe");
        // C: the same chains. The Rust test binary: the same outer function and
        // no frame addr2line lacks; LLVM sometimes gives an inlined call ranges
        // that do not cover its own inlined calls, which addr2line still finds
        // (it looks up each depth on its own) and this walk does not: those
        // chains may stop early (4 of 1500 addresses in a release build).
        for (path, count, exact) in [(c_bin, 4000, true), (exe, 1500, false)] {
            let data = std::fs::read(&path).expect("read");
            let addrs = code_addresses(&data, count);
            let file = Arc::new(File::open(&path).expect("open"));
            let ours = DwarfFile::new(&data, Some(file), None)
                .expect("DWARF")
                .frames(&addrs, &mut DieIndex::default());
            let theirs = addr2line_frames(&data, &addrs);
            let (mut named, mut inlined) = (0, 0);
            for ((a, o), t) in addrs.iter().zip(&ours).zip(&theirs) {
                let o: Option<Vec<String>> = o
                    .as_ref()
                    .map(|v| v.iter().map(|n| n.name.clone()).collect());
                if exact {
                    assert_eq!(&o, t, "{}: address {a:#x}", path.display());
                } else {
                    let prefix = match (&o, t) {
                        (Some(o), Some(t)) => !o.is_empty() && t.starts_with(o),
                        (None, None) => true,
                        _ => false,
                    };
                    assert!(prefix, "{}: address {a:#x}: {o:?} vs {t:?}", path.display());
                }
                named += usize::from(o.is_some());
                inlined += usize::from(o.is_some_and(|o| o.len() > 1));
            }
            assert!(
                named > 0 && inlined > 0,
                "{}: {named} addresses named, {inlined} with inlined frames",
                path.display()
            );
        }
    }

    /// A lookup through the index an earlier one left (walking only the
    /// functions holding its addresses) names every address as a walk of
    /// whole units does: a C program with `.debug_aranges`, and this test
    /// binary (Rust, CUs found from their root entries, then from the index).
    #[test]
    fn lookups_through_the_index_name_as_whole_walks() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c_bin = compile_c(
            dir.path(),
            "static int __attribute__((noinline)) sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += sq(i) ^ n; return s; }\n\
             static int __attribute__((noinline)) twice(int n) { return sum(n) + sum(n + 1); }\n\
             int main(int argc, char **argv) { (void)argv; return (sum(argc * 1000) + twice(argc)) & 1; }\n",
        );
        let exe = std::env::current_exe().expect("exe");
        for (path, count) in [(c_bin, 3000), (exe, 3000)] {
            let data = std::fs::read(&path).expect("read");
            let addrs = code_addresses(&data, count);
            let open = || {
                let file = Arc::new(File::open(&path).expect("open"));
                DwarfFile::new(&data, Some(file), None).expect("DWARF")
            };
            let whole = open().frames(&addrs, &mut DieIndex::default());
            // The first lookup (every other address) walks its units whole
            // and notes their functions; the second, in a fresh DwarfFile,
            // asks for all of them, most in units it then reads by index.
            let mut dies = DieIndex::default();
            let half: Vec<u64> = addrs.iter().copied().step_by(2).collect();
            open().frames(&half, &mut dies);
            assert!(
                dies.changed && !dies.functions.is_empty(),
                "{}",
                path.display()
            );
            let walked = dies.functions.len();
            dies.changed = false;
            let indexed = open().frames(&addrs, &mut dies);
            for ((a, w), i) in addrs.iter().zip(&whole).zip(&indexed) {
                assert_eq!(w, i, "{}: address {a:#x}", path.display());
            }
            assert!(
                whole.iter().flatten().any(|c| c.len() > 1),
                "{}: no inlined frames to compare",
                path.display()
            );
            // None of the units the first lookup walked was walked whole
            // again (the insertion's debug assertion); the rest were added.
            assert!(dies.functions.len() >= walked, "{}", path.display());
            assert_eq!(dies.changed, dies.functions.len() > walked);
        }
    }

    /// Compressed DWARF (`cc -gz`, as Debian's debug files and Go's
    /// binaries have it) stays inflated in a file looked up again and again,
    /// and names as a fresh file's lookup does.
    #[test]
    fn compressed_dwarf_is_kept_inflated_between_lookups() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Two units, `q.c` linked first: a lookup of its addresses inflates
        // `.debug_info` only through its unit; the next must read on.
        let q = dir.path().join("q.c");
        std::fs::write(
            &q,
            "static inline __attribute__((always_inline)) int cube(int x) { return x * x * x; }\n\
             int __attribute__((noinline)) cubes(int n) { int s = 0; for (int i = 0; i < n; i++) s += cube(i) ^ n; return s; }\n",
        )
        .expect("write q.c");
        let bin = compile_c_with(
            dir.path(),
            "int cubes(int n);\n\
             static int __attribute__((noinline)) sum(int n) { int s = 0; for (int i = 0; i < n; i++) s += sq(i) ^ n; return s; }\n\
             int main(int argc, char **argv) { (void)argv; return (sum(argc * 1000) + cubes(argc)) & 1; }\n",
            &["-gz=zlib", q.to_str().expect("utf-8 path")],
        );
        let data = std::fs::read(&bin).expect("read");
        let addrs = code_addresses(&data, 2000);
        let open = || {
            let file = Arc::new(File::open(&bin).expect("open"));
            DwarfFile::new(&data, Some(file), None).expect("DWARF")
        };
        let kept = open();
        let info = kept.sections.debug("info").expect(".debug_info");
        assert!(info.is_compressed(), "cc -gz=zlib wrote plain DWARF");
        let whole = open().frames(&addrs, &mut DieIndex::default());
        let first = whole
            .iter()
            .zip(&addrs)
            .find(|(c, _)| {
                c.as_ref()
                    .is_some_and(|c| c.iter().any(|n| n.name == "cubes"))
            })
            .map(|(_, &a)| a)
            .expect("an address in cubes");
        let mut dies = DieIndex::default();
        kept.frames(&[first], &mut dies);
        let inflated = |f: &DwarfFile<'_>| {
            f.kept
                .info
                .lock()
                .unwrap()
                .as_ref()
                .map(|r| r.bytes().len() as u64)
        };
        let through_q = inflated(&kept).expect("not kept");
        assert!(
            through_q > 0 && through_q < info.size(),
            "{through_q} bytes"
        );
        assert!(kept.kept.small.get().is_some_and(|k| !k.is_empty()));
        assert!(kept.kept.reserved.load(Ordering::Relaxed) as u64 >= info.size());
        let again = kept.frames(&addrs, &mut dies);
        assert_eq!(again, whole);
        assert!(inflated(&kept).is_some_and(|n| n > through_q));
        assert!(
            whole.iter().flatten().any(|c| c.len() > 1),
            "no inlined frames"
        );
    }

    #[test]
    fn garbage_has_no_dwarf() {
        assert!(DwarfFile::new(b"definitely not an ELF file", None, None).is_none());
    }
}
