//! A chunk on its way out: its header (magic, lengths, checksum) and one
//! zstd frame, as `lib.rs` lays them out. The recording's writer and the
//! names section both frame their payloads here.

use std::io::Write;

use crate::error::FormatError;
use crate::layout::CHUNK_MAGIC;

/// Compresses `payload` into one chunk (header with lengths and checksum,
/// then one zstd frame) and writes it; returns the bytes written.
pub(crate) fn write_chunk<W: Write>(
    out: &mut W,
    payload: &[u8],
    level: i32,
) -> Result<u64, FormatError> {
    let compressed = zstd::bulk::compress(payload, level)?;
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&CHUNK_MAGIC);
    header[4..8].copy_from_slice(&(compressed.len() as u32).to_le_bytes());
    header[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[4..12]);
    crc.update(&compressed);
    header[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
    out.write_all(&header)?;
    out.write_all(&compressed)?;
    Ok((header.len() + compressed.len()) as u64)
}
