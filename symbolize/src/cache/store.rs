//! The on-disk symbol cache: one file per binary, keyed by its GNU build id,
//! holding the names of every address of that binary that some fold looked
//! up (outermost function first, inlined ones after). A fold whose addresses
//! are all in the cache reads neither the binary nor its DWARF, and still
//! works after the binary was upgraded or deleted; new addresses are looked
//! up in the binary (parsing only the DWARF units they need) and added.
//!
//! # Layout of `DIR/symbols-v3/<build id hex>.sym` (little-endian)
//!
//! ```text
//! magic     "FRSYMC\0\x03"                 8 bytes
//! crc       u32: CRC-32 of everything after this field
//! flags     u32: bit 0 = names came with DWARF, bit 1 = DWARF not looked for
//! build id  u32 length + bytes (must equal the key)
//! strings   u32 count + count × (u32 length + UTF-8 bytes)
//! entries   u32 count + count × (file offset u64, u32 n,
//!                                n × (u32 string index, u32 language))
//! ```
//!
//! (v3: PLT stubs are named `callee@plt`; v2 files named them after the
//! symbol before `.plt` and are not read.)
//!
//! Files are written to a temporary file in the same directory and renamed
//! into place, so readers never see half a file. A file that fails any check
//! (magic, CRC, lengths, counts, indices, build id) is ignored and rebuilt;
//! nothing in it is used before the CRC has been checked. (No fsync: after a
//! crash a file may be empty or stale, which the checks catch.)

use std::collections::HashMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::elf::hex;
use crate::types::RawName;

const MAGIC: &[u8; 8] = b"FRSYMC\0\x03";
const SUBDIR: &str = "symbols-v3";
const FLAG_DWARF: u32 = 1;
const FLAG_DWARF_SKIPPED: u32 = 2;
/// Cache files bigger than this are not read.
const MAX_FILE: u64 = 1 << 31;

/// The known names of one binary's addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AddressTable {
    /// Names came from DWARF (inlined frames included).
    pub has_dwarf: bool,
    /// DWARF was not looked for (a `--no-inline` fold made the table), so
    /// the binary may have more to say than the table.
    pub dwarf_skipped: bool,
    /// Per file offset, the functions there, outermost first (empty: none).
    pub entries: HashMap<u64, Vec<RawName>>,
}

/// A cache directory.
#[derive(Debug, Clone)]
pub struct SymbolCache {
    dir: PathBuf,
}

impl SymbolCache {
    /// The cache under `dir` (created on first store).
    pub fn new(dir: PathBuf) -> Self {
        SymbolCache { dir }
    }

    fn path(&self, build_id: &[u8]) -> PathBuf {
        self.file(build_id, "sym")
    }

    /// The cache's file for `build_id` with extension `ext`.
    pub(super) fn file(&self, build_id: &[u8], ext: &str) -> PathBuf {
        self.dir
            .join(SUBDIR)
            .join(format!("{}.{ext}", hex(build_id)))
    }

    /// Whether an entry exists for `build_id` (not whether it is valid).
    pub fn has(&self, build_id: &[u8]) -> bool {
        !build_id.is_empty() && self.path(build_id).is_file()
    }

    /// The cached table of the binary with `build_id`, if a valid one exists.
    pub(crate) fn load(&self, build_id: &[u8]) -> Option<AddressTable> {
        if build_id.is_empty() {
            return None;
        }
        decode(&read_bounded(&self.path(build_id))?, build_id)
    }

    /// Stores `table` for `build_id`, atomically (temporary file + rename).
    pub(crate) fn store(&self, build_id: &[u8], table: &AddressTable) -> io::Result<()> {
        if build_id.is_empty() {
            return Ok(());
        }
        write_atomic(&self.path(build_id), &encode(build_id, table))
    }
}

/// A cache file's bytes; `None` when it is missing, not a file, or bigger
/// than [`MAX_FILE`].
pub(super) fn read_bounded(path: &Path) -> Option<Vec<u8>> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE {
        return None;
    }
    fs::read(path).ok()
}

/// Writes `bytes` to `path` through a temporary file in its directory
/// (created when missing), renamed into place.
pub(super) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

pub(super) fn put_u32(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&(v as u32).to_le_bytes());
}

