//! DWARF sections of an ELF image, found by name and read — from memory or
//! straight from the file — and decompressed only as far as they are used.
//!
//! Debian's debug files compress every DWARF section (`SHF_COMPRESSED`,
//! zlib), and inflating libc's 5.8 MB `.debug_info` costs more than all the
//! rest of a fold. A deflate stream can only be read from its start, but it
//! can stop anywhere: [`Section::reader`] inflates just the bytes below an
//! offset, which is all a lookup needs when `.debug_aranges` says which
//! compilation units hold the sampled addresses. Compressed bytes are read
//! from the file piece by piece as the inflater consumes them.
//!
//! Handles `SHF_COMPRESSED` with zlib or zstd (ELF32 and ELF64, either byte
//! order) and GNU's older `.zdebug_*` sections. Sizes come from the file and
//! are not trusted: a section is never inflated past what its compressed
//! bytes could hold, nor past [`MAX_SECTION`]. Read errors end a section
//! early, like damage does.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use goblin::container::{Ctx, Endian};
use goblin::elf::compression_header::CompressionHeader;
use goblin::elf::header::Header;
use goblin::elf::section_header::{SectionHeader, SHF_COMPRESSED, SHT_NOBITS};
use goblin::elf::Elf;
use memmap2::MmapMut;

/// No DWARF section is inflated to more than this (libc's largest is 6 MB).
const MAX_SECTION: u64 = 1 << 30;
/// Deflate cannot expand input by more than this factor (zstd by far less
/// in practice); a header claiming more is lying.
const MAX_RATIO: u64 = 1032;
/// Compressed input is read from the file this much at a time.
const READ_PIECE: usize = 256 << 10;
/// Most bytes a buffer grows by before they are inflated into.
const GROW_STEP: usize = 4 << 20;
/// Plain sections read up to at least this far are mapped from the file
/// (whole) rather than copied (`sys`).
const MAP_ABOVE: u64 = 256 << 10;
/// Inflating at least this much into a mapping, the far pages are backed
/// by another thread meanwhile.
const PREFAULT_ABOVE: usize = 1 << 20;

use goblin::elf::compression_header::ELFCOMPRESS_ZLIB;
/// zstd in `ch_type` (gABI; newer than goblin's constants).
const ELFCOMPRESS_ZSTD: u32 = 2;

/// Where a section's stored bytes are.
#[derive(Debug, Clone)]
enum Stored<'d> {
    Memory(&'d [u8]),
    /// `len` bytes at `offset` (checked against the file's size).
    File {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
}

impl<'d> Stored<'d> {
    fn len(&self) -> u64 {
        match self {
            Stored::Memory(b) => b.len() as u64,
            Stored::File { len, .. } => *len,
        }
    }

    /// Up to `n` bytes at `at` (fewer at the end, none past it or on a read error).
    fn read(&self, at: u64, n: u64) -> Cow<'d, [u8]> {
        let n = n.min(self.len().saturating_sub(at));
        match self {
            Stored::Memory(b) => Cow::Borrowed(
                usize::try_from(at)
                    .ok()
                    .and_then(|a| b.get(a..a.checked_add(n as usize)?))
                    .unwrap_or_default(),
            ),
            Stored::File { file, offset, .. } => {
                let mut buf = vec![0u8; n as usize];
                match file.read_exact_at(&mut buf, offset.saturating_add(at)) {
                    Ok(()) => Cow::Owned(buf),
                    Err(_) => Cow::Owned(Vec::new()),
                }
            }
        }
    }

    /// All of a section stored in a file, mapped, when at least `wanted`
    /// bytes of it are (`MAP_ABOVE`); `None` to read it instead.
    fn map_whole(&self, wanted: u64) -> Option<Bytes<'d>> {
        let Stored::File { file, offset, len } = self else {
            return None;
        };
        if wanted < MAP_ABOVE {
            return None;
        }
        let n = usize::try_from(*len).ok()?;
        crate::sys::map_file(file, *offset, n)
            .ok()
            .map(Bytes::FileMapped)
    }

    /// The part after the first `skip` bytes.
    fn after(&self, skip: u64) -> Stored<'d> {
        match self {
            Stored::Memory(b) => Stored::Memory(
                usize::try_from(skip)
                    .ok()
                    .and_then(|s| b.get(s..))
                    .unwrap_or_default(),
            ),
            Stored::File { file, offset, len } => Stored::File {
                file: Arc::clone(file),
                offset: offset.saturating_add(skip),
                len: len.saturating_sub(skip),
            },
        }
    }
}

