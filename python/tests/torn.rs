//! The readers of another process's memory and of a binary's tables fed
//! torn and hostile values — what a process that exits or writes while it
//! is read, or a crafted file, gives them — for a bounded number of rounds
//! (a few seconds in a test build with overflow checks on): never a panic,
//! never an unbounded allocation, only errors or wrong values.

use std::io;

use flamerec_python::binary::PythonBinary;
use flamerec_python::code::{captured_str, read_str, CodeInfo};
use flamerec_python::layout::{Layout, DEBUG_OFFSETS_LEN};
use flamerec_python::{bpf, Interpreter, Memory};

/// A small deterministic generator: failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Mostly small values, sometimes extreme ones: torn words look so.
    fn word(&mut self) -> u64 {
        match self.next() % 8 {
            0 => u64::MAX - self.next() % 16,
            1 => self.next(),
            2 => 0,
            _ => self.next() % 4096,
        }
    }
}

/// Memory whose every word is made up, the same at the same address.
struct Torn(u64);

impl Memory for Torn {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        if addr % 97 == 3 {
            return Err(io::Error::other("unmapped"));
        }
        for (i, b) in buf.iter_mut().enumerate() {
            let mut r = Rng(self.0 ^ addr.wrapping_add(i as u64 / 8).wrapping_mul(0x9e37_79b9));
            *b = r.word().to_le_bytes()[i % 8];
        }
        Ok(())
    }
}

fn layouts() -> Vec<Layout> {
    (8..=12).filter_map(|m| Layout::for_version(3, m)).collect()
}

#[test]
fn torn_memory_never_panics_the_readers() {
    let mut rng = Rng(0x5eed);
    for round in 0..2_000u64 {
        let mem = Torn(rng.next() | 1);
        for layout in layouts() {
            let mut interp = Interpreter {
                version: (layout.version.0, layout.version.1, 0),
                layout: layout.clone(),
                binary: "/torn".into(),
                runtime: rng.word(),
                code_type: (round % 2 == 0).then(|| rng.word()),
                eval: Vec::new(),
                functions: Vec::new().into(),
                glue: Vec::new(),
                version_text: Some(rng.word()),
            };
            let _ = interp.learn_micro(&mem);
            let tids = [(1, 1), (rng.next() as u32, 7)];
            if let Ok(states) = interp.thread_states(&mem, &tids) {
                for t in states.iter().take(2) {
                    let _ = interp.stack(&mem, t.tstate);
                }
            }
            if round % 100 == 0 {
                // The kernel's walk, run in user space: it ends (bounded by
                // its frames) and writes a record the chain's rules cut.
                let (record, _) = bpf::walk_in_user_space(&layout, &mem, 1, 1, rng.word())
                    .unwrap_or_else(|e| panic!("{:?}: {e}", layout.version));
                let _ = record.runs(&layout);
            }
            let code = rng.word();
            if let Ok(info) = CodeInfo::read(&mem, &layout, code) {
                let _ = info.line(&layout, rng.next() as i64);
            }
            let _ = read_str(&mem, &layout, rng.word());
        }
    }
}

#[test]
fn torn_line_tables_and_names_never_panic() {
    let mut rng = Rng(0xfeed);
    for _ in 0..20_000 {
        let n = (rng.next() % 64) as usize;
        let table: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        for layout in layouts() {
            let info = CodeInfo {
                name: String::new(),
                file: String::new(),
                first_line: [i32::MAX, i32::MIN, 1, rng.next() as i32][(rng.next() % 4) as usize],
                linetable: table.clone(),
            };
            let _ = info.line(&layout, rng.next() as i64 % 512);
        }
        let header: Vec<u8> = (0..(rng.next() % 32)).map(|_| rng.next() as u8).collect();
        let _ = captured_str(&header, &table);
    }
}

#[test]
fn torn_published_offsets_and_binaries_never_panic() {
    let mut rng = Rng(0xbead);
    for _ in 0..20_000 {
        let mut b: Vec<u8> = (0..DEBUG_OFFSETS_LEN).map(|_| rng.next() as u8).collect();
        b[..8].copy_from_slice(b"xdebugpy");
        let minor = 12 + rng.next() % 5;
        b[8..16].copy_from_slice(&((3 << 24) | (minor << 16)).to_le_bytes());
        b[16..24].fill(0);
        for i in (24..b.len()).step_by(8) {
            b[i..i + 8].copy_from_slice(&rng.word().to_le_bytes());
        }
        let _ = Layout::from_debug_offsets(&b, rng.word());
        let cut = (rng.next() as usize) % b.len();
        let _ = Layout::from_debug_offsets(&b[..cut], rng.word());
    }
    // ELF-looking bytes with hostile headers.
    for _ in 0..2_000 {
        let mut b: Vec<u8> = (0..(256 + rng.next() % 4096))
            .map(|_| rng.next() as u8)
            .collect();
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        let _ = PythonBinary::parse(&b, "python3.9");
    }
}
