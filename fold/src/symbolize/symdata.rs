//! The symbols of one binary: its symbol table (`.symtab`, else `.dynsym`)
//! and, when present, its DWARF (own or from a separate debug file) for the
//! functions inlined at each address.
//!
//! DWARF is read lazily with `addr2line`: only the compilation units that
//! hold looked-up addresses are parsed, so a sample in three functions of
//! libc does not pay for all of libc's debug info. A [`Binary`] is shared by
//! the threads that look up its addresses; each chunk of addresses gets its
//! own `addr2line` context (they are not `Sync`), which also spreads one big
//! binary over several threads. Sections are decompressed once, in parallel.

use std::borrow::Cow;

use gimli::{EndianSlice, RunTimeEndian, SectionId};
use rayon::prelude::*;
use symbolic_common::{Language, Name, NameMangling};
use symbolic_debuginfo::dwarf::Dwarf;
use symbolic_debuginfo::elf::ElfObject;
use symbolic_debuginfo::SymbolMap;

use super::elf::{file_offset_to_vaddr, load_segments, Segment, Unusable};

/// Inline nesting deeper than this is cut (a guard against broken DWARF).
const MAX_INLINE_DEPTH: usize = 64;

/// A function name as stored: possibly mangled, with its source language.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RawName {
    /// The possibly mangled name.
    pub name: String,
    /// `symbolic_common::Language` as a number (what the cache stores).
    pub language: u32,
}

impl RawName {
    fn new(name: impl Into<String>, language: Language) -> Self {
        RawName {
            name: name.into(),
            language: language as u32,
        }
    }

    /// The demangled display name: Rust paths without hash, C++ names with
    /// parameters but without return type.
    pub(crate) fn demangle(&self) -> String {
        use symbolic_demangle::{Demangle, DemangleOptions};
        let opts = DemangleOptions::name_only().parameters(true);
        let lang = Language::from_u32(self.language);
        Name::new(self.name.as_str(), NameMangling::Unknown, lang)
            .try_demangle(opts)
            .into_owned()
    }
}

/// The DWARF sections `addr2line` reads, decompressed.
struct Sections<'d> {
    data: Vec<(SectionId, Cow<'d, [u8]>)>,
    endian: RunTimeEndian,
}

impl<'d> Sections<'d> {
    fn load(obj: &ElfObject<'d>) -> Self {
        const IDS: [SectionId; 10] = [
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
        // symbolic names sections without the leading dot and decompresses
        // them (SHF_COMPRESSED and .zdebug); the big ones in parallel.
        let data = IDS
            .par_iter()
            .filter_map(|&id| {
                let name = id.name().trim_start_matches('.');
                Some((id, obj.section(name)?.data))
            })
            .collect();
        Sections {
            data,
            // symbolic's `Endian` is gimli's `RunTimeEndian`.
            endian: obj.endianity(),
        }
    }

    fn get(&self, id: SectionId) -> EndianSlice<'_, RunTimeEndian> {
        let bytes = self
            .data
            .iter()
            .find(|(i, _)| *i == id)
            .map_or(&[][..], |(_, d)| &d[..]);
        EndianSlice::new(bytes, self.endian)
    }

    fn context(&self) -> Option<addr2line::Context<EndianSlice<'_, RunTimeEndian>>> {
        let dwarf = gimli::Dwarf::load(|id| Ok::<_, gimli::Error>(self.get(id))).ok()?;
        addr2line::Context::from_dwarf(dwarf).ok()
    }
}

/// A binary ready for lookups by file offset.
pub(crate) struct Binary<'d> {
    segments: Vec<Segment>,
    /// What symbol-table addresses are relative to.
    load_address: u64,
    symbols: SymbolMap<'d>,
    dwarf: Option<Sections<'d>>,
}

impl<'d> Binary<'d> {
    /// `binary` is the mapped file (its segments count); symbols and DWARF
    /// come from `debug` (a separate debug file) when given, else from it.
    /// Without `want_dwarf`, only the symbol table is used.
    pub(crate) fn new(
        binary: &[u8],
        obj: &ElfObject<'d>,
        debug: Option<&ElfObject<'d>>,
        want_dwarf: bool,
    ) -> Result<Self, Unusable> {
        let segments = load_segments(binary).ok_or(Unusable::NotElf)?;
        let src = debug.unwrap_or(obj);
        // A stripped debug file may lack .symtab; the binary's .dynsym then helps.
        let symbols = if src.has_symbols() {
            src.symbol_map()
        } else {
            obj.symbol_map()
        };
        Ok(Binary {
            segments,
            load_address: src.load_address(),
            symbols,
            dwarf: (want_dwarf && src.has_debug_info()).then(|| Sections::load(src)),
        })
    }