/// How a section's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Plain,
    Zlib,
    Zstd,
}

/// One section's stored bytes.
#[derive(Debug, Clone)]
pub(crate) struct Section<'d> {
    stored: Stored<'d>,
    encoding: Encoding,
    /// Size once decompressed.
    size: u64,
}

impl<'d> Section<'d> {
    /// All of the section. Damaged compressed data gives what inflated
    /// cleanly before the damage.
    pub(crate) fn full(&self) -> Bytes<'d> {
        let mut r = self.reader();
        r.read_to(self.size);
        r.into_bytes()
    }

    /// The same section, when it is read from a file (not borrowed from memory).
    pub(crate) fn into_file_backed(self) -> Option<Section<'static>> {
        match self.stored {
            Stored::File { file, offset, len } => Some(Section {
                stored: Stored::File { file, offset, len },
                encoding: self.encoding,
                size: self.size,
            }),
            Stored::Memory(_) => None,
        }
    }

    /// Its size once decompressed.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Whether the section is stored compressed.
    pub(crate) fn is_compressed(&self) -> bool {
        self.encoding != Encoding::Plain
    }

    /// Whether `other` is this section: same place in a file, same encoding.
    pub(crate) fn same_as(&self, other: &Section<'_>) -> bool {
        let place = |s: &Section<'_>| match &s.stored {
            Stored::File { offset, len, .. } => Some((*offset, *len)),
            Stored::Memory(_) => None,
        };
        place(self).is_some()
            && place(self) == place(other)
            && self.encoding == other.encoding
            && self.size == other.size
    }

    /// A reader of the section from its start, for prefixes that grow.
    pub(crate) fn reader(&self) -> Reader<'d> {
        Reader {
            section: self.clone(),
            inflater: (self.encoding == Encoding::Zlib).then(|| Inflater::new(self.stored.clone())),
            bytes: Bytes::Borrowed(&[]),
        }
    }
}

/// A section's bytes as read: borrowed from the image in memory, owned, or
/// in an anonymous mapping (inflated sections: its pages are backed by the
/// kernel only once written, so it is never zeroed, copied or reallocated).
pub(crate) enum Bytes<'d> {
    Borrowed(&'d [u8]),
    Owned(Vec<u8>),
    /// The mapping and how much of it holds data.
    Mapped(MmapMut, usize),
    /// A plain section mapped from its file, whole.
    FileMapped(memmap2::Mmap),
}

impl std::ops::Deref for Bytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Borrowed(b) => b,
            Bytes::Owned(v) => v,
            Bytes::Mapped(map, len) => map.get(..*len).unwrap_or_default(),
            Bytes::FileMapped(map) => map,
        }
    }
}

impl<'d> From<Cow<'d, [u8]>> for Bytes<'d> {
    fn from(c: Cow<'d, [u8]>) -> Self {
        match c {
            Cow::Borrowed(b) => Bytes::Borrowed(b),
            Cow::Owned(v) => Bytes::Owned(v),
        }
    }
}

/// Reads a section from its start, as far as asked, keeping what it read.
pub(crate) struct Reader<'d> {
    section: Section<'d>,
    inflater: Option<Inflater<'d>>,
    /// What was read so far.
    bytes: Bytes<'d>,
}

impl<'d> Reader<'d> {
    /// Makes sure the first `len` bytes (or the whole section) are read.
    pub(crate) fn read_to(&mut self, len: u64) {
        let len = len.min(self.section.size);
        if (self.bytes.len() as u64) >= len {
            return;
        }
        match (self.section.encoding, &mut self.inflater) {
            (Encoding::Plain, _) => {
                self.bytes = match self.section.stored.map_whole(len) {
                    Some(map) => map,
                    None => self.section.stored.read(0, len).into(),
                }
            }
            (_, Some(inf)) => inf.extend(&mut self.bytes, len, self.section.size),
            (_, None) => self.bytes = Bytes::Owned(unzstd(&self.section.stored, len)),
        }
    }

    /// What has been read so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The section read.
    pub(crate) fn section(&self) -> &Section<'d> {
        &self.section
    }

    /// The bytes read so far.
    pub(crate) fn into_bytes(self) -> Bytes<'d> {
        self.bytes
    }
}

