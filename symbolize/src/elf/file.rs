//! One ELF file on disk: reads it defensively, checks it is the binary that
//! was recorded (GNU build id) and maps recorded file offsets to ELF addresses
//! through the `PT_LOAD` program headers. Symbols and DWARF are `symdata`'s.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use goblin::container::Ctx;
use goblin::elf::header::{Header, ET_DYN, ET_EXEC};
use goblin::elf::program_header::{ProgramHeader, PT_DYNAMIC, PT_INTERP, PT_LOAD, PT_NOTE};
use goblin::elf::section_header::{SectionHeader, SHT_NOBITS, SHT_NULL, SHT_PROGBITS};
use goblin::elf::Elf;
use memmap2::MmapMut;

use super::object::Object;
use super::plt::STUB_SECTIONS;
use crate::types::Unusable;

/// An ELF file read for symbolization.
#[derive(Debug)]
pub(crate) struct ElfFile {
    /// The file's bytes, at their offsets; what symbolization does not look
    /// at reads as zeros. An anonymous mapping: pages never written (most
    /// of a big binary) are never backed, and nothing is zeroed by hand.
    pub data: MmapMut,
    /// The open file, when its DWARF sections were left on disk (they are
    /// read by `sections` as far as a lookup needs them).
    pub dwarf_on_disk: Option<Arc<File>>,
    /// Where it was read from.
    pub path: PathBuf,
}

impl PartialEq for ElfFile {
    fn eq(&self, other: &Self) -> bool {
        self.data[..] == other.data[..]
    }
}

/// Reads the ELF executable or shared object at `path`.
///
/// Paths come from the recording, so they are not trusted: only a regular
/// file that starts like a loadable ELF image is read, and no more than its
/// size says (no `/dev/zero`, FIFOs or `/proc/kcore`).
pub(crate) fn read_elf(path: &Path) -> Result<ElfFile, Unusable> {
    read_elf_parts(path, Parts::ForSymbols)
}

/// Reads only the headers of the ELF file at `path` (section contents, all
/// left on disk, are read through `sections`); `None` when that is not
/// possible (an unusual layout, or not a loadable ELF file).
pub(crate) fn read_elf_headers(path: &Path) -> Option<ElfFile> {
    read_elf_parts(path, Parts::Headers)
        .ok()
        .filter(|f| f.dwarf_on_disk.is_some())
}

/// How much of an ELF file to read up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Parts {
    /// Headers and section names only.
    Headers,
    /// Also symbol, string, note, dynamic and relocation sections.
    ForSymbols,
}

fn read_elf_parts(path: &Path, parts: Parts) -> Result<ElfFile, Unusable> {
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
    if let Some(data) = read_sparse(&file, meta.len(), &header, parts) {
        return Ok(ElfFile {
            data,
            dwarf_on_disk: Some(Arc::new(file)),
            path: path.to_path_buf(),
        });
    }
    let mut data = zeroed(meta.len()).ok_or(Unusable::Missing)?;
    file.read_exact_at(&mut data, 0)
        .map_err(|_| Unusable::Missing)?;
    Ok(ElfFile {
        data,
        dwarf_on_disk: None,
        path: path.to_path_buf(),
    })
}

/// Reads only what symbolization looks at first — headers, symbol and
/// string tables, notes, dynamic and relocation sections and debug links —
/// into a zero-filled buffer the size of the file. Code and data sections,
/// most of a big binary, are never read, and their pages never touched;
/// DWARF is read later, only as far as needed.
/// `None` when the layout is unusual; the caller then reads everything.
fn read_sparse(file: &File, len: u64, header: &Header, parts: Parts) -> Option<MmapMut> {
    let ctx = Ctx::new(header.container().ok()?, header.endianness().ok()?);
    if header.e_shnum == 0 {
        return None;
    }
    let mut data = zeroed(len)?;
    let fill = |data: &mut [u8], off: u64, size: u64| -> Option<()> {
        let end = off.checked_add(size).filter(|&e| e <= len)?;
        let range = usize::try_from(off).ok()?..usize::try_from(end).ok()?;
        file.read_exact_at(data.get_mut(range)?, off).ok()
    };
    let phsize = u64::from(header.e_phnum) * u64::from(header.e_phentsize);
    let shsize = u64::from(header.e_shnum) * u64::from(header.e_shentsize);
    fill(&mut data, 0, header.e_ehsize.into())?;
    fill(&mut data, header.e_phoff, phsize)?;
    fill(&mut data, header.e_shoff, shsize)?;
    let sections = SectionHeader::parse(
        &data,
        usize::try_from(header.e_shoff).ok()?,
        header.e_shnum.into(),
        ctx,
    )
    .ok()?;
    let phdrs = ProgramHeader::parse(
        &data,
        usize::try_from(header.e_phoff).ok()?,
        header.e_phnum.into(),
        ctx,
    )
    .ok()?;
    let names = sections.get(usize::from(header.e_shstrndx))?;
    fill(&mut data, names.sh_offset, names.sh_size)?;
    if parts == Parts::Headers {
        return Some(data);
    }
    let mut wanted: Vec<(u64, u64)> = phdrs
        .iter()
        .filter(|p| matches!(p.p_type, PT_NOTE | PT_DYNAMIC | PT_INTERP))
        .map(|p| (p.p_offset, p.p_filesz))
        .collect();
    for sh in &sections {
        let keep = match sh.sh_type {
            SHT_NOBITS | SHT_NULL => false,
            SHT_PROGBITS => {
                let at = names
                    .sh_offset
                    .checked_add(u64::try_from(sh.sh_name).ok()?)?;
                wanted_progbits(section_name(&data, at))
            }
            _ => true,
        };
        if keep {
            wanted.push((sh.sh_offset, sh.sh_size));
        }
    }
    for (off, size) in wanted {
        fill(&mut data, off, size)?;
    }
    Some(data)
}

