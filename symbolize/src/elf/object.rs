//! What naming asks of an ELF image before its symbols — its GNU build id,
//! its load address, whether it carries DWARF or a symbol table, its debug
//! link — answered from the file, program and section headers alone.
//!
//! A full ELF parse (goblin's, as `symbolic`'s `ElfObject` runs it) also
//! splits every string of every string table and reads the dynamic
//! relocations up front: for librustc_driver's and libLLVM's tables that was
//! 11.5% of the CPU of a cold fold of a cargo build, to answer four yes/no
//! questions. Symbol tables are read later, by `symtab`, only as far as
//! lookups need.

use goblin::container::Ctx;
use goblin::elf::header::Header;
use goblin::elf::program_header::{ProgramHeader, PT_LOAD, PT_NOTE};
use goblin::elf::section_header::{SHT_DYNSYM, SHT_NOBITS, SHT_NOTE, SHT_SYMTAB};

use super::sections::{range, Sections};

/// `NT_GNU_BUILD_ID`: the note holding a GNU build id.
const NT_GNU_BUILD_ID: u32 = 3;

/// The headers of an ELF image (the file's bytes, at their offsets).
pub(crate) struct Object<'d> {
    sections: Sections<'d>,
    program_headers: Vec<ProgramHeader>,
}

impl<'d> Object<'d> {
    /// Reads the headers of `data`; `None` when it is not an ELF image whose
    /// headers lie within it.
    pub(crate) fn parse(data: &'d [u8]) -> Option<Self> {
        let (header, sections) = Sections::parse_with_header(data, None)?;
        let program_headers = program_headers(data, &header, sections.ctx())?;
        Some(Object {
            sections,
            program_headers,
        })
    }

    /// The image's bytes.
    pub(crate) fn data(&self) -> &'d [u8] {
        self.sections.data()
    }

    /// Its program headers.
    pub(crate) fn program_headers(&self) -> &[ProgramHeader] {
        &self.program_headers
    }

    /// What its symbol addresses are relative to: the address of its first
    /// loadable segment (0 for shared objects and position-independent
    /// executables, linked at 0).
    pub(crate) fn load_address(&self) -> u64 {
        self.program_headers
            .iter()
            .find(|p| p.p_type == PT_LOAD)
            .map_or(0, |p| p.p_vaddr)
    }

    /// Its GNU build id: from a `PT_NOTE` segment, else from a note section
    /// (old linkers wrote no note segment). `None` when it has none, or an
    /// empty one.
    pub(crate) fn build_id(&self) -> Option<&'d [u8]> {
        let segments = self
            .program_headers
            .iter()
            .filter(|p| p.p_type == PT_NOTE)
            .map(|p| (p.p_offset, p.p_filesz, p.p_align));
        let sections = self
            .sections
            .headers()
            .iter()
            .filter(|s| s.sh_type == SHT_NOTE)
            .map(|s| (s.sh_offset, s.sh_size, s.sh_addralign));
        segments
            .chain(sections)
            .find_map(|(offset, size, align)| {
                let data = self.data();
                let notes = data.get(range(offset, size, data.len())?)?;
                self.gnu_build_id(notes, align)
            })
            .filter(|id| !id.is_empty())
    }

    /// The `NT_GNU_BUILD_ID` note among `notes` (entries aligned to 8 bytes
    /// in segments aligned so, else to 4).
    fn gnu_build_id(&self, mut notes: &'d [u8], align: u64) -> Option<&'d [u8]> {
        let align = if align == 8 { 8 } else { 4 };
        let pad = |n: usize| n.checked_next_multiple_of(align);
        while notes.len() >= 12 {
            let namesz = self.u32_at(notes, 0)? as usize;
            let descsz = self.u32_at(notes, 4)? as usize;
            let kind = self.u32_at(notes, 8)?;
            // Name and description each start aligned, counted from the
            // note's start (the 12-byte header is part of the count).
            let desc_at = pad(12usize.checked_add(namesz)?)?;
            let desc_end = desc_at.checked_add(descsz)?;
            let name = notes.get(12..12 + namesz)?;
            let desc = notes.get(desc_at..desc_end)?;
            if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
                return Some(desc);
            }
            notes = notes.get(pad(desc_end)?..)?;
        }
        None
    }

    fn u32_at(&self, bytes: &[u8], at: usize) -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if self.sections.little_endian() {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    }

    /// Whether it carries DWARF: a `.debug_info` (or GNU's compressed
    /// `.zdebug_info`) with contents in the file.
    pub(crate) fn has_debug_info(&self) -> bool {
        self.sections.headers().iter().any(|s| {
            s.sh_type != SHT_NOBITS
                && s.sh_offset != 0
                && s.sh_size != 0
                && matches!(self.sections.name(s), b".debug_info" | b".zdebug_info")
        })
    }

    /// Whether it has a symbol table (`.symtab` or `.dynsym`) with entries.
    pub(crate) fn has_symbols(&self) -> bool {
        let len = self.data().len();
        self.sections.headers().iter().any(|s| {
            matches!(s.sh_type, SHT_SYMTAB | SHT_DYNSYM)
                && s.sh_entsize != 0
                && s.sh_size >= s.sh_entsize
                && range(s.sh_offset, s.sh_size, len).is_some()
        })
    }

    /// Its `.gnu_debuglink`: the debug file's name and the CRC-32 of that
    /// file. `None` without one, or when it is malformed.
    pub(crate) fn debug_link(&self) -> Option<(&'d [u8], u32)> {
        let s = self
            .sections
            .headers()
            .iter()
            .find(|s| s.sh_type != SHT_NOBITS && self.sections.name(s) == b".gnu_debuglink")?;
        let data = self.data();
        let bytes = data.get(range(s.sh_offset, s.sh_size, data.len())?)?;
        let nul = bytes.iter().position(|&b| b == 0)?;
        // The name, its NUL, padding to 4 bytes, then the CRC.
        let crc_at = (nul + 1).checked_next_multiple_of(4)?;
        let crc = self.u32_at(bytes, crc_at)?;
        (nul > 0).then_some((&bytes[..nul], crc))
    }
}