    /// Whether DWARF was found.
    pub(crate) fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// The functions at each of `file_offsets`, outermost first: the
    /// function holding the code, then the functions DWARF says were inlined
    /// into it there, down to the innermost. Empty when nothing covers it.
    pub(crate) fn lookup_all(&self, file_offsets: &[u64]) -> Vec<Vec<RawName>> {
        let threads = rayon::current_num_threads().max(1);
        let chunk = file_offsets.len().div_ceil(threads * 2).max(256);
        file_offsets
            .par_chunks(chunk)
            .flat_map_iter(|c| {
                // One context per chunk: addr2line contexts are not Sync.
                let ctx = self.dwarf.as_ref().and_then(Sections::context);
                c.iter()
                    .map(|&off| self.lookup(ctx.as_ref(), off))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn lookup(
        &self,
        ctx: Option<&addr2line::Context<EndianSlice<'_, RunTimeEndian>>>,
        file_offset: u64,
    ) -> Vec<RawName> {
        let Some(vaddr) = file_offset_to_vaddr(&self.segments, file_offset) else {
            return Vec::new();
        };
        if let Some(frames) = ctx.and_then(|c| dwarf_frames(c, vaddr)) {
            return frames;
        }
        self.symbol(vaddr).into_iter().collect()
    }

    /// The symbol-table function covering `vaddr`.
    fn symbol(&self, vaddr: u64) -> Option<RawName> {
        let rel = vaddr.checked_sub(self.load_address)?;
        let idx = self.symbols.partition_point(|s| s.address <= rel);
        let sym = self.symbols.get(idx.checked_sub(1)?)?;
        // Only the last symbol can lack a size (the map derives the others
        // from their successor); like perf, it then covers the rest.
        let inside = sym.size == 0 || rel - sym.address < sym.size;
        let name = sym.name()?;
        inside.then(|| RawName::new(name, Language::Unknown))
    }
}

/// DWARF's functions at `vaddr`, outermost first; `None` when DWARF does not
/// name a function there (the symbol table may still).
fn dwarf_frames(
    ctx: &addr2line::Context<EndianSlice<'_, RunTimeEndian>>,
    vaddr: u64,
) -> Option<Vec<RawName>> {
    let mut iter = ctx.find_frames(vaddr).skip_all_loads().ok()?;
    let mut out = Vec::new();
    while let Ok(Some(frame)) = iter.next() {
        if out.len() == MAX_INLINE_DEPTH {
            break;
        }
        let Some(f) = frame.function else { continue };
        let Ok(name) = f.raw_name() else { continue };
        out.push(RawName::new(name, language(f.language)));
    }
    if out.is_empty() {
        return None;
    }
    out.reverse();
    Some(out)
}

fn language(lang: Option<gimli::DwLang>) -> Language {
    match lang {
        Some(gimli::DW_LANG_Rust) => Language::Rust,
        Some(
            gimli::DW_LANG_C_plus_plus
            | gimli::DW_LANG_C_plus_plus_03
            | gimli::DW_LANG_C_plus_plus_11
            | gimli::DW_LANG_C_plus_plus_14,
        ) => Language::Cpp,
        Some(gimli::DW_LANG_C | gimli::DW_LANG_C89 | gimli::DW_LANG_C99 | gimli::DW_LANG_C11) => {
            Language::C
        }
        _ => Language::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_elf() {
        assert!(ElfObject::parse(b"definitely not an ELF file").is_err());
    }

    #[test]
    fn own_binary_names_its_functions_with_dwarf() {
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(exe).expect("read");
        let obj = ElfObject::parse(&data).expect("parse");
        let bin = Binary::new(&data, &obj, None, true).expect("binary");
        assert!(bin.has_dwarf(), "test binaries are built with debug info");
        let out = bin.lookup_all(&[u64::MAX, 0]);
        assert_eq!(out.len(), 2);
        assert!(out[0].is_empty());
    }

    #[test]
    fn names_demangle_by_language() {
        let r = RawName::new("_ZN4core3fmt5write17h0123456789abcdefE", Language::Rust);
        assert_eq!(r.demangle(), "core::fmt::write");
        let c = RawName::new("_Z3fooi", Language::Unknown);
        assert_eq!(c.demangle(), "foo(int)");
        assert_eq!(RawName::new("main", Language::C).demangle(), "main");
    }
}
