//! Function names from an ELF symbol table (`.symtab`, `.dynsym`), for a
//! set of addresses, read straight from the section bytes.
//!
//! Same answers as `symbolic`'s `SymbolMap` (a test holds them equal on real
//! binaries), at a fraction of the cost: no table of all symbols is built or
//! sorted, and only the names found are read. The map goes through goblin's
//! string tables, split into every string up front, sorts every symbol and
//! binary-searches each name; for gcc's `cc1` (29,000 dynamic symbols,
//! 1.3 MB of names) that was 7 ms of a fold, this is one pass over the
//! symbols with a binary search among the addresses looked up.
//!
//! Which symbols count: `STT_FUNC` symbols at or above the load address, in
//! an executable section; those of `.symtab`, then those of `.dynsym`
//! (tables found by section header). An address belongs to the symbol with
//! the greatest start at or below it (the first one read among symbols
//! starting there), if it is inside that symbol's size; a symbol without
//! size reaches to the next one, and the last one to the end (as with perf).

use goblin::container::Ctx;
use goblin::elf::section_header::{SectionHeader, SHF_EXECINSTR, SHT_DYNSYM, SHT_SYMTAB};
use goblin::elf::sym::{Sym, Symtab, STT_FUNC};

use super::sections::{elf_section_headers, range};

/// A symbol that may hold some of the addresses looked up.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    /// Relative to the load address.
    address: u64,
    size: u64,
    /// Reading order: the first symbol read wins among those at one address.
    order: u32,
    /// Offset of the name in its string table.
    name: usize,
    /// 0: `.symtab`'s string table, 1: `.dynsym`'s.
    table: usize,
}

impl Candidate {
    /// Whether `self` is a closer symbol below an address than `other`.
    fn closer_than(&self, other: Option<&Candidate>) -> bool {
        other.is_none_or(|o| {
            (self.address, std::cmp::Reverse(self.order)) > (o.address, std::cmp::Reverse(o.order))
        })
    }
}

/// The function names at `rels` (addresses relative to `load_address`) in
/// the symbol tables of the ELF image `data` (at file offsets). `None` where
/// no function symbol covers an address, and everywhere when `data` is not ELF.
pub(crate) fn function_names<'d>(
    data: &'d [u8],
    load_address: u64,
    rels: &[u64],
) -> Vec<Option<&'d str>> {
    let mut out = vec![None; rels.len()];
    let mut by_address: Vec<usize> = (0..rels.len()).collect();
    by_address.sort_unstable_by_key(|&i| rels[i]);
    let queries: Vec<u64> = by_address.iter().map(|&i| rels[i]).collect();

    // best[j]: the closest symbol below queries[j] among those that are not
    // below queries[j - 1] as well; the closest below queries[j] overall is
    // then the best of best[..=j].
    let mut best: Vec<Option<Candidate>> = vec![None; queries.len()];
    let names = for_each_function(data, load_address, |c| {
        let j = queries.partition_point(|&q| q < c.address);
        if let Some(slot) = best.get_mut(j) {
            if c.closer_than(slot.as_ref()) {
                *slot = Some(c);
            }
        }
    });

    let mut floor: Option<Candidate> = None;
    for ((&q, &i), b) in queries.iter().zip(&by_address).zip(&best) {
        if let Some(b) = b {
            if b.closer_than(floor.as_ref()) {
                floor = Some(*b);
            }
        }
        let Some(f) = &floor else { continue };
        // Without a size it reaches to the next symbol: past it, that one
        // would be the floor.
        if f.size == 0 || q - f.address < f.size {
            out[i] = names.get(f.table).and_then(|t| name_at(t, f.name));
        }
    }
    out
}

/// The function symbol `name` of the image `data`: its address relative
/// to `load_address` and its size, the first of that name read; `None`
/// when there is none, and when `data` is not ELF.
pub(crate) fn function_named(data: &[u8], load_address: u64, name: &str) -> Option<(u64, u64)> {
    let mut found = Vec::new();
    let names = for_each_function(data, load_address, |c| found.push(c));
    found
        .into_iter()
        .find(|c| names.get(c.table).and_then(|t| name_at(t, c.name)) == Some(name))
        .map(|c| (c.address, c.size))
}

