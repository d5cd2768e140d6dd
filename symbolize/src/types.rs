//! Value types the resolvers share: a stored function name and why a
//! binary cannot be used. A leaf: it imports nothing from this crate, so
//! `elf`, `dwarf`, `cache` and the binary's lookup all use it without
//! depending on each other.

use std::fmt;

use symbolic_common::{Language, Name, NameMangling};

/// What perf appends to the symbol a PLT stub jumps to.
pub(crate) const PLT_SUFFIX: &str = "@plt";

/// A function name as stored: possibly mangled, with its source language.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RawName {
    /// The possibly mangled name.
    pub name: String,
    /// `symbolic_common::Language` as a number (what the cache stores).
    pub language: u32,
}

impl RawName {
    pub(crate) fn new(name: impl Into<String>, language: Language) -> Self {
        RawName {
            name: name.into(),
            language: language as u32,
        }
    }

    /// Whether this names a PLT stub (or the PLT's header), not a function.
    pub(crate) fn is_stub(&self) -> bool {
        self.name.ends_with(PLT_SUFFIX) || self.name == ".plt"
    }

    /// Whether this name is `short` with its path: `a::b::f` for `f`.
    pub(crate) fn qualifies(&self, short: &RawName) -> bool {
        let full = self.demangle();
        let short = short.demangle();
        full.len() > short.len()
            && full.ends_with(short.as_str())
            && full[..full.len() - short.len()].ends_with("::")
    }

    /// The demangled display name: Rust paths without hash, C++ names with
    /// parameters but without return type. A PLT stub's `symbol@plt` is the
    /// demangled symbol with the suffix (as perf shows it).
    pub(crate) fn demangle(&self) -> String {
        use symbolic_demangle::{Demangle, DemangleOptions};
        let opts = DemangleOptions::name_only().parameters(true);
        let lang = Language::from_u32(self.language);
        let (name, suffix) = match self.name.strip_suffix(PLT_SUFFIX) {
            Some(stem) if !stem.is_empty() => (stem, PLT_SUFFIX),
            _ => (self.name.as_str(), ""),
        };
        let mut out = Name::new(name, NameMangling::Unknown, lang)
            .try_demangle(opts)
            .into_owned();
        out.push_str(suffix);
        out
    }
}

/// Why a module's file cannot be used for symbolization.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// Missing or unreadable.
    Missing,
    /// Not an ELF file (or one too broken to parse).
    NotElf,
    /// An ELF file, but not the one that was recorded.
    BuildIdMismatch,
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unusable::Missing => "missing or unreadable",
            Unusable::NotElf => "not an ELF file",
            Unusable::BuildIdMismatch => "build id mismatch",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_qualifies_a_bare_name() {
        let full = RawName::new("_ZN4core3fmt5write17h0123456789abcdefE", Language::Unknown);
        assert!(full.qualifies(&RawName::new("write", Language::Rust)));
        assert!(!full.qualifies(&RawName::new("rite", Language::Rust)));
        assert!(!full.qualifies(&RawName::new("core::fmt::write", Language::Rust)));
        let c = RawName::new("__GI_munmap", Language::Unknown);
        assert!(!c.qualifies(&RawName::new("munmap", Language::C)));
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