fn program_headers(data: &[u8], header: &Header, ctx: Ctx) -> Option<Vec<ProgramHeader>> {
    let count = usize::from(header.e_phnum);
    let start = usize::try_from(header.e_phoff).ok()?;
    // The table must be in the file before goblin is asked to parse it.
    data.get(start..start.checked_add(count.checked_mul(usize::from(header.e_phentsize))?)?)?;
    ProgramHeader::parse(data, start, count, ctx).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use symbolic_debuginfo::elf::ElfObject;

    /// The same answers as symbolic's full parse, on real binaries.
    fn agrees_with_symbolic(path: &str) {
        let Ok(data) = std::fs::read(path) else {
            panic!("cannot read {path}");
        };
        let ours = Object::parse(&data).expect("parses");
        let theirs = ElfObject::parse(&data).expect("symbolic parses");
        assert_eq!(ours.load_address(), theirs.load_address(), "{path}");
        assert_eq!(
            ours.build_id().map(super::super::hex),
            theirs.code_id().map(|c| c.as_str().to_string()),
            "{path}"
        );
        assert_eq!(ours.has_debug_info(), theirs.has_debug_info(), "{path}");
        assert_eq!(ours.has_symbols(), theirs.has_symbols(), "{path}");
        let link = theirs.debug_link().ok().flatten();
        assert_eq!(
            ours.debug_link(),
            link.as_ref().map(|l| (l.filename().to_bytes(), l.crc())),
            "{path}"
        );
    }

    #[test]
    fn the_same_answers_as_a_full_parse() {
        let exe = std::env::current_exe().expect("exe");
        agrees_with_symbolic(exe.to_str().expect("utf-8 path"));
        // Stripped, with a debug link and a build id.
        agrees_with_symbolic("/usr/lib/x86_64-linux-gnu/libc.so.6");
        agrees_with_symbolic("/usr/bin/perl");
        agrees_with_symbolic("/bin/ls");
    }

    #[test]
    fn garbage_and_cut_headers_are_not_objects() {
        assert!(Object::parse(b"definitely not an ELF file").is_none());
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        assert!(
            Object::parse(&exe[..64]).is_none(),
            "headers outside the image"
        );
    }

    #[test]
    fn notes_are_walked_by_their_sizes() {
        let exe = std::fs::read(std::env::current_exe().expect("exe")).expect("read");
        let obj = Object::parse(&exe).expect("parses");
        // A property note (8-aligned) before the build id, as ld writes them.
        let mut notes = Vec::new();
        notes.extend(4u32.to_le_bytes());
        notes.extend(16u32.to_le_bytes());
        notes.extend(5u32.to_le_bytes());
        notes.extend(b"GNU\0");
        notes.extend([0u8; 16]);
        notes.extend(4u32.to_le_bytes());
        notes.extend(3u32.to_le_bytes());
        notes.extend(NT_GNU_BUILD_ID.to_le_bytes());
        notes.extend(b"GNU\0");
        notes.extend([0xab, 0xcd, 0xef]);
        assert_eq!(obj.gnu_build_id(&notes, 8), Some(&[0xab, 0xcd, 0xef][..]));
        // A size running past the end finds nothing, and does not panic.
        notes[4] = 0xff;
        assert_eq!(obj.gnu_build_id(&notes, 8), None);
    }
}