/// Calls `each` on every function symbol of the image `data` that counts
/// (see the module docs), in reading order, and returns the string tables
/// of `.symtab` and `.dynsym` (empty when absent, and both when `data` is
/// not ELF).
fn for_each_function(
    data: &[u8],
    load_address: u64,
    mut each: impl FnMut(Candidate),
) -> [&[u8]; 2] {
    let mut names: [&[u8]; 2] = [&[], &[]];
    let Some((_, ctx, headers)) = elf_section_headers(data) else {
        return names;
    };
    let mut order = 0u32;
    for (table, kind) in [SHT_SYMTAB, SHT_DYNSYM].into_iter().enumerate() {
        // The last table of a kind, as goblin takes it.
        let Some(sh) = headers.iter().rfind(|sh| sh.sh_type == kind) else {
            continue;
        };
        let Some(strings) = headers
            .get(sh.sh_link as usize)
            .and_then(|s| bytes(data, s.sh_offset, s.sh_size))
        else {
            continue;
        };
        let Some(syms) = symbols_of(data, sh, ctx) else {
            continue;
        };
        names[table] = strings;
        for s in syms.iter() {
            let in_code = s.st_shndx != 0
                && headers
                    .get(s.st_shndx)
                    .is_some_and(|h| h.sh_flags & u64::from(SHF_EXECINSTR) != 0);
            if s.st_type() != STT_FUNC || s.st_value < load_address || !in_code {
                continue;
            }
            each(Candidate {
                address: s.st_value - load_address,
                size: s.st_size,
                order,
                name: s.st_name,
                table,
            });
            order = order.saturating_add(1);
        }
    }
    names
}

/// Every function symbol of an image, sorted, for a binary asked again and
/// again (kept open while a recording grows): one pass over the tables and
/// a sort, then a binary search per address, where [`function_names`]
/// passes over every symbol per call. Same answers.
pub(crate) struct FunctionIndex<'d> {
    /// One entry per address a function starts at (the symbol read first
    /// among those starting there), by address.
    entries: Vec<Entry>,
    names: [&'d [u8]; 2],
}

/// One function of a [`FunctionIndex`] in 16 bytes: the index lives as long
/// as the recorder keeps its binary open, and libLLVM's and
/// librustc_driver's 350,000 functions took 27 MB of an agent's heap as
/// 56-byte symbols and sort keys.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Relative to the load address.
    address: u64,
    /// The size in the low 31 bits (a larger one saturates: no function
    /// is 2 GiB); the top bit: the name is in `.dynsym`'s strings.
    size_table: u32,
    /// Offset of the name in its string table; [`Entry::NO_NAME`] when the
    /// offset does not fit (the function is known, its name is not).
    name: u32,
}

impl Entry {
    const DYNAMIC: u32 = 1 << 31;
    const NO_NAME: u32 = u32::MAX;

    fn of(c: &Candidate) -> Self {
        let size = u32::try_from(c.size).map_or(Entry::DYNAMIC - 1, |s| s.min(Entry::DYNAMIC - 1));
        let table = if c.table == 1 { Entry::DYNAMIC } else { 0 };
        Entry {
            address: c.address,
            size_table: size | table,
            name: u32::try_from(c.name).unwrap_or(Entry::NO_NAME),
        }
    }

    fn size(&self) -> u64 {
        u64::from(self.size_table & !Entry::DYNAMIC)
    }

    fn table(&self) -> usize {
        usize::from(self.size_table & Entry::DYNAMIC != 0)
    }
}

impl<'d> FunctionIndex<'d> {
    /// The function symbols of the ELF image `data` (at file offsets),
    /// relative to `load_address`.
    pub(crate) fn new(data: &'d [u8], load_address: u64) -> Self {
        let mut symbols = Vec::new();
        let names = for_each_function(data, load_address, |c| symbols.push(c));
        // `order` saturates; past u32::MAX symbols the keys no longer name
        // their symbol, so such a table keeps only what fits.
        symbols.truncate(u32::MAX as usize);
        // Sorting 16-byte keys (address, then the first read last) rather
        // than the 40-byte symbols took a third off indexing
        // librustc_driver's 150,000 functions.
        let mut sorted: Vec<u128> = symbols
            .iter()
            .map(|c| (u128::from(c.address) << 64) | u128::from(u32::MAX - c.order))
            .collect();
        sorted.sort_unstable();
        let mut entries: Vec<Entry> = Vec::with_capacity(sorted.len());
        for key in sorted {
            let Some(c) = symbols.get((u32::MAX - key as u32) as usize) else {
                continue;
            };
            // The last key at an address is the symbol read first there.
            match entries.last_mut() {
                Some(e) if e.address == c.address => *e = Entry::of(c),
                _ => entries.push(Entry::of(c)),
            }
        }
        entries.shrink_to_fit();
        FunctionIndex { entries, names }
    }

