//! Reading just the unwind sections of an ELF file: headers, `.eh_frame`,
//! `.eh_frame_hdr`, `.debug_frame`, and the load segments that relate file
//! offsets to stated addresses. Only the bytes needed are read, each read
//! bounded by the file's real size.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use goblin::container::{Container, Ctx, Endian};
use goblin::elf::{program_header::PT_LOAD, Elf, ProgramHeader, SectionHeader};

/// Shared, immutable section bytes (cheap to hand to several processes).
/// The vector read is shared as it is: an `Arc<[u8]>` would copy it (the
/// `.eh_frame` of librustc_driver and libLLVM are megabytes, read once per
/// recording).
#[derive(Clone, Debug, Default)]
pub struct Bytes(pub Arc<Vec<u8>>);

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// A loadable segment: where file bytes land in the stated address space.
#[derive(Debug, Clone, Copy)]
pub struct Segment {
    /// File offset.
    pub offset: u64,
    /// Stated virtual address.
    pub vaddr: u64,
    /// Bytes in the file.
    pub filesz: u64,
    /// The segment holds code.
    pub exec: bool,
}

/// The unwind data of one ELF file.
#[derive(Debug, Clone, Default)]
pub struct UnwindSections {
    /// Load segments.
    pub segments: Vec<Segment>,
    /// `.eh_frame` address range and bytes.
    pub eh_frame: Option<(Range<u64>, Bytes)>,
    /// `.eh_frame_hdr` address range and bytes.
    pub eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    /// `.debug_frame` bytes.
    pub debug_frame: Option<Bytes>,
    /// `.text` address range.
    pub text: Option<Range<u64>>,
    /// `.got` address range.
    pub got: Option<Range<u64>>,
    /// The ELF entry point (stated address), where a process or the dynamic
    /// loader starts: nothing calls it, so a stack ending there is whole.
    pub entry: Option<u64>,
    /// Stated address ranges whose CFA is kept in a register framehop does
    /// not follow, sorted (filled by the unwinder when it loads the file).
    pub cfa_elsewhere: Vec<Range<u64>>,
}

impl UnwindSections {
    /// Stated address of a file offset, through the segment holding it.
    /// Stated address of the start of an executable mapping at file offset
    /// `offset`. Mappings start at page boundaries, so `offset` may lie up to
    /// a page before the code segment's own file offset, inside the page it
    /// shares with the segment before: the code segment decides.
    pub fn svma_of_exec_mapping(&self, offset: u64) -> Option<u64> {
        const PAGE: u64 = 4096;
        let holds =
            |s: &&Segment| offset >= s.offset & !(PAGE - 1) && offset < s.offset + s.filesz.max(1);
        self.segments
            .iter()
            .filter(|s| s.exec)
            .find(holds)
            .or_else(|| self.segments.iter().find(holds))
            .map(|s| s.vaddr.wrapping_add(offset).wrapping_sub(s.offset))
    }

    /// Whether any unwind information was found.
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }
}

/// Where the bytes come from: a file on disk or a memory image.
pub trait Source {
    /// Total size.
    fn size(&self) -> u64;
    /// Reads `len` bytes at `offset`, `None` when out of range or unreadable.
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>>;
}

impl Source for File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        if offset.checked_add(len)? > Source::size(self) {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        self.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }
}

impl Source for [u8] {
    fn size(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read(&self, offset: u64, len: u64) -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.get(start..end).map(<[u8]>::to_vec)
    }
}

/// Reads the unwind sections of a 64-bit little-endian ELF file; `None` for
/// anything else or anything malformed.
pub fn read_unwind_sections<S: Source + ?Sized>(src: &S) -> Option<UnwindSections> {
    let head = src.read(0, 64)?;
    let header = Elf::parse_header(&head).ok()?;
    if header.e_ident[goblin::elf::header::EI_CLASS] != goblin::elf::header::ELFCLASS64
        || header.e_ident[goblin::elf::header::EI_DATA] != goblin::elf::header::ELFDATA2LSB
    {
        return None;
    }
    let ctx = Ctx::new(Container::Big, Endian::Little);
    let ph_bytes = src.read(header.e_phoff, u64::from(header.e_phnum) * 56)?;
    let phdrs = ProgramHeader::parse(&ph_bytes, 0, usize::from(header.e_phnum), ctx).ok()?;
    let segments = phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .map(|p| Segment {
            offset: p.p_offset,
            vaddr: p.p_vaddr,
            filesz: p.p_filesz,
            exec: p.p_flags & goblin::elf::program_header::PF_X != 0,
        })
        .collect();
    let mut out = UnwindSections {
        segments,
        entry: (header.e_entry != 0).then_some(header.e_entry),
        ..Default::default()
    };
    let sh_bytes = src.read(header.e_shoff, u64::from(header.e_shnum) * 64)?;
    let shdrs = SectionHeader::parse_from(&sh_bytes, 0, usize::from(header.e_shnum), ctx).ok()?;
    let strtab = shdrs.get(usize::from(header.e_shstrndx))?;
    let names = src.read(strtab.sh_offset, strtab.sh_size)?;
    let name_of = |sh: &SectionHeader| -> &[u8] {
        let start = sh.sh_name;
        let rest = names.get(start..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    };
    const SHT_NOBITS: u32 = 8;
    const SHF_COMPRESSED: u64 = 0x800;
    for sh in &shdrs {
        let range = sh.sh_addr..sh.sh_addr.saturating_add(sh.sh_size);
        let data = || {
            if sh.sh_type == SHT_NOBITS || sh.sh_flags & SHF_COMPRESSED != 0 {
                return None;
            }
            src.read(sh.sh_offset, sh.sh_size)
                .map(|v| Bytes(Arc::new(v)))
        };
        match name_of(sh) {
            b".eh_frame" => out.eh_frame = data().map(|d| (range, d)),
            b".eh_frame_hdr" => out.eh_frame_hdr = data().map(|d| (range, d)),
            b".debug_frame" => out.debug_frame = data(),
            b".text" => out.text = Some(range),
            b".got" => out.got = Some(range),
            _ => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_unwind_sections_of_this_test_binary() {
        let f = File::open("/proc/self/exe").unwrap();
        let s = read_unwind_sections(&f).expect("an ELF file");
        assert!(s.has_cfi(), "{s:?}");
        assert!(s.eh_frame_hdr.is_some());
        assert!(!s.segments.is_empty());
        // The code segment's page-aligned start maps back into it, even
        // when that page also holds the end of the segment before.
        let seg = s.segments.iter().find(|g| g.exec).unwrap();
        let page_off = seg.offset & !4095;
        assert_eq!(
            s.svma_of_exec_mapping(page_off),
            Some(seg.vaddr - (seg.offset - page_off))
        );
    }

    #[test]
    fn garbage_is_not_an_elf_file() {
        let junk = [0x7fu8; 200];
        assert!(read_unwind_sections(&junk[..]).is_none());
        assert!(read_unwind_sections(&b"\x7fELF"[..]).is_none());
    }
}
