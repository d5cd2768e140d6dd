//! One ELF file on disk: opens it defensively, checks it is the binary that
//! was recorded (GNU build id) and maps recorded file offsets to ELF addresses
//! through the `PT_LOAD` program headers. Symbols and DWARF are `symdata`'s.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use goblin::elf::header::{ET_DYN, ET_EXEC};
use goblin::elf::program_header::PT_LOAD;
use goblin::elf::Elf;
use memmap2::Mmap;

use super::object::Object;
use crate::types::Unusable;

/// An ELF file opened for symbolization.
#[derive(Debug)]
pub(crate) struct ElfFile {
    /// The file's bytes, mapped read-only: only the pages a lookup touches
    /// are ever read (symbol tables as far as a search goes, the names it
    /// finds), straight from the page cache (see `sys` for what mapping
    /// costs).
    pub data: Mmap,
    /// The open file, which DWARF sections are read from (inflated as far
    /// as a lookup needs them, by `sections`).
    pub file: Arc<File>,
    /// Where it was read from.
    pub path: PathBuf,
}

impl PartialEq for ElfFile {
    fn eq(&self, other: &Self) -> bool {
        self.data[..] == other.data[..]
    }
}

/// Opens the ELF executable or shared object at `path`.
///
/// Paths come from the recording, so they are not trusted: only a regular
/// file that starts like a loadable ELF image is mapped, and no more than
/// its size says (no `/dev/zero`, FIFOs or `/proc/kcore`).
pub(crate) fn read_elf(path: &Path) -> Result<ElfFile, Unusable> {
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
    let len = usize::try_from(meta.len()).map_err(|_| Unusable::NotElf)?;
    let data = crate::sys::map_file(&file, 0, len).map_err(|_| Unusable::Missing)?;
    Ok(ElfFile {
        data,
        file: Arc::new(file),
        path: path.to_path_buf(),
    })
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

/// The file offset of the code at ELF address `vaddr`, through the segment
/// holding it.
pub(crate) fn vaddr_to_file_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    let seg = segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)?;
    seg.offset.checked_add(vaddr - seg.vaddr)
}

/// Whether `obj` carries `expected` as its GNU build id (any id passes when
/// `expected` is empty: nothing was recorded to compare with).
pub(crate) fn build_id_matches(obj: &Object<'_>, expected: &[u8]) -> bool {
    expected.is_empty() || obj.build_id() == Some(expected)
}

/// The `PT_LOAD` segments of an ELF image.
pub(crate) fn load_segments(obj: &Object<'_>) -> Vec<Segment> {
    obj.program_headers()
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(|p| Segment {
            offset: p.p_offset,
            filesz: p.p_filesz,
            vaddr: p.p_vaddr,
        })
        .collect()
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
        assert!(Object::parse(b"definitely not an ELF file").is_none());
        assert!(Object::parse(b"\x7fELF\x02\x01\x01").is_none());
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
        assert!(!load_segments(&obj).is_empty());
    }

    #[test]
    fn the_mapping_shows_the_file() {
        let exe = std::env::current_exe().expect("exe");
        let full = std::fs::read(&exe).expect("read");
        let mapped = read_elf(&exe).expect("read_elf");
        assert!(mapped.data[..] == full[..]);
    }
}
