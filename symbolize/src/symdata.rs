//! The symbols of one binary: its symbol tables (`.symtab` and `.dynsym`,
//! read by `symtab`), its PLT stubs (named by `plt` from the binary's own
//! relocations, before any symbol table is asked) and, when present, its DWARF (own or from a separate debug file) for the
//! functions inlined at each address.
//!
//! DWARF is read by `dwarf` as far as the looked-up addresses need: a sample
//! in three functions of libc does not pay for all of libc's debug info.
//! A [`Binary`] is shared by the threads that look up its addresses.

use memmap2::Mmap;
use std::fs::File;
use std::sync::{Arc, OnceLock};

use symbolic_common::Language;

use crate::dwarf::{DieIndex, DwarfFile};
use crate::elf::plt::{StubName, Stubs};
use crate::elf::sections::Reader;
use crate::elf::symtab::{function_names, FunctionIndex};
use crate::elf::{file_offset_to_vaddr, load_segments, Object, Segment};
use crate::types::{RawName, PLT_SUFFIX};

/// A binary ready for lookups by file offset.
pub(crate) struct Binary<'a, 'd> {
    segments: Vec<Segment>,
    /// The binary's own image (its PLT is not in a separate debug file).
    image: &'d [u8],
    /// What symbol-table addresses are relative to.
    load_address: u64,
    /// Where the symbol table comes from (read at the first lookup, while
    /// DWARF inflates on another thread).
    symbol_source: &'a Object<'d>,
    /// The symbol table sorted, for a binary asked many times
    /// ([`Binary::index_symbols`]); without it each lookup passes over it.
    index: OnceLock<FunctionIndex<'d>>,
    /// Its PLT stubs, decoded the first time a lookup falls in them: a
    /// binary kept open meets them batch after batch, and decoding reads
    /// every relocation (librustc_driver has 118,000).
    stubs: OnceLock<Stubs>,
    dwarf: Option<DwarfFile<'d>>,
    /// The file mappings its bytes come from ([`Binary::release_pages`]).
    mapped: Vec<&'d Mmap>,
}

impl<'a, 'd> Binary<'a, 'd> {
    /// `obj` is the mapped binary (its segments count); symbols and DWARF
    /// come from `debug` (a separate debug file) when given, else from it.
    /// Each object comes with its open file when its DWARF is still on disk.
    /// Without `want_dwarf`, only the symbol table is used.
    pub(crate) fn new(
        obj: (&'a Object<'d>, Option<Arc<File>>),
        debug: Option<(&'a Object<'d>, Option<Arc<File>>)>,
        want_dwarf: bool,
        prefetched: Option<Reader<'static>>,
    ) -> Self {
        let own = obj.0;
        let (src, src_file) = debug.unwrap_or(obj);
        // A stripped debug file may lack .symtab; the binary's .dynsym then helps.
        let symbol_source = if src.has_symbols() { src } else { own };
        Binary {
            segments: load_segments(own),
            image: own.data(),
            load_address: src.load_address(),
            symbol_source,
            index: OnceLock::new(),
            stubs: OnceLock::new(),
            dwarf: want_dwarf
                .then(|| DwarfFile::new(src.data(), src_file, prefetched))
                .flatten(),
            mapped: Vec::new(),
        }
    }

    /// Tells the file mappings the objects' bytes lie in, so that
    /// [`Binary::release_pages`] can let their pages go.
    pub(crate) fn mapped_from(mut self, maps: Vec<&'d Mmap>) -> Self {
        self.mapped = maps;
        self
    }

    /// Lets go of the pages of its files read so far (symbol and string
    /// tables, the image): for a binary kept open between lookups, which
    /// would otherwise hold every page any lookup touched. The sorted
    /// index stays; the next lookup reads the few pages it needs again
    /// from the page cache.
    pub(crate) fn release_pages(&self) {
        for map in &self.mapped {
            crate::sys::release_pages(map);
        }
    }

    /// Sorts the symbol table once for the lookups to come: for a binary
    /// kept open and asked again and again.
    pub(crate) fn index_symbols(&self) {
        let src = self.symbol_source;
        self.index
            .get_or_init(|| FunctionIndex::new(src.data(), src.load_address()));
    }

