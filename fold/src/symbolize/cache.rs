//! The on-disk symbol cache: one file per binary, keyed by its GNU build id,
//! holding its [`SymbolData`] (segments + SymCache). Folding a second
//! recording of the same binaries then reads these files instead of parsing
//! DWARF, and still works after the binary was upgraded or deleted.
//!
//! # Layout of `DIR/symbols-v1/<build id hex>.sym` (little-endian)
//!
//! ```text
//! magic     "FRSYMC\0\x01"              8 bytes
//! crc       u32: CRC-32 of everything after this field
//! symcache  u32: SymCache format version it was written with
//! flags     u32: bit 0 = built with DWARF
//! load      u64: load address the SymCache is relative to
//! build id  u32 length + bytes (must equal the key)
//! segments  u32 count + count × (offset u64, filesz u64, vaddr u64)
//! cache     u64 length + SymCache bytes (exactly the rest of the file)
//! ```
//!
//! Files are written to a temporary file in the same directory and renamed
//! into place, so readers never see half a file. A file that fails any check
//! (magic, CRC, lengths, build id, SymCache version or parse) is ignored and
//! rebuilt; nothing in it is used before the CRC has been checked. (No
//! fsync: after a crash a file may be empty or stale, which the checks catch.)

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::elf::{hex, Segment};
use super::symdata::SymbolData;

const MAGIC: &[u8; 8] = b"FRSYMC\0\x01";
const SUBDIR: &str = "symbols-v1";
const FLAG_DWARF: u32 = 1;
/// Cache files bigger than this are not read (a SymCache of a huge binary
/// stays well below).
const MAX_FILE: u64 = 1 << 32;

/// A cache directory.
#[derive(Debug, Clone)]
pub(crate) struct SymbolCache {
    dir: PathBuf,
}

impl SymbolCache {
    /// The cache under `dir` (created on first store).
    pub(crate) fn new(dir: PathBuf) -> Self {
        SymbolCache { dir }
    }

    fn path(&self, build_id: &[u8]) -> PathBuf {
        self.dir.join(SUBDIR).join(format!("{}.sym", hex(build_id)))
    }

    /// The cached symbol data of the binary with `build_id`, if a valid entry exists.
    pub(crate) fn load(&self, build_id: &[u8]) -> Option<SymbolData> {
        if build_id.is_empty() {
            return None;
        }
        let path = self.path(build_id);
        let meta = fs::metadata(&path).ok()?;
        if !meta.is_file() || meta.len() > MAX_FILE {
            return None;
        }
        let bytes = fs::read(&path).ok()?;
        let data = decode(&bytes, build_id)?;
        data.view()?;
        Some(data)
    }

    /// Stores `data` for `build_id`, atomically (temporary file + rename).
    pub(crate) fn store(&self, build_id: &[u8], data: &SymbolData) -> io::Result<()> {
        if build_id.is_empty() {
            return Ok(());
        }
        let path = self.path(build_id);
        let dir = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(dir)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .suffix(".sym")
            .tempfile_in(dir)?;
        tmp.write_all(&encode(build_id, data))?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    }
}

fn encode(build_id: &[u8], data: &SymbolData) -> Vec<u8> {
    let mut body = Vec::with_capacity(data.symcache.len() + 64);
    body.extend_from_slice(&symbolic_symcache::SYMCACHE_VERSION.to_le_bytes());
    let flags = if data.has_dwarf { FLAG_DWARF } else { 0 };
    body.extend_from_slice(&flags.to_le_bytes());
    body.extend_from_slice(&data.load_address.to_le_bytes());
    body.extend_from_slice(&(build_id.len() as u32).to_le_bytes());
    body.extend_from_slice(build_id);
    body.extend_from_slice(&(data.segments.len() as u32).to_le_bytes());
    for s in &data.segments {
        for v in [s.offset, s.filesz, s.vaddr] {
            body.extend_from_slice(&v.to_le_bytes());
        }
    }
    body.extend_from_slice(&(data.symcache.len() as u64).to_le_bytes());
    body.extend_from_slice(&data.symcache);

    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Bounds-checked little-endian reads.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

fn decode(bytes: &[u8], build_id: &[u8]) -> Option<SymbolData> {
    let mut c = Cursor(bytes);
    if c.take(MAGIC.len())? != MAGIC {
        return None;
    }
    let crc = c.u32()?;
    if crc32fast::hash(c.0) != crc {
        return None;
    }
    if c.u32()? != symbolic_symcache::SYMCACHE_VERSION {
        return None;
    }
    let flags = c.u32()?;
    let load_address = c.u64()?;
    let id_len = c.u32()? as usize;
    if c.take(id_len)? != build_id {
        return None;
    }
    let n = c.u32()? as usize;
    // Each segment is 24 bytes: refuse counts the rest cannot hold.
    if n > c.0.len() / 24 {
        return None;
    }
    let mut segments = Vec::with_capacity(n);
    for _ in 0..n {
        segments.push(Segment {
            offset: c.u64()?,
            filesz: c.u64()?,
            vaddr: c.u64()?,
        });
    }
    let len = usize::try_from(c.u64()?).ok()?;
    if len != c.0.len() {
        return None;
    }
    Some(SymbolData {
        segments,
        load_address,
        has_dwarf: flags & FLAG_DWARF != 0,
        // Own allocation: SymCache wants its bytes 8-byte aligned.
        symcache: c.0.to_vec(),
    })
}

/// The default cache directory, `$HOME/.cache/flamerec`; `None` without `$HOME`.
pub fn default_dir() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(Path::new(&home).join(".cache").join("flamerec"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SymbolData {
        let exe = std::env::current_exe().expect("exe");
        let bin = fs::read(exe).expect("read exe");
        SymbolData::build(&bin, None).expect("symbol data of the test binary")
    }

    #[test]
    fn round_trip_and_every_corruption_is_refused() {
        let data = sample();
        let id = [1u8, 2, 3, 4];
        let bytes = encode(&id, &data);
        assert_eq!(decode(&bytes, &id).as_ref(), Some(&data));
        assert!(decode(&bytes, &[1, 2, 3, 5]).is_none(), "other build id");
        for cut in [0, 7, 8, 12, 40, bytes.len() - 1] {
            assert!(decode(&bytes[..cut], &id).is_none(), "cut at {cut}");
        }
        // Flip bytes all over the header and some in the SymCache.
        let step = (bytes.len() / 500).max(1);
        for pos in (0..64).chain((64..bytes.len()).step_by(step)) {
            let mut m = bytes.clone();
            m[pos] ^= 0x40;
            assert!(decode(&m, &id).is_none(), "flip at {pos}");
        }
    }

    #[test]
    fn store_then_load_and_ignore_a_corrupt_file() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = SymbolCache::new(dir.path().to_path_buf());
        let data = sample();
        let id = [0xab, 0xcd];
        assert!(cache.load(&id).is_none());
        cache.store(&id, &data).expect("store");
        assert_eq!(cache.load(&id).as_ref(), Some(&data));
        let path = cache.path(&id);
        let mut bytes = fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).expect("write");
        assert!(cache.load(&id).is_none());
        fs::write(&path, b"").expect("write");
        assert!(cache.load(&id).is_none());
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(path.parent().expect("parent"))
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
