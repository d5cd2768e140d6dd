//! Names file offsets of one binary cold, inlined functions included, the
//! way a fold names the distinct user frames of a recording (no symbol
//! cache). `bench/run` times it against binutils' `addr2line -f -i` on the
//! same code addresses.
//!
//! ```text
//! name_offsets BINARY < OFFSETS    # one hexadecimal file offset per line
//! ```
//!
//! Prints `offsets names seconds`: the offsets read, the names they expand
//! to (inlined frames count one each), and the seconds naming took.

use std::io::{self, BufRead};
use std::time::Instant;

use flamerec_format::{Frame, FrameId, Module, ModuleKind, Tables};
use flamerec_symbolize::{symbolize, NameOptions, Prefetch};

fn main() {
    if let Err(e) = run() {
        eprintln!("name_offsets: error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: name_offsets BINARY < OFFSETS")?;
    let mut tables = Tables::default();
    tables.modules.push(Module {
        kind: ModuleKind::File,
        path,
        build_id: Vec::new(),
    });
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading offsets: {e}"))?;
        let hex = line.trim().trim_start_matches("0x");
        if hex.is_empty() {
            continue;
        }
        let address =
            u64::from_str_radix(hex, 16).map_err(|_| format!("not a hex offset: {line:?}"))?;
        tables.frames.push(Frame { module: 0, address });
    }
    let used: Vec<FrameId> = (0..tables.frames.len() as FrameId).collect();
    let opts = NameOptions {
        inline: true,
        ..Default::default()
    };
    let start = Instant::now();
    let symbols = symbolize(&tables, &used, &opts, &Prefetch::default(), None);
    let seconds = start.elapsed().as_secs_f64();
    for w in &symbols.warnings {
        eprintln!("name_offsets: warning: {w}");
    }
    let names: usize = symbols.frames.iter().map(Vec::len).sum();
    println!("{} {names} {seconds:.4}", used.len());
    Ok(())
}