/// A zlib stream inflated on demand.
struct Inflater<'d> {
    /// The deflate data.
    input: Stored<'d>,
    state: flate2::Decompress,
    done: bool,
    /// Input read from the file, starting at `piece_at` of `input`.
    piece: Cow<'d, [u8]>,
    piece_at: u64,
}

impl<'d> Inflater<'d> {
    fn new(input: Stored<'d>) -> Self {
        // The deflate data inside the zlib wrapper, inflated raw: the
        // wrapper's Adler-32 would cost a tenth of the time, and a damaged
        // stream shows anyway (it stops inflating; DWARF parsing checks the rest).
        let head = input.read(0, 2);
        let raw = matches!(*head, [cmf, flg]
            if cmf & 0x0f == 8 && (u16::from(cmf) << 8 | u16::from(flg)) % 31 == 0 && flg & 0x20 == 0);
        let piece = match input {
            Stored::File { .. } => Cow::Owned(Vec::new()),
            Stored::Memory(_) => Cow::Borrowed(&[][..]),
        };
        Inflater {
            input: if raw { input.after(2) } else { input },
            state: flate2::Decompress::new(!raw),
            done: false,
            piece,
            piece_at: 0,
        }
    }

    /// Makes the current piece hold the input not consumed yet: all of it
    /// when in memory, the next piece when in a file.
    fn refill(&mut self) {
        let at = self.state.total_in();
        let in_piece = at
            .checked_sub(self.piece_at)
            .filter(|&off| off < self.piece.len() as u64);
        let left = in_piece.map_or(0, |off| self.piece.len() as u64 - off);
        let wanted = match self.input {
            Stored::Memory(_) => u64::MAX,
            Stored::File { .. } => READ_PIECE as u64,
        };
        let at_end = at.saturating_add(left) >= self.input.len();
        if in_piece.is_none() || (left < (READ_PIECE as u64) / 8 && !at_end) {
            self.piece_at = at;
            match (&self.input, &mut self.piece) {
                // A file's pieces go through one buffer, allocated once.
                (Stored::File { file, offset, len }, Cow::Owned(buf)) => {
                    let n = wanted.min(len.saturating_sub(at)) as usize;
                    buf.resize(n, 0);
                    if file.read_exact_at(buf, offset.saturating_add(at)).is_err() {
                        buf.clear();
                    }
                }
                _ => self.piece = self.input.read(at, wanted),
            }
        }
    }

    /// Inflates into `out` until it holds `len` bytes or the stream ends.
    /// `size` is what the section claims to inflate to.
    fn extend(&mut self, out: &mut Bytes<'d>, len: u64, size: u64) {
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        if out.len() >= len || self.done {
            return;
        }
        // The whole section mapped at once when its size is plausible (DWARF
        // inflates to 2-5 times its zlib size; a header may claim up to
        // MAX_RATIO): no page is backed before it is written.
        let plausible = size <= self.input.len().saturating_mul(16);
        if plausible && !matches!(out, Bytes::Mapped(..)) {
            if let Ok(mut map) = usize::try_from(size)
                .map_err(|_| ())
                .and_then(|n| MmapMut::map_anon(n.max(1)).map_err(|_| ()))
            {
                // Inflating writes the mapping front to back: 2 MiB pages
                // (where transparent huge pages are allowed on request) take
                // one fault where 4 KiB pages take 512. A sixth less time to
                // inflate libc's debug info here; advice only, so a refusal is fine.
                let _ = map.advise(memmap2::Advice::HugePage);
                let have = out.len().min(map.len());
                map[..have].copy_from_slice(&out[..have]);
                *out = Bytes::Mapped(map, have);
            }
        }
        match out {
            Bytes::Mapped(map, filled) => {
                let end = len.min(map.len());
                let Some(region) = map.get_mut(*filled..end) else {
                    return;
                };
                if region.len() < PREFAULT_ABOVE {
                    *filled += self.inflate_into(region);
                    return;
                }
                // Another thread backs the far pages while this one inflates
                // into the near ones (faults are a fifth of inflating here).
                let (head, tail) = region.split_at_mut(region.len() / 4);
                let (near, ()) = rayon::join(
                    || self.inflate_into(head),
                    || {
                        for page in tail.chunks_mut(4096) {
                            page[0] = 0;
                        }
                    },
                );
                let mut got = near;
                if near == head.len() {
                    got += self.inflate_into(tail);
                }
                *filled += got;
            }
            _ => {
                // In steps, so a lying size never gets its memory zeroed at
                // once; the buffer grows geometrically.
                if let Bytes::Borrowed(b) = out {
                    *out = Bytes::Owned(b.to_vec());
                }
                let Bytes::Owned(v) = out else {
                    return;
                };
                while !self.done && v.len() < len {
                    let start = v.len();
                    v.resize(start + (len - start).min(GROW_STEP), 0);
                    let n = self.inflate_into(&mut v[start..]);
                    v.truncate(start + n);
                }
            }
        }
    }

