//! Where the bytes of a recording go: each table re-encoded on its own and
//! compressed, for tuning the layout. `cargo run -p flamerec-format --example sizes -- FILE`.

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zz(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn z(b: &[u8]) -> usize {
    zstd::bulk::compress(b, 19).map_or(0, |c| c.len())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: sizes FILE")?;
    let rec = flamerec_format::Recording::read(std::fs::File::open(path)?)?;
    let t = &rec.tables;
    let n = rec.samples.len().max(1) as f64;
    let mut frames = Vec::new();
    let mut last = std::collections::HashMap::new();
    for f in &t.frames {
        varint(&mut frames, u64::from(f.module));
    }
    for f in &t.frames {
        let p: u64 = last.insert(f.module, f.address).unwrap_or(0);
        varint(&mut frames, zz(f.address.wrapping_sub(p) as i64));
    }
    let mut sorted: Vec<_> = t.frames.iter().map(|f| (f.module, f.address)).collect();
    sorted.sort_unstable();
    let mut sframes = Vec::new();
    let mut prev = (u32::MAX, 0u64);
    for &(m, _) in &sorted {
        varint(&mut sframes, u64::from(m));
    }
    for &(m, a) in &sorted {
        let p = if prev.0 == m { prev.1 } else { 0 };
        varint(&mut sframes, a.wrapping_sub(p));
        prev = (m, a);
    }
    let mut order: Vec<usize> = (0..t.frames.len()).collect();
    order.sort_unstable_by_key(|&i| (t.frames[i].module, t.frames[i].address));
    let mut rank = vec![0i64; t.frames.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as i64;
    }
    let mut snodes = Vec::new();
    let mut prev_r = 0i64;
    for id in 1..t.node_count() as u32 {
        if let Some((p, _)) = t.node(id) {
            varint(&mut snodes, u64::from(id - p));
        }
    }
    for id in 1..t.node_count() as u32 {
        if let Some((_, f)) = t.node(id) {
            varint(&mut snodes, zz(rank[f as usize] - prev_r));
            prev_r = rank[f as usize];
        }
    }
    let mut nodes = Vec::new();
    let mut prev = 0i64;
    for id in 1..t.node_count() as u32 {
        if let Some((p, _)) = t.node(id) {
            varint(&mut nodes, u64::from(id - p));
        }
    }
    for id in 1..t.node_count() as u32 {
        if let Some((_, f)) = t.node(id) {
            varint(&mut nodes, zz(i64::from(f) - prev));
            prev = i64::from(f);
        }
    }
    let mut times = Vec::new();
    let mut stacks = Vec::new();
    let mut tids = Vec::new();
    let mut pt = 0u64;
    for s in &rec.samples {
        varint(&mut times, zz((s.time_ns / 1000) as i64 - pt as i64));
        pt = s.time_ns / 1000;
        varint(&mut stacks, u64::from(s.stack));
        varint(&mut tids, u64::from(s.pid));
    }
    let mut ks = Vec::new();
    for k in &t.kernel_symbols {
        ks.extend_from_slice(k.name.as_bytes());
        varint(&mut ks, k.start);
    }
    let (single, chunks) = one_stream(&std::fs::read(std::env::args().nth(1).unwrap())?);
    println!(
        "{chunks} chunks; as one zstd stream: {single} bytes ({:.2} B/sample)",
        single as f64 / n
    );
    println!(
        "samples {}, frames {}, nodes {}, ksyms {}, file {} bytes ({:.2} B/sample)",
        rec.samples.len(),
        t.frames.len(),
        t.node_count(),
        t.kernel_symbols.len(),
        rec.bytes,
        rec.bytes as f64 / n
    );
    for (name, b) in [
        ("frames", &frames),
        ("sorted", &sframes),
        ("snodes", &snodes),
        ("nodes", &nodes),
        ("times", &times),
        ("stacks", &stacks),
        ("pids", &tids),
        ("ksyms", &ks),
    ] {
        let c = z(b);
        println!(
            "{name:8} raw {:7} zstd {:7} = {:.2} B/sample",
            b.len(),
            c,
            c as f64 / n
        );
    }
    Ok(())
}

/// Size of the file's chunk payloads compressed as one stream instead of one frame each.
#[allow(dead_code)]
pub fn one_stream(bytes: &[u8]) -> (usize, usize) {
    let mut pos = 16;
    let mut all = Vec::new();
    let mut chunks = 0;
    while pos + 16 <= bytes.len() {
        let clen = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        let ulen = u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
        let data = zstd::bulk::decompress(&bytes[pos + 16..pos + 16 + clen], ulen).unwrap();
        all.extend_from_slice(&data);
        pos += 16 + clen;
        chunks += 1;
    }
    (z(&all), chunks)
}
