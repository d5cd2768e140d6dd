//! The symbol data of one binary: its `PT_LOAD` segments plus a SymCache
//! (symbolic's compact address → function table) built from its DWARF line
//! and inline information and its symbol tables.
//!
//! A [`SymbolData`] is self-contained and owned, so the on-disk cache can
//! store and restore it without the binary. Building it is the expensive,
//! per-binary step (DWARF parsing); [`SymView::lookup`] afterwards is a binary
//! search and can run on many threads at once.

use symbolic_common::{Language, Name, NameMangling};
use symbolic_debuginfo::elf::ElfObject;
use symbolic_symcache::{SymCache, SymCacheConverter};

use super::elf::{file_offset_to_vaddr, load_segments, Segment, Unusable};

/// Inline nesting deeper than this is cut (a guard against cyclic tables).
const MAX_INLINE_DEPTH: usize = 64;

/// Everything needed to name the code at a file offset of one binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SymbolData {
    /// `PT_LOAD` segments of the binary that was mapped.
    pub segments: Vec<Segment>,
    /// What SymCache addresses are relative to (the load address of the
    /// object the SymCache was built from).
    pub load_address: u64,
    /// The SymCache was built with DWARF (functions, lines, inlining).
    pub has_dwarf: bool,
    /// Serialized SymCache, in its own allocation (SymCache needs 8-byte
    /// alignment, which a fresh `Vec` has and a slice of a bigger buffer may not).
    pub symcache: Vec<u8>,
}

/// A function of a lookup result, as stored: possibly mangled, with its language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RawName<'a> {
    /// The possibly mangled name.
    pub name: &'a str,
    /// Source language (helps demangling).
    pub language: Language,
}

impl RawName<'_> {
    /// The demangled display name: Rust paths without hash, C++ names with
    /// parameters but without return type.
    pub(crate) fn demangle(&self) -> String {
        use symbolic_demangle::{Demangle, DemangleOptions};
        let opts = DemangleOptions::name_only().parameters(true);
        Name::new(self.name, NameMangling::Unknown, self.language)
            .try_demangle(opts)
            .into_owned()
    }
}

impl SymbolData {
    /// Builds the symbol data of `binary` (the mapped file, whose segments
    /// count), taking functions from `debug` (a separate debug file) when
    /// given, else from the binary itself.
    pub(crate) fn build(binary: &[u8], debug: Option<&ElfObject<'_>>) -> Result<Self, Unusable> {
        let segments = load_segments(binary).ok_or(Unusable::NotElf)?;
        let own;
        let obj = match debug {
            Some(d) => d,
            None => {
                own = ElfObject::parse(binary).map_err(|_| Unusable::NotElf)?;
                &own
            }
        };
        let dwarf = obj.has_debug_info().then(|| convert(obj, true)).flatten();
        let (symcache, has_dwarf) = match dwarf {
            Some(bytes) => (bytes, true),
            // No or broken DWARF: the symbol tables still name the functions.
            None => (convert(obj, false).ok_or(Unusable::NotElf)?, false),
        };
        Ok(SymbolData {
            segments,
            load_address: obj.load_address(),
            has_dwarf,
            symcache,
        })
    }

    /// A view for lookups; fails when the SymCache bytes do not parse.
    pub(crate) fn view(&self) -> Option<SymView<'_>> {
        let cache = SymCache::parse(&self.symcache).ok()?;
        Some(SymView { data: self, cache })
    }
}

/// Serializes a SymCache of `obj`; with `dwarf`, from its debug session and
/// symbols, else from its symbols only.
fn convert(obj: &ElfObject<'_>, dwarf: bool) -> Option<Vec<u8>> {
    let mut conv = SymCacheConverter::new();
    if dwarf {
        conv.process_object(obj).ok()?;
    } else {
        for sym in obj.symbols() {
            conv.process_symbolic_symbol(&sym);
        }
    }
    let mut out = Vec::new();
    conv.serialize(&mut out).ok()?;
    Some(out)
}

/// Lookups in a parsed [`SymbolData`].
pub(crate) struct SymView<'a> {
    data: &'a SymbolData,
    cache: SymCache<'a>,
}

impl<'a> SymView<'a> {
    /// The functions at `file_offset`, outermost first: the function holding
    /// the code, then the functions inlined into it down to the innermost.
    /// With `inline` false, only the outermost. Empty when nothing covers it.
    pub(crate) fn lookup(&self, file_offset: u64, inline: bool, out: &mut Vec<RawName<'a>>) {
        out.clear();
        let Some(vaddr) = file_offset_to_vaddr(&self.data.segments, file_offset) else {
            return;
        };
        let Some(rel) = vaddr.checked_sub(self.data.load_address) else {
            return;
        };
        // SymCache yields the innermost location first.
        for loc in self.cache.lookup(rel).take(MAX_INLINE_DEPTH) {
            let f = loc.function();
            out.push(RawName {
                name: f.name(),
                language: f.language(),
            });
        }
        out.reverse();
        if !inline {
            out.truncate(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_elf() {
        assert!(matches!(
            SymbolData::build(b"definitely not an ELF file", None),
            Err(Unusable::NotElf)
        ));
    }

    #[test]
    fn corrupt_symcache_gives_no_view() {
        let d = SymbolData {
            segments: Vec::new(),
            load_address: 0,
            has_dwarf: false,
            symcache: b"SYMCgarbage".to_vec(),
        };
        assert!(d.view().is_none());
    }
}
