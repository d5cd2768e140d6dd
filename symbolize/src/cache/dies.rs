//! Where a binary's DWARF functions are ([`DieIndex`]), beside its names in
//! the symbol cache: a later fold that meets new addresses in a unit
//! already walked reads only the functions holding them.
//!
//! # Layout of `DIR/symbols-v3/<build id hex>.dies` (little-endian)
//!
//! ```text
//! magic     "FRDIES\0\x01"                 8 bytes
//! crc       u32: CRC-32 of everything after this field
//! build id  u32 length + bytes (must equal the key)
//! info len  u64: uncompressed size of the .debug_info it describes
//! units     u32: 1 when the CU table follows, else 0;
//!           then u32 count + count × (begin u64, end u64, unit u64)
//! functions u32 count of units + per unit (unit u64, u32 n,
//!           n × (begin u64, end u64, entry u64))
//! ```
//!
//! Written and checked like the names file (`store`): atomically, and a
//! file failing any check is ignored and rebuilt.

use std::collections::BTreeMap;
use std::io;

use super::store::{framed, put_u32, read_bounded, write_atomic, Cursor, SymbolCache};
use crate::dwarf::{Arange, DieIndex, FunctionRange};

const MAGIC: &[u8; 8] = b"FRDIES\0\x01";
const EXT: &str = "dies";

impl SymbolCache {
    /// The DWARF layout cached for `build_id`, if a valid one exists.
    pub(crate) fn load_dies(&self, build_id: &[u8]) -> Option<DieIndex> {
        if build_id.is_empty() {
            return None;
        }
        decode(&read_bounded(&self.file(build_id, EXT))?, build_id)
    }

    /// Stores `dies` for `build_id`, atomically.
    pub(crate) fn store_dies(&self, build_id: &[u8], dies: &DieIndex) -> io::Result<()> {
        if build_id.is_empty() {
            return Ok(());
        }
        write_atomic(&self.file(build_id, EXT), &encode(build_id, dies))
    }
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn encode(build_id: &[u8], dies: &DieIndex) -> Vec<u8> {
    let mut body = Vec::new();
    put_u32(&mut body, build_id.len());
    body.extend_from_slice(build_id);
    put_u64(&mut body, dies.info_len);
    match &dies.units {
        Some(units) => {
            put_u32(&mut body, 1);
            put_u32(&mut body, units.len());
            for u in units {
                for v in [u.begin, u.end, u.unit] {
                    put_u64(&mut body, v);
                }
            }
        }
        None => put_u32(&mut body, 0),
    }
    put_u32(&mut body, dies.functions.len());
    for (&unit, functions) in &dies.functions {
        put_u64(&mut body, unit);
        put_u32(&mut body, functions.len());
        for f in functions {
            for v in [f.begin, f.end, f.entry] {
                put_u64(&mut body, v);
            }
        }
    }
    framed(MAGIC, &body)
}

fn decode(bytes: &[u8], build_id: &[u8]) -> Option<DieIndex> {
    let mut c = Cursor::checked(bytes, MAGIC)?;
    let id_len = c.u32()? as usize;
    if c.take(id_len)? != build_id {
        return None;
    }
    let info_len = c.u64()?;
    let units = match c.u32()? {
        0 => None,
        1 => Some(sorted_triples(&mut c, |begin, end, unit| Arange {
            begin,
            end,
            unit,
        })?),
        _ => return None,
    };
    let n = c.count(12)?;
    let mut functions = BTreeMap::new();
    for _ in 0..n {
        let unit = c.u64()?;
        let list = sorted_triples(&mut c, |begin, end, entry| FunctionRange {
            begin,
            end,
            entry,
        })?;
        functions.insert(unit, list);
    }
    c.0.is_empty().then_some(DieIndex {
        info_len,
        units,
        functions,
        changed: false,
    })
}

/// A u32 count, then that many (u64, u64, u64) made into `T`s, which must
/// come sorted (lookups binary-search them).
fn sorted_triples<T: Ord>(c: &mut Cursor<'_>, make: impl Fn(u64, u64, u64) -> T) -> Option<Vec<T>> {
    let n = c.count(24)?;
    let mut list = Vec::with_capacity(n);
    for _ in 0..n {
        list.push(make(c.u64()?, c.u64()?, c.u64()?));
    }
    list.is_sorted().then_some(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DieIndex {
        let mut dies = DieIndex::new(4096);
        dies.units = Some(vec![Arange {
            begin: 0x1000,
            end: 0x2000,
            unit: 0,
        }]);
        let f = |begin, end, entry| FunctionRange { begin, end, entry };
        dies.functions
            .insert(0, vec![f(0x1000, 0x1100, 40), f(0x1100, 0x1800, 90)]);
        dies.functions.insert(700, vec![]);
        dies
    }

    #[test]
    fn round_trip_and_every_corruption_is_refused() {
        let id = [0xab, 0xcd];
        let dies = sample();
        let bytes = encode(&id, &dies);
        assert_eq!(decode(&bytes, &id), Some(dies.clone()));
        assert_eq!(decode(&bytes, &[0xab]), None, "another build id");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x20;
            assert_eq!(decode(&bad, &id), None, "byte {i} flipped");
        }
        for n in 0..bytes.len() {
            assert_eq!(decode(&bytes[..n], &id), None, "cut at {n}");
        }
        let no_units = DieIndex {
            units: None,
            ..dies
        };
        assert_eq!(decode(&encode(&id, &no_units), &id), Some(no_units));
    }

    #[test]
    fn stored_beside_the_names_and_loaded_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cache = SymbolCache::new(dir.path().to_path_buf());
        assert_eq!(cache.load_dies(&[1, 2]), None);
        cache.store_dies(&[1, 2], &sample()).expect("store");
        assert_eq!(cache.load_dies(&[1, 2]), Some(sample()));
        assert_eq!(cache.load_dies(&[]), None);
    }
}