    /// Inflates into `dst` until it is full or the stream ends; returns the bytes written.
    fn inflate_into(&mut self, dst: &mut [u8]) -> usize {
        let mut written = 0;
        while !self.done && written < dst.len() {
            let before = self.state.total_out();
            self.step(|st, rest| {
                st.decompress(rest, &mut dst[written..], flate2::FlushDecompress::None)
            });
            written += (self.state.total_out() - before) as usize;
        }
        written
    }

    /// One call into the inflater with the input not consumed yet.
    fn step(
        &mut self,
        call: impl FnOnce(
            &mut flate2::Decompress,
            &[u8],
        ) -> Result<flate2::Status, flate2::DecompressError>,
    ) {
        self.refill();
        let before = (self.state.total_in(), self.state.total_out());
        let off = usize::try_from(before.0.saturating_sub(self.piece_at)).unwrap_or(usize::MAX);
        let rest = self.piece.get(off..).unwrap_or_default();
        let status = call(&mut self.state, rest);
        self.after(status, before);
    }

    /// Ends the stream at its end, at damage, and when a call made no progress.
    fn after(
        &mut self,
        status: Result<flate2::Status, flate2::DecompressError>,
        before: (u64, u64),
    ) {
        let now = (self.state.total_in(), self.state.total_out());
        match status {
            Ok(flate2::Status::StreamEnd) | Err(_) => self.done = true,
            Ok(_) if before == now => self.done = true,
            Ok(_) => {}
        }
    }
}

fn unzstd(stored: &Stored<'_>, len: u64) -> Vec<u8> {
    use std::io::Read;
    let all = stored.read(0, stored.len());
    let mut out = Vec::new();
    if let Ok(dec) = zstd::stream::read::Decoder::with_buffer(&all[..]) {
        // A damaged frame keeps what decoded before the damage.
        let _ = dec.take(len).read_to_end(&mut out);
    }
    out
}

/// The sections of an ELF image, by name.
pub(crate) struct Sections<'d> {
    data: &'d [u8],
    /// Where section contents are read from when not `data`.
    file: Option<Arc<File>>,
    ctx: Ctx,
    headers: Vec<SectionHeader>,
    names: Option<std::ops::Range<usize>>,
}

impl<'d> Sections<'d> {
    /// Reads the section headers of `data` (the image as read, at its file
    /// offsets); section contents come from `file` when given. `None` when
    /// it is not a usable ELF image.
    pub(crate) fn parse(data: &'d [u8], file: Option<Arc<File>>) -> Option<Self> {
        Self::parse_with_header(data, file).map(|(_, s)| s)
    }

    /// [`Sections::parse`], and the file header it read.
    pub(super) fn parse_with_header(
        data: &'d [u8],
        file: Option<Arc<File>>,
    ) -> Option<(Header, Self)> {
        let (header, ctx, headers) = elf_section_headers(data)?;
        let names = headers
            .get(usize::from(header.e_shstrndx))
            .and_then(|sh| range(sh.sh_offset, sh.sh_size, data.len()));
        let sections = Sections {
            data,
            file,
            ctx,
            headers,
            names,
        };
        Some((header, sections))
    }