/// `len` zero bytes that cost nothing until written.
fn zeroed(len: u64) -> Option<MmapMut> {
    MmapMut::map_anon(usize::try_from(len).ok()?.max(1)).ok()
}

/// The program-data sections read up front: debug links (DWARF is read
/// on demand from the file) and the PLT's stubs (small; `plt` decodes them).
fn wanted_progbits(name: &[u8]) -> bool {
    name == b".gnu_debuglink" || name == b".gnu_debugaltlink" || STUB_SECTIONS.contains(&name)
}

/// The NUL-terminated name at `at` (empty when out of bounds).
fn section_name(data: &[u8], at: u64) -> &[u8] {
    let rest = usize::try_from(at)
        .ok()
        .and_then(|a| data.get(a..))
        .unwrap_or_default();
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    &rest[..end]
}

/// A loadable segment: file range and where it lands in the ELF's address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// File offset of the segment.
    pub offset: u64,
    /// Bytes of the segment in the file.
    pub filesz: u64,
    /// Virtual address of its first byte.
    pub vaddr: u64,
}

/// The ELF address of the code at `file_offset`, through the segment holding it.
pub(crate) fn file_offset_to_vaddr(segments: &[Segment], file_offset: u64) -> Option<u64> {
    let seg = segments
        .iter()
        .find(|s| file_offset >= s.offset && file_offset - s.offset < s.filesz)?;
    seg.vaddr.checked_add(file_offset - seg.offset)
}

/// Whether `obj` carries `expected` as its GNU build id (any id passes when
/// `expected` is empty: nothing was recorded to compare with).
pub(crate) fn build_id_matches(obj: &Object<'_>, expected: &[u8]) -> bool {
    expected.is_empty() || obj.build_id() == Some(expected)
}

/// The `PT_LOAD` segments of an ELF image.
pub(crate) fn load_segments(data: &[u8]) -> Option<Vec<Segment>> {
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

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_has_no_segments() {
        assert!(load_segments(b"definitely not an ELF file").is_none());
        assert!(load_segments(b"\x7fELF\x02\x01\x01").is_none());
    }

    #[test]
    fn offsets_map_through_their_segment() {
        let segs = [
            Segment {
                offset: 0,
                filesz: 0x100,
                vaddr: 0x40_0000,
            },
            Segment {
                offset: 0x1000,
                filesz: 0x200,
                vaddr: 0x40_2000,
            },
        ];
        assert_eq!(file_offset_to_vaddr(&segs, 0x10), Some(0x40_0010));
        assert_eq!(file_offset_to_vaddr(&segs, 0x1010), Some(0x40_2010));
        assert_eq!(file_offset_to_vaddr(&segs, 0x800), None);
        assert_eq!(file_offset_to_vaddr(&segs, u64::MAX), None);
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
            let data = read_elf(&exe).map(|d| d.data.len()).ok();
            assert_eq!(data, std::fs::metadata(&exe).ok().map(|m| m.len() as usize));
        }
    }

    #[test]
    fn own_binary_checks_build_id() {
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(exe).expect("read");
        let obj = Object::parse(&data).expect("own binary parses");
        let own = obj
            .build_id()
            .expect("rustc links with a build id")
            .to_vec();
        assert!(build_id_matches(&obj, &own));
        assert!(build_id_matches(&obj, &[]));
        assert!(!build_id_matches(&obj, &[0xde, 0xad]));
        assert!(!build_id_matches(&obj, &own[1..]), "a prefix is another id");
        assert!(load_segments(&data).is_some_and(|s| !s.is_empty()));
    }

    #[test]
    fn sparse_read_keeps_what_symbolization_needs() {
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let full = std::fs::read(&exe).expect("read");
        let sparse = read_elf(&exe).expect("read_elf");
        assert!(sparse.dwarf_on_disk.is_some());
        let sparse = sparse.data.to_vec();
        assert_eq!(full.len(), sparse.len());
        assert_ne!(full, sparse, "code sections are skipped");
        let (ours_a, ours_b) = (
            Object::parse(&full).expect("full"),
            Object::parse(&sparse).expect("sparse"),
        );
        assert_eq!(ours_a.build_id(), ours_b.build_id());
        assert_eq!(ours_a.has_symbols(), ours_b.has_symbols());
        assert_eq!(ours_a.has_debug_info(), ours_b.has_debug_info());
        assert_eq!(ours_a.debug_link(), ours_b.debug_link());
        use symbolic_debuginfo::elf::ElfObject;
        let (a, b) = (
            ElfObject::parse(&full).expect("full"),
            ElfObject::parse(&sparse).expect("sparse"),
        );
        assert_eq!(a.code_id(), b.code_id());
        assert_eq!(a.symbol_map().len(), b.symbol_map().len());
        assert_eq!(a.has_debug_info(), b.has_debug_info());
        assert_eq!(
            a.debug_link().ok().flatten().map(|l| l.crc()),
            b.debug_link().ok().flatten().map(|l| l.crc())
        );
        assert_eq!(load_segments(&full), load_segments(&sparse));
    }
}
