//! What each zstd level costs on a recording's own chunks: every chunk
//! decompressed, then compressed again at each level, timing the CPU of the
//! compression alone. For choosing the recorder's level (bench/rows/95-zstd.sh):
//! `cargo run --release -p flamerec-format --example levels -- FILE...`.
//!
//! Prints one line per level: the level, the compressed bytes of all chunks,
//! and the nanoseconds of compression per chunk payload byte.

use std::time::Instant;

/// `FRCK`, compressed length, payload length, CRC: the chunk header.
const HEADER: usize = 16;

fn chunks(file: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    // The header and metadata precede the first chunk: find it by its magic.
    while at + HEADER <= file.len() {
        if &file[at..at + 4] != b"FRCK" {
            at += 1;
            continue;
        }
        let len = u32::from_le_bytes(file[at + 4..at + 8].try_into().unwrap_or([0; 4])) as usize;
        let Some(body) = file.get(at + HEADER..at + HEADER + len) else {
            break;
        };
        match zstd::bulk::decompress(body, 64 << 20) {
            Ok(payload) => {
                out.push(payload);
                at += HEADER + len;
            }
            Err(_) => at += 1,
        }
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut payloads = Vec::new();
    for path in std::env::args().skip(1) {
        payloads.extend(chunks(&std::fs::read(path)?));
    }
    let raw: usize = payloads.iter().map(Vec::len).sum();
    println!("chunks {} payload_bytes {raw}", payloads.len());
    for level in [1, 2, 3, 4, 5, 6, 7, 9, 12, 15, 19] {
        let mut bytes = 0;
        let mut best = f64::MAX;
        // The least of three passes: the machine is shared.
        for _ in 0..3 {
            let start = Instant::now();
            bytes = 0;
            for p in &payloads {
                bytes += zstd::bulk::compress(p, level)?.len() + HEADER;
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "level {level} bytes {bytes} ns_per_payload_byte {:.2}",
            best * 1e9 / raw.max(1) as f64
        );
    }
    Ok(())
}