    /// The image these sections are in.
    pub(super) fn data(&self) -> &'d [u8] {
        self.data
    }

    /// How the image is encoded (class and byte order).
    pub(super) fn ctx(&self) -> Ctx {
        self.ctx
    }

    /// The section headers.
    pub(super) fn headers(&self) -> &[SectionHeader] {
        &self.headers
    }

    /// The name of section `sh` (empty when it cannot be read).
    pub(super) fn name(&self, sh: &SectionHeader) -> &'d [u8] {
        let names = self
            .names
            .clone()
            .and_then(|r| self.data.get(r))
            .unwrap_or_default();
        let own = names.get(sh.sh_name..).unwrap_or_default();
        &own[..own.iter().position(|&b| b == 0).unwrap_or(own.len())]
    }

    /// Whether the image is little-endian.
    pub(crate) fn little_endian(&self) -> bool {
        self.ctx.le == Endian::Little
    }

    /// The section `.debug_NAME` (or GNU's compressed `.zdebug_NAME`).
    pub(crate) fn debug(&self, name: &str) -> Option<Section<'d>> {
        for sh in &self.headers {
            if sh.sh_type == SHT_NOBITS {
                continue;
            }
            let own = self.name(sh);
            let zdebug = match own.strip_prefix(b".debug_") {
                Some(rest) if rest == name.as_bytes() => false,
                _ => match own.strip_prefix(b".zdebug_") {
                    Some(rest) if rest == name.as_bytes() => true,
                    _ => continue,
                },
            };
            let at = range(sh.sh_offset, sh.sh_size, self.data.len())?;
            let stored = match &self.file {
                Some(file) => Stored::File {
                    file: Arc::clone(file),
                    offset: at.start as u64,
                    len: (at.end - at.start) as u64,
                },
                None => Stored::Memory(self.data.get(at)?),
            };
            return if zdebug {
                gnu_compressed(stored)
            } else if sh.sh_flags & u64::from(SHF_COMPRESSED) != 0 {
                self.elf_compressed(stored)
            } else {
                Some(Section {
                    size: stored.len(),
                    stored,
                    encoding: Encoding::Plain,
                })
            };
        }
        None
    }

    /// A `SHF_COMPRESSED` section: an `Elf32_Chdr`/`Elf64_Chdr`, then the stream.
    fn elf_compressed(&self, stored: Stored<'d>) -> Option<Section<'d>> {
        let skip = CompressionHeader::size(self.ctx);
        let head = stored.read(0, skip as u64);
        let chdr = CompressionHeader::parse(&head, 0, self.ctx).ok()?;
        let encoding = match chdr.ch_type {
            ELFCOMPRESS_ZLIB => Encoding::Zlib,
            ELFCOMPRESS_ZSTD => Encoding::Zstd,
            _ => return None,
        };
        compressed(stored.after(skip as u64), encoding, chdr.ch_size)
    }
}