fn encode(build_id: &[u8], table: &AddressTable) -> Vec<u8> {
    let mut strings: Vec<&str> = Vec::new();
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut entries: Vec<(&u64, &Vec<RawName>)> = table.entries.iter().collect();
    entries.sort_unstable_by_key(|(off, _)| **off);
    for (_, names) in &entries {
        for n in names.iter() {
            ids.entry(n.name.as_str()).or_insert_with(|| {
                strings.push(n.name.as_str());
                strings.len() - 1
            });
        }
    }
    let mut body = Vec::new();
    let mut flags = 0;
    if table.has_dwarf {
        flags |= FLAG_DWARF;
    }
    if table.dwarf_skipped {
        flags |= FLAG_DWARF_SKIPPED;
    }
    put_u32(&mut body, flags as usize);
    put_u32(&mut body, build_id.len());
    body.extend_from_slice(build_id);
    put_u32(&mut body, strings.len());
    for s in &strings {
        put_u32(&mut body, s.len());
        body.extend_from_slice(s.as_bytes());
    }
    put_u32(&mut body, entries.len());
    for (off, names) in entries {
        body.extend_from_slice(&off.to_le_bytes());
        put_u32(&mut body, names.len());
        for n in names {
            put_u32(&mut body, ids.get(n.name.as_str()).copied().unwrap_or(0));
            put_u32(&mut body, n.language as usize);
        }
    }
    framed(MAGIC, &body)
}

/// A cache file: `magic`, the CRC-32 of `body`, then `body`.
pub(super) fn framed(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 12);
    out.extend_from_slice(magic);
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Bounds-checked little-endian reads.
pub(super) struct Cursor<'a>(pub(super) &'a [u8]);

impl<'a> Cursor<'a> {
    /// The body of a file [`framed`] with `magic`, once its magic and CRC
    /// are checked.
    pub(super) fn checked(bytes: &'a [u8], magic: &[u8; 8]) -> Option<Self> {
        let mut c = Cursor(bytes);
        if c.take(magic.len())? != magic {
            return None;
        }
        let crc = c.u32()?;
        (crc32fast::hash(c.0) == crc).then_some(c)
    }

    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A count of items of at least `min` bytes each that the rest can hold.
    pub(super) fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= self.0.len() / min).then_some(n)
    }
}

fn decode(bytes: &[u8], build_id: &[u8]) -> Option<AddressTable> {
    let mut c = Cursor::checked(bytes, MAGIC)?;
    let flags = c.u32()?;
    let id_len = c.u32()? as usize;
    if c.take(id_len)? != build_id {
        return None;
    }
    let n = c.count(4)?;
    let mut strings = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.u32()? as usize;
        strings.push(std::str::from_utf8(c.take(len)?).ok()?);
    }
    let n = c.count(12)?;
    let mut entries = HashMap::with_capacity(n);
    for _ in 0..n {
        let off = c.u64()?;
        let k = c.count(8)?;
        let mut names = Vec::with_capacity(k);
        for _ in 0..k {
            let name = strings.get(c.u32()? as usize)?;
            names.push(RawName {
                name: (*name).to_string(),
                language: c.u32()?,
            });
        }
        entries.insert(off, names);
    }
    c.0.is_empty().then_some(AddressTable {
        has_dwarf: flags & FLAG_DWARF != 0,
        dwarf_skipped: flags & FLAG_DWARF_SKIPPED != 0,
        entries,
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

    fn sample() -> AddressTable {
        let name = |n: &str, l| RawName {
            name: n.to_string(),
            language: l,
        };
        let mut entries = HashMap::new();
        entries.insert(0x10, vec![name("outer", 2), name("inner", 2)]);
        entries.insert(0x20, vec![name("outer", 2)]);
        entries.insert(0x30, Vec::new());
        entries.insert(u64::MAX, vec![name("_ZN3foo3barE", 0)]);
        AddressTable {
            has_dwarf: true,
            dwarf_skipped: false,
            entries,
        }
    }

    #[test]
    fn round_trip_and_every_corruption_is_refused() {
        let table = sample();
        let id = [1u8, 2, 3, 4];
        let bytes = encode(&id, &table);
        assert_eq!(decode(&bytes, &id).as_ref(), Some(&table));
        assert!(decode(&bytes, &[1, 2, 3, 5]).is_none(), "other build id");
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut], &id).is_none(), "cut at {cut}");
        }
        for pos in 0..bytes.len() {
            let mut m = bytes.clone();
            m[pos] ^= 0x40;
            assert!(decode(&m, &id).is_none(), "flip at {pos}");
        }
    }

    #[test]
    fn store_then_load_and_ignore_a_corrupt_file() {
        let dir = tempfile::tempdir().expect("dir");
        let cache = SymbolCache::new(dir.path().to_path_buf());
        let table = sample();
        let id = [0xab, 0xcd];
        assert!(cache.load(&id).is_none());
        cache.store(&id, &table).expect("store");
        assert_eq!(cache.load(&id).as_ref(), Some(&table));
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