    /// The function names at `rels`, as [`function_names`] gives them.
    pub(crate) fn names(&self, rels: &[u64]) -> Vec<Option<&'d str>> {
        rels.iter()
            .map(|&q| {
                let i = self.entries.partition_point(|e| e.address <= q);
                let f = self.entries.get(i.checked_sub(1)?)?;
                // Without a size it reaches to the next symbol.
                let inside = f.size() == 0 || q - f.address < f.size();
                if !inside || f.name == Entry::NO_NAME {
                    return None;
                }
                self.names
                    .get(f.table())
                    .and_then(|t| name_at(t, f.name as usize))
            })
            .collect()
    }
}

fn name_at(strings: &[u8], offset: usize) -> Option<&str> {
    let from = strings.get(offset..)?;
    let end = from.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&from[..end]).ok()
}

/// The symbols of symbol table section `sh`, when they lie inside `data`.
fn symbols_of<'d>(data: &'d [u8], sh: &SectionHeader, ctx: Ctx) -> Option<Symtab<'d>> {
    let entsize = Sym::size(ctx.container) as u64;
    if sh.sh_entsize != entsize {
        return None;
    }
    bytes(data, sh.sh_offset, sh.sh_size)?;
    let count = usize::try_from(sh.sh_size / entsize).ok()?;
    Symtab::parse(data, usize::try_from(sh.sh_offset).ok()?, count, ctx).ok()
}

fn bytes(data: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    data.get(range(offset, size, data.len())?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic_debuginfo::elf::ElfObject;
    use symbolic_debuginfo::SymbolMap;

    /// What the symbol map says is at `rel`.
    fn map_name<'m>(map: &'m SymbolMap<'_>, rel: u64) -> Option<&'m str> {
        let i = map.partition_point(|s| s.address <= rel);
        let s = map.get(i.checked_sub(1)?)?;
        (s.size == 0 || rel - s.address < s.size)
            .then(|| s.name())
            .flatten()
    }

    /// Each symbol's first and last byte, the byte after it, and the bytes
    /// between, looked up both ways.
    fn agrees_with_symbolic(path: &str) {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path} is needed here: {e}"));
        let obj = ElfObject::parse(&data).expect("ELF");
        let map = obj.symbol_map();
        assert!(map.len() > 100, "{path} has function symbols");
        let mut rels: Vec<u64> = Vec::new();
        for s in map.iter() {
            rels.extend([s.address, s.address + s.size.max(1) - 1, s.address + s.size]);
            rels.push(s.address.saturating_sub(1));
        }
        rels.push(0);
        rels.push(u64::MAX);
        // Unsorted with duplicates, as callers may pass them.
        rels.reverse();
        let ours = function_names(&data, obj.load_address(), &rels);
        for (&rel, got) in rels.iter().zip(&ours) {
            assert_eq!(*got, map_name(&map, rel), "{path} at {rel:#x}");
        }
        let index = FunctionIndex::new(&data, obj.load_address());
        assert_eq!(index.names(&rels), ours, "{path}: the index differs");
    }

    #[test]
    fn the_same_names_as_symbolic() {
        let exe = std::env::current_exe().expect("exe");
        agrees_with_symbolic(exe.to_str().expect("utf-8 path"));
        // Debian's are stripped: .dynsym only.
        agrees_with_symbolic("/usr/lib/x86_64-linux-gnu/libc.so.6");
        agrees_with_symbolic("/usr/bin/perl");
    }

    #[test]
    fn an_indexed_function_takes_16_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 16);
        let big = Candidate {
            address: 7,
            size: 1 << 40,
            order: 0,
            name: 1 << 33,
            table: 1,
        };
        let e = Entry::of(&big);
        assert_eq!(
            (e.size(), e.table(), e.name),
            ((1 << 31) - 1, 1, Entry::NO_NAME)
        );
    }

    #[test]
    fn garbage_has_no_symbols() {
        assert_eq!(
            function_names(b"not an ELF image", 0, &[0, 1]),
            [None, None]
        );
        assert_eq!(
            FunctionIndex::new(b"not an ELF image", 0).names(&[0, 1]),
            [None, None]
        );
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        // A truncated image: the section headers are past its end.
        assert_eq!(function_names(&exe[..100], 0, &[0x1000]), [None]);
        assert!(function_names(&exe, 0, &[]).is_empty());
    }
}