/// A `.zdebug_*` section: "ZLIB", the size as 8 big-endian bytes, the stream.
fn gnu_compressed(stored: Stored<'_>) -> Option<Section<'_>> {
    let head = stored.read(0, 12);
    let size = head.strip_prefix(b"ZLIB")?;
    let size = u64::from_be_bytes(size.get(..8)?.try_into().ok()?);
    compressed(stored.after(12), Encoding::Zlib, size)
}

fn compressed(stream: Stored<'_>, encoding: Encoding, size: u64) -> Option<Section<'_>> {
    let bound = stream.len().saturating_mul(MAX_RATIO).min(MAX_SECTION);
    Some(Section {
        stored: stream,
        encoding,
        size: size.min(bound),
    })
}

/// The ELF header of `data`, its parsing context and its section headers,
/// when the section header table lies inside `data`.
pub(super) fn elf_section_headers(data: &[u8]) -> Option<(Header, Ctx, Vec<SectionHeader>)> {
    let header = Elf::parse_header(data).ok()?;
    let ctx = Ctx::new(header.container().ok()?, header.endianness().ok()?);
    let headers = section_headers(data, &header, ctx)?;
    Some((header, ctx, headers))
}

fn section_headers(data: &[u8], header: &Header, ctx: Ctx) -> Option<Vec<SectionHeader>> {
    let count = usize::from(header.e_shnum);
    let entsize = usize::from(header.e_shentsize);
    let start = usize::try_from(header.e_shoff).ok()?;
    // The table must be in the file before goblin is asked to parse it.
    data.get(start..start.checked_add(count.checked_mul(entsize)?)?)?;
    SectionHeader::parse(data, start, count, ctx).ok()
}

/// `offset..offset + size` when it lies within `len` bytes.
pub(super) fn range(offset: u64, size: u64, len: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    (end <= len).then_some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(data).expect("compress");
        enc.finish().expect("finish")
    }

    /// 6 MB that compress about as well as DWARF does (2:1).
    fn sample() -> Vec<u8> {
        let mut x: u32 = 12345;
        (0..6_000_000)
            .map(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                b"abcdefghijklmnop"[(x >> 28) as usize]
            })
            .collect()
    }

    fn prefix(s: &Section<'_>, len: u64) -> Vec<u8> {
        let mut r = s.reader();
        r.read_to(len);
        r.into_bytes().to_vec()
    }

    fn check_growing_reads(s: &Section<'_>, data: &[u8]) {
        assert_eq!(prefix(s, 1000), &data[..1000]);
        assert_eq!(&s.full()[..], data);
        let mut r = s.reader();
        r.read_to(10);
        assert_eq!(r.bytes(), &data[..10]);
        r.read_to(300_000);
        assert_eq!(r.bytes(), &data[..300_000]);
        r.read_to(5_500_000); // a step bigger than GROW_STEP
        assert_eq!(r.bytes(), &data[..5_500_000]);
        r.read_to(u64::MAX);
        assert_eq!(r.bytes(), data);
    }

    #[test]
    fn prefixes_of_zlib_sections_match_the_data() {
        let data = sample();
        let z = zlib(&data);
        let s = compressed(Stored::Memory(&z), Encoding::Zlib, data.len() as u64).expect("section");
        check_growing_reads(&s, &data);
    }

    #[test]
    fn sections_in_a_file_are_read_piece_by_piece() {
        let data = sample();
        let z = zlib(&data);
        let mut f = tempfile::tempfile().expect("temp file");
        f.write_all(b"some header").expect("write");
        f.write_all(&z).expect("write");
        f.write_all(b"trailer").expect("write");
        let f = Arc::new(f);
        let stored = Stored::File {
            file: Arc::clone(&f),
            offset: 11,
            len: z.len() as u64,
        };
        let s = compressed(stored, Encoding::Zlib, data.len() as u64).expect("section");
        check_growing_reads(&s, &data);
        let plain = Section {
            stored: Stored::File {
                file: Arc::clone(&f),
                offset: 0,
                len: 11,
            },
            encoding: Encoding::Plain,
            size: 11,
        };
        assert_eq!(&plain.full()[..], b"some header");
        // A length past the end of the file reads nothing rather than junk.
        let past = Stored::File {
            file: Arc::clone(&f),
            offset: 11,
            len: z.len() as u64 + 1000,
        };
        assert!(past.read(z.len() as u64, 1000).is_empty());
    }

    #[test]
    fn lying_sizes_are_bounded_and_damage_keeps_the_good_part() {
        let data = sample();
        let z = zlib(&data);
        let s = compressed(Stored::Memory(&z), Encoding::Zlib, u64::MAX).expect("section");
        assert!(s.size <= z.len() as u64 * MAX_RATIO);
        assert_eq!(
            &s.full()[..],
            &data[..],
            "the stream's end ends the section"
        );
        let cut = &z[..z.len() / 2];
        let s =
            compressed(Stored::Memory(cut), Encoding::Zlib, data.len() as u64).expect("section");
        let got = s.full();
        assert!(!got.is_empty() && got.len() < data.len());
        assert_eq!(&got[..], &data[..got.len()]);
        let s =
            compressed(Stored::Memory(b"not zlib at all"), Encoding::Zlib, 100).expect("section");
        assert!(s.full().is_empty());
    }

    #[test]
    fn zstd_and_gnu_sections_decode() {
        let data = sample();
        let zs = zstd::bulk::compress(&data, 3).expect("zstd");
        let s =
            compressed(Stored::Memory(&zs), Encoding::Zstd, data.len() as u64).expect("section");
        assert_eq!(prefix(&s, 5000), &data[..5000]);
        assert_eq!(&s.full()[..], &data[..]);
        let mut gnu = b"ZLIB".to_vec();
        gnu.extend_from_slice(&(data.len() as u64).to_be_bytes());
        gnu.extend_from_slice(&zlib(&data));
        let g = gnu_compressed(Stored::Memory(&gnu)).expect("gnu");
        assert_eq!(&g.full()[..], &data[..]);
        assert!(gnu_compressed(Stored::Memory(b"ZLIB\0")).is_none());
    }

    #[test]
    fn own_binary_has_its_debug_info() {
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(&exe).expect("read");
        let secs = Sections::parse(&data, None).expect("sections");
        let info = secs.debug("info").expect("test binaries carry DWARF");
        assert!(info.size > 0);
        assert!(secs.debug("no_such_section").is_none());
        assert!(Sections::parse(b"\x7fELF not really", None).is_none());
        // The same sections read from the file give the same bytes.
        let file = Arc::new(std::fs::File::open(&exe).expect("open"));
        let on_disk = Sections::parse(&data, Some(file)).expect("sections");
        let from_file = on_disk.debug("abbrev").expect("abbrev").full().to_vec();
        assert_eq!(
            from_file,
            secs.debug("abbrev").expect("abbrev").full().to_vec()
        );
    }
}