    /// Whether DWARF was found.
    pub(crate) fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// The functions at each of `file_offsets`, outermost first: the
    /// function holding the code, then the functions DWARF says were inlined
    /// into it there, down to the innermost. Empty when nothing covers it.
    /// `dies` is what earlier lookups learnt of the DWARF's layout, and
    /// learns what this one does.
    pub(crate) fn lookup_all(
        &self,
        file_offsets: &[u64],
        dies: &mut DieIndex,
    ) -> Vec<Vec<RawName>> {
        // 0 for offsets outside every segment: no DWARF range starts at 0.
        let vaddrs: Vec<u64> = file_offsets
            .iter()
            .map(|&off| file_offset_to_vaddr(&self.segments, off).unwrap_or(0))
            .collect();
        let (dwarf, symbols) = rayon::join(
            || match &self.dwarf {
                Some(d) => d.frames(&vaddrs, dies),
                None => vec![None; vaddrs.len()],
            },
            || self.symbols(&vaddrs),
        );
        vaddrs
            .iter()
            .zip(dwarf)
            .zip(symbols)
            .map(|((&vaddr, frames), sym)| match frames {
                // No DWARF describes a stub; its symbol is not a function's.
                _ if sym.as_ref().is_some_and(RawName::is_stub) => sym.into_iter().collect(),
                Some(mut f) => {
                    // DWARF without linkage names (Rust's line-tables-only
                    // debug info) names the outer function without its path;
                    // the symbol table has the same function in full.
                    if let (Some(outer), Some(sym)) = (f.first_mut(), sym) {
                        if sym.name != outer.name && sym.qualifies(outer) {
                            *outer = sym;
                        }
                    }
                    f
                }
                None if vaddr == 0 => Vec::new(),
                None => sym.into_iter().collect(),
            })
            .collect()
    }

    /// The symbol-table functions covering `vaddrs`, and the PLT stubs.
    fn symbols(&self, vaddrs: &[u64]) -> Vec<Option<RawName>> {
        let found;
        let stubs = match self.stubs.get() {
            Some(s) => s,
            None => {
                // Empty unless one of `vaddrs` is in a stub section.
                found = Stubs::of(self.image, vaddrs);
                if found.is_empty() {
                    &found
                } else {
                    self.stubs.get_or_init(|| found)
                }
            }
        };
        // A local IFUNC's stub is named after the function at its resolver.
        let mut asked = vaddrs.to_vec();
        let stub_names: Vec<Option<&StubName>> = vaddrs
            .iter()
            .map(|&v| stubs.at(v).map(|s| &s.name))
            .collect();
        asked.extend(stub_names.iter().filter_map(|n| match n {
            Some(StubName::Ifunc(resolver)) => Some(*resolver),
            _ => None,
        }));
        let mut names = self.function_names(&asked).into_iter();
        let mut out: Vec<Option<RawName>> = names.by_ref().take(vaddrs.len()).collect();
        for (slot, stub) in out.iter_mut().zip(stub_names) {
            let Some(stub) = stub else { continue };
            let name = match stub {
                StubName::Symbol(s) => format!("{s}{PLT_SUFFIX}"),
                StubName::Ifunc(resolver) => match names.next().flatten() {
                    Some(f) => format!("{}{PLT_SUFFIX}", f.name),
                    None => format!("*ABS*+{resolver:#x}{PLT_SUFFIX}"),
                },
                StubName::Header => ".plt".to_string(),
                StubName::Unnamed(offset) => format!("offset_{offset:#x}{PLT_SUFFIX}"),
            };
            *slot = Some(RawName::new(name, Language::Unknown));
        }
        out
    }

    /// The symbol-table functions covering `vaddrs`.
    fn function_names(&self, vaddrs: &[u64]) -> Vec<Option<RawName>> {
        let src = self.symbol_source;
        // Below the load address nothing is covered; u64::MAX is never asked.
        let rels: Vec<u64> = vaddrs
            .iter()
            .map(|v| v.checked_sub(self.load_address).unwrap_or(u64::MAX))
            .collect();
        match self.index.get() {
            Some(index) => index.names(&rels),
            None => function_names(src.data(), src.load_address(), &rels),
        }
        .into_iter()
        .zip(vaddrs)
        .map(|(name, &v)| {
            let name = name.filter(|_| v >= self.load_address)?;
            Some(RawName::new(name, Language::Unknown))
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_elf() {
        assert!(Object::parse(b"definitely not an ELF file").is_none());
    }

    #[test]
    fn own_binary_names_its_functions_with_dwarf() {
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(exe).expect("read");
        let obj = Object::parse(&data).expect("parse");
        let bin = Binary::new((&obj, None), None, true, None);
        assert!(bin.has_dwarf(), "test binaries are built with debug info");
        let out = bin.lookup_all(&[u64::MAX, 0], &mut DieIndex::default());
        assert_eq!(out.len(), 2);
        assert!(out[0].is_empty());
    }
}
