//! The chunk checksum: CRC-32 (IEEE, reflected, as zlib and `crc32fast`).
//!
//! `crc32fast` is fast on big inputs, but the first use in a process asks
//! the CPU for its features, and each `cpuid` costs microseconds in a VM:
//! 0.1 ms, 3–4% of folding a small recording. A reader's first
//! [`TABLE_BYTES`] are checked by an eight-table loop instead, which needs
//! no detection; later chunks go to `crc32fast`, so the detection is paid
//! only by files big enough not to notice it.

/// Bytes a reader checks with its own tables before handing over to
/// `crc32fast`.
pub(crate) const TABLE_BYTES: u64 = 256 << 10;

const POLY: u32 = 0xEDB8_8320;

/// `TABLES[k][b]`: the CRC of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = tables();

const fn tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][b] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

/// CRC-32 of `data` by table, continuing from `crc` (0 to start).
pub(crate) fn by_table(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ c;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        c = TABLES[7][(lo & 0xFF) as usize]
            ^ TABLES[6][((lo >> 8) & 0xFF) as usize]
            ^ TABLES[5][((lo >> 16) & 0xFF) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][(hi & 0xFF) as usize]
            ^ TABLES[2][((hi >> 8) & 0xFF) as usize]
            ^ TABLES[1][((hi >> 16) & 0xFF) as usize]
            ^ TABLES[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        c = (c >> 8) ^ TABLES[0][((c ^ u32::from(b)) & 0xFF) as usize];
    }
    !c
}

/// The checksum of a chunk's length fields and payload, by table while
/// the reader has checked fewer than [`TABLE_BYTES`] (`checked`, updated).
pub(crate) fn chunk(checked: &mut u64, lengths: &[u8], payload: &[u8]) -> u32 {
    let small = *checked < TABLE_BYTES;
    *checked = checked.saturating_add((lengths.len() + payload.len()) as u64);
    if small {
        by_table(by_table(0, lengths), payload)
    } else {
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(lengths);
        hasher.update(payload);
        hasher.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_crc32fast() {
        // Every length from 0 to 40 (all remainders of the 8-byte loop),
        // at every start offset, continued across two calls.
        let data: Vec<u8> = (0u32..300)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(by_table(0, b"123456789"), 0xCBF4_3926);
        for start in 0..8 {
            for len in 0..40 {
                let part = &data[start..start + len];
                assert_eq!(by_table(0, part), crc32fast::hash(part), "{start}+{len}");
                let (a, b) = part.split_at(len / 3);
                assert_eq!(by_table(by_table(0, a), b), crc32fast::hash(part));
            }
        }
        let mut checked = 0;
        let small = chunk(&mut checked, &data[..8], &data[8..]);
        checked = TABLE_BYTES;
        assert_eq!(small, chunk(&mut checked, &data[..8], &data[8..]));
    }
}
