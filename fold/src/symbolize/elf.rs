//! One ELF file on disk: checks it is the binary that was recorded (GNU build
//! id), turns recorded file offsets into symbol-table addresses through the
//! `PT_LOAD` program headers, and names the function symbol covering them.
//!
//! It reads symbol tables (`.symtab`, falling back to `.dynsym`) only; inline
//! expansion from DWARF is the job of a future layer on top of
//! [`ElfSymbols::lookup`], which is why lookups hand out symbol indices and
//! naming is a separate step.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use goblin::container::Ctx;
use goblin::elf::header::{ET_DYN, ET_EXEC};
use goblin::elf::program_header::{ProgramHeader, PT_LOAD};
use goblin::elf::Elf;
use symbolic_common::Name;
use symbolic_debuginfo::elf::ElfObject;
use symbolic_debuginfo::SymbolMap;
use symbolic_demangle::{Demangle, DemangleOptions};

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

/// Reads the ELF executable or shared object at `path`.
///
/// Paths come from the recording, so they are not trusted: only a regular
/// file that starts like a loadable ELF image is read, and no more than its
/// size says (no `/dev/zero`, FIFOs or `/proc/kcore`).
pub(crate) fn read_elf(path: &Path) -> Result<Vec<u8>, Unusable> {
    let mut file = File::open(path).map_err(|_| Unusable::Missing)?;
    let meta = file.metadata().map_err(|_| Unusable::Missing)?;
    if !meta.is_file() {
        return Err(Unusable::NotElf);
    }
    let mut head = [0u8; 64];
    file.read_exact(&mut head).map_err(|_| Unusable::NotElf)?;
    let header = Elf::parse_header(&head).map_err(|_| Unusable::NotElf)?;
    if header.e_type != ET_EXEC && header.e_type != ET_DYN {
        return Err(Unusable::NotElf);
    }
    let mut data = Vec::new();
    data.extend_from_slice(&head);
    file.take(meta.len().saturating_sub(head.len() as u64))
        .read_to_end(&mut data)
        .map_err(|_| Unusable::Missing)?;
    Ok(data)
}

/// A loadable segment: file range and where it lands in the ELF's address space.
#[derive(Debug, Clone, Copy)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// The function symbols of one ELF image, ready for lookups by file offset.
pub(crate) struct ElfSymbols<'d> {
    segments: Vec<Segment>,
    /// What symbolic subtracts from every symbol address.
    load_address: u64,
    symbols: SymbolMap<'d>,
}

impl<'d> ElfSymbols<'d> {
    /// Parses `data`, refusing it when `expected_build_id` is known and differs.
    pub(crate) fn parse(data: &'d [u8], expected_build_id: &[u8]) -> Result<Self, Unusable> {
        let obj = ElfObject::parse(data).map_err(|_| Unusable::NotElf)?;
        if !expected_build_id.is_empty() {
            let expected = hex(expected_build_id);
            match obj.code_id() {
                Some(id) if id.as_str().eq_ignore_ascii_case(&expected) => {}
                _ => return Err(Unusable::BuildIdMismatch),
            }
        }
        let segments = load_segments(data).ok_or(Unusable::NotElf)?;
        Ok(ElfSymbols {
            segments,
            load_address: obj.load_address(),
            symbols: obj.symbol_map(),
        })
    }

    /// Index of the function symbol covering the code at `file_offset`.
    pub(crate) fn lookup(&self, file_offset: u64) -> Option<usize> {
        let seg = self
            .segments
            .iter()
            .find(|s| file_offset >= s.offset && file_offset - s.offset < s.filesz)?;
        let vaddr = seg.vaddr.checked_add(file_offset - seg.offset)?;
        let rel = vaddr.checked_sub(self.load_address)?;
        let idx = self.symbols.partition_point(|s| s.address <= rel);
        let idx = idx.checked_sub(1)?;
        let sym = self.symbols.get(idx)?;
        // Only the last symbol can lack a size (the map derives the others
        // from their successor); like perf, it then covers the rest.
        let inside = sym.size == 0 || rel - sym.address < sym.size;
        (inside && sym.name.is_some()).then_some(idx)
    }

    /// Demangled name of the symbol at `idx`: Rust paths without the hash,
    /// C++ names with parameters but without return type.
    pub(crate) fn name(&self, idx: usize) -> Option<String> {
        let raw = self.symbols.get(idx)?.name()?;
        let opts = DemangleOptions::name_only().parameters(true);
        Some(Name::from(raw).try_demangle(opts).into_owned())
    }
}

/// The `PT_LOAD` segments of an ELF image.
fn load_segments(data: &[u8]) -> Option<Vec<Segment>> {
    let header = Elf::parse_header(data).ok()?;
    let ctx = Ctx::new(header.container().ok()?, header.endianness().ok()?);
    let phdrs =
        ProgramHeader::parse(data, header.e_phoff as usize, header.e_phnum as usize, ctx).ok()?;
    Some(
        phdrs
            .iter()
            .filter(|p| p.p_type == PT_LOAD)
            .map(|p| Segment {
                offset: p.p_offset,
                filesz: p.p_filesz,
                vaddr: p.p_vaddr,
            })
            .collect(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_not_elf() {
        assert!(matches!(
            ElfSymbols::parse(b"definitely not an ELF file", &[]),
            Err(Unusable::NotElf)
        ));
        assert!(matches!(
            ElfSymbols::parse(b"\x7fELF\x02\x01\x01", &[]),
            Err(Unusable::NotElf)
        ));
    }

    #[test]
    fn only_loadable_elf_files_are_read() {
        assert_eq!(
            read_elf(Path::new("/nonexistent/x")),
            Err(Unusable::Missing)
        );
        assert_eq!(read_elf(Path::new("/dev/zero")), Err(Unusable::NotElf));
        assert_eq!(read_elf(Path::new("/")), Err(Unusable::NotElf));
        if let Ok(exe) = std::env::current_exe() {
            let data = read_elf(&exe).map(|d| d.len()).ok();
            assert_eq!(data, std::fs::metadata(&exe).ok().map(|m| m.len() as usize));
        }
    }

    #[test]
    fn own_binary_parses_and_checks_build_id() {
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let Ok(data) = std::fs::read(exe) else {
            return;
        };
        assert!(ElfSymbols::parse(&data, &[]).is_ok());
        assert!(matches!(
            ElfSymbols::parse(&data, &[0xde, 0xad]),
            Err(Unusable::BuildIdMismatch)
        ));
    }
}
