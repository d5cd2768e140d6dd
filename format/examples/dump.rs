//! Prints every event of a recording, for debugging: `cargo run -p flamerec-format --example dump -- FILE`.

use std::collections::BTreeMap;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: dump FILE")?;
    let rec = flamerec_format::Recording::read(std::fs::File::open(path)?)?;
    println!("{:?}", rec.metadata);
    for e in &rec.events {
        println!("{e:?}");
    }
    let mut per_thread: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for s in &rec.samples {
        *per_thread.entry((s.pid, s.tid)).or_default() += 1;
    }
    println!("samples per (pid, tid): {per_thread:?}");
    println!("modules: {:?}", rec.tables.modules);
    println!(
        "frames: {}, nodes: {}, kernel symbols: {}",
        rec.tables.frames.len(),
        rec.tables.node_count(),
        rec.tables.kernel_symbols.len()
    );
    println!("damage: {:?}", rec.damage);
    Ok(())
}
