use super::*;
use std::io::Write;

fn rules() -> Rules {
    Rules {
        uid: open::process_uid(std::process::id()).expect("uid"),
        max_len: 1 << 24,
        not_before: None,
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Writes jitdump bytes as the runtimes do (little-endian, version 1).
pub(crate) struct Writer(pub Vec<u8>);

impl Writer {
    pub fn new(flags: u64) -> Self {
        let mut b = Vec::new();
        b.extend_from_slice(b"DTiJ");
        for v in [1u32, 40, 62, 0, 4242] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        Writer(b)
    }

    fn record(&mut self, kind: u32, time: u64, body: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&kind.to_le_bytes());
        self.0
            .extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        self.0.extend_from_slice(&time.to_le_bytes());
        self.0.extend_from_slice(body);
        self
    }

    pub fn load(&mut self, time: u64, addr: u64, size: u64, name: &str, index: u64) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&4242u32.to_le_bytes());
        b.extend_from_slice(&4243u32.to_le_bytes());
        for v in [addr, addr, size, index] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        // The code bytes: never read as code.
        b.resize(b.len() + size as usize, 0xcc);
        self.record(0, time, &b)
    }

    pub fn moved(&mut self, time: u64, old: u64, new: u64, size: u64, index: u64) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&4242u32.to_le_bytes());
        b.extend_from_slice(&4243u32.to_le_bytes());
        for v in [new, old, new, size, index] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        self.record(1, time, &b)
    }

    pub fn debug(&mut self, time: u64, addr: u64, entries: &[(u64, u32, &[u8])]) -> &mut Self {
        let mut b = Vec::new();
        b.extend_from_slice(&addr.to_le_bytes());
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (a, line, file) in entries {
            b.extend_from_slice(&a.to_le_bytes());
            b.extend_from_slice(&line.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(file);
            b.push(0);
        }
        self.record(2, time, &b)
    }

    pub fn unwind(&mut self, time: u64, eh_frame: &[u8], hdr: &[u8]) -> &mut Self {
        let mut b = Vec::new();
        let size = (eh_frame.len() + hdr.len()) as u64;
        for v in [size, hdr.len() as u64, size] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(eh_frame);
        b.extend_from_slice(hdr);
        self.record(4, time, &b)
    }

    pub fn close(&mut self, time: u64) -> &mut Self {
        self.record(3, time, &[])
    }
}

fn dump_of(bytes: &[u8]) -> (tempfile::TempDir, JitDump) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jit-4242.dump");
    std::fs::write(&path, bytes).expect("write");
    let d = JitDump::new(&path, rules());
    (dir, d)
}

#[test]
fn two_functions_alternating_at_one_address_are_each_named_only_while_loaded() {
    const ADDR: u64 = 0x7f00_0000_1000;
    const LOADS: u64 = 200;
    let mut w = Writer::new(0);
    for i in 0..LOADS {
        let (name, size) = if i % 2 == 0 { ("f", 0x80) } else { ("g", 0x40) };
        w.load(1_000 + i * 1_000, ADDR, size, name, i);
    }
    let (_dir, mut d) = dump_of(&w.0);
    assert_eq!(d.poll(0).expect("poll"), LOADS as usize);
    assert_eq!(d.clock(), Some(Clock::Monotonic));
    let (mut right, mut wrong, mut unnamed) = (0, 0, 0);
    for t in (0..LOADS * 1_000 + 3_000).step_by(37) {
        for off in [0, 0x3f, 0x40, 0x7f] {
            let loaded = (t >= 1_000).then(|| ((t - 1_000) / 1_000).min(LOADS - 1));
            let expect = loaded.and_then(|i| match i % 2 {
                0 => Some("f"),
                _ => (off < 0x40).then_some("g"),
            });
            match (d.lookup(ADDR + off, t).map(|l| l.name.as_str()), expect) {
                (got, want) if got == want && got.is_some() => right += 1,
                (None, None) => unnamed += 1,
                _ => wrong += 1,
            }
        }
    }
    assert_eq!(wrong, 0, "{right} right, {unnamed} unnamed");
    // Without a time, the address held two names: no single one.
    let mut ever: Vec<&str> = d.loads_covering(ADDR).map(|l| l.name.as_str()).collect();
    ever.dedup();
    assert_eq!(ever.len(), LOADS as usize);
    assert!(d.loads_covering(ADDR + 0x40).all(|l| l.name == "f"));
    assert!(right > 15_000 && unnamed > 5_000, "{right} {unnamed}");
}

#[test]
fn a_dump_still_being_written_is_read_record_by_record() {
    let mut w = Writer::new(0);
    w.load(10, 0x1000, 0x10, "first", 1)
        .load(20, 0x2000, 0x10, "second", 2);
    let bytes = w.0.clone();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jit-4242.dump");
    let mut d = JitDump::new(&path, rules());
    assert_eq!(d.poll(1).expect("no file yet"), 0);
    let mut f = File::create(&path).expect("create");
    // Part of the header, then up to half of the second record.
    f.write_all(&bytes[..20]).expect("write");
    assert_eq!(d.poll(2).expect("half a header"), 0);
    let second = bytes.len() - (16 + 8 + 32 + 7 + 0x10);
    f.write_all(&bytes[20..second + 30]).expect("write");
    assert_eq!(d.poll(3).expect("one whole record"), 1);
    assert_eq!(d.loads()[0].name, "first");
    f.write_all(&bytes[second + 30..]).expect("write");
    assert_eq!(d.poll(4).expect("the rest"), 1);
    assert_eq!(
        d.lookup(0x2008, 25).map(|l| l.name.as_str()),
        Some("second")
    );
    assert_eq!(d.lookup(0x2008, 15), None);
}

#[test]
fn debug_and_unwinding_records_belong_to_the_next_load_and_move_with_it() {
    let eh = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let hdr = [9u8, 10];
    let mut w = Writer::new(0);
    w.debug(5, 0x1000, &[(0x1000, 7, b"x.js"), (0x1008, 9, &[0xff])])
        .unwind(5, &eh, &hdr)
        .load(6, 0x1000, 0x13, "JS:*f", 1)
        // A load with neither: nothing carried over.
        .load(7, 0x3000, 0x10, "JS:*g", 2)
        .moved(8, 0x1000, 0x5000, 0x13, 1)
        .moved(9, 0x9999, 0x6000, 0x13, 77)
        .close(10)
        .load(11, 0x8000, 0x10, "after close", 3);
    let (_dir, mut d) = dump_of(&w.0);
    assert_eq!(d.poll(0).expect("poll"), 3);
    let f = d.lookup(0x1009, 6).expect("f");
    assert_eq!(f.line_of(0x1003).map(|l| l.line), Some(7));
    let at = f.line_of(0x1009).expect("line");
    assert_eq!((at.line, d.file(at.file)), (9, Some("x.js")));
    let u = f.unwind.as_ref().expect("unwind info");
    assert_eq!((&u.eh_frame[..], u.eh_frame_addr), (&eh[..], 0x1018));
    assert_eq!(u.eh_frame_hdr.as_deref().map(|h| &h[..]), Some(&hdr[..]));
    assert_eq!(u.eh_frame_hdr_addr, 0x1020);
    let g = d.lookup(0x3000, 7).expect("g");
    assert!(g.lines.is_empty() && g.unwind.is_none());
    let moved = d.lookup(0x5009, 8).expect("moved");
    assert_eq!(moved.name, "JS:*f");
    assert_eq!(moved.unwind.as_ref().map(|u| u.eh_frame_addr), Some(0x5018));
    assert_eq!(moved.line_of(0x5009).map(|l| l.line), Some(9));
    // The move took the code away from its old place.
    assert!(d.lookup(0x1009, 8).is_none());
    assert!(d.lookup(0x1009, 7).is_some());
    let s = d.stats();
    assert_eq!((s.moves, s.unknown_moves, s.closed), (1, 1, true));
    assert!(d.lookup(0x8000, 20).is_none());
    assert_eq!(d.poll(20).expect("closed"), 0);
}

#[test]
fn a_dump_on_the_cpus_clock_is_timed_by_its_reads() {
    let mut w = Writer::new(FLAG_ARCH_TIMESTAMP);
    w.load(123_456_789_000, 0x1000, 0x10, "f", 1);
    let (dir, mut d) = dump_of(&w.0);
    assert_eq!(d.poll(100).expect("poll"), 1);
    assert_eq!(d.clock(), Some(Clock::ArchTimestamp));
    assert_eq!(d.lookup(0x1000, 0).map(|l| l.time), Some(0));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join("jit-4242.dump"))
        .expect("open");
    let mut more = Writer::new(0);
    more.load(5, 0x1000, 0x10, "g", 2);
    f.write_all(&more.0[40..]).expect("write");
    assert_eq!(d.poll(200).expect("poll"), 1);
    // Seen by the read at 200: named from the read before, at 100.
    assert_eq!(d.lookup(0x1000, 99).map(|l| l.name.as_str()), Some("f"));
    assert_eq!(d.lookup(0x1000, 100).map(|l| l.name.as_str()), Some("g"));
}

#[test]
fn hostile_dumps_stop_with_a_reason_and_never_panic() {
    // A record claiming less than its own header.
    let mut w = Writer::new(0);
    w.load(1, 0x1000, 0x10, "ok", 1);
    let mut bad = w.0.clone();
    bad.extend_from_slice(&0u32.to_le_bytes());
    bad.extend_from_slice(&3u32.to_le_bytes());
    bad.extend_from_slice(&[0; 8]);
    let (_dir, mut d) = dump_of(&bad);
    assert!(matches!(d.poll(0), Err(Error::Corrupt { .. })));
    assert_eq!(d.loads().len(), 1);
    // A debug record claiming 2^60 entries is skipped.
    let mut body = Vec::new();
    body.extend_from_slice(&0x1000u64.to_le_bytes());
    body.extend_from_slice(&(1u64 << 60).to_le_bytes());
    let mut w = Writer::new(0);
    w.record(2, 1, &body).load(2, 0x1000, 0x10, "f", 1);
    let (_dir, mut d) = dump_of(&w.0);
    assert_eq!(d.poll(0).expect("poll"), 1);
    assert_eq!(d.stats().skipped, 1);
    // A header claiming to be as large as the reader's buffer.
    let mut big = Writer::new(0).0;
    big[8..12].copy_from_slice(&(BUFFER as u32).to_le_bytes());
    big.resize(BUFFER + 100, 0);
    let (_dir, mut d) = dump_of(&big);
    assert!(matches!(d.poll(0), Err(Error::NotJitdump { .. })));
    // Anything after a good header: read or refused, never a panic.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..300 {
        let mut bytes = Writer::new(0).0;
        let mut w = Writer::new(0);
        w.debug(1, 0x10, &[(0x10, 1, b"f")])
            .unwind(1, &[1, 2, 3], &[4])
            .load(2, 0x10, 8, "f", 1)
            .moved(3, 0x10, 0x20, 8, 1);
        bytes.extend_from_slice(&w.0[40..]);
        for _ in 0..1 + round % 8 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = 40 + (seed as usize % (bytes.len() - 40));
            bytes[at] = (seed >> 32) as u8;
        }
        bytes.truncate(40 + (seed >> 40) as usize % (bytes.len() - 39));
        let (_dir, mut d) = dump_of(&bytes);
        let _ = d.poll(0);
        let _ = d.lookup(0x10, 5);
    }
}

#[test]
fn node_perf_prof_names_its_functions_with_lines_and_unwind_tables() {
    let mut d = JitDump::new(fixture("node20-perf-prof.dump"), rules());
    let n = d.poll(0).expect("poll");
    assert_eq!(n, 6);
    assert_eq!(d.clock(), Some(Clock::Monotonic));
    let names: Vec<&str> = d.loads().iter().map(|l| l.name.as_str()).collect();
    assert!(names.contains(&"JS:*a /tmp/jitfx/x.js:1:11"), "{names:?}");
    assert!(names.contains(&"JS:*b /tmp/jitfx/x.js:2:11"), "{names:?}");
    for l in d.loads() {
        assert_eq!(d.lookup(l.start, l.time).map(|x| &x.name), Some(&l.name));
        assert_eq!(
            d.lookup(l.end - 1, u64::MAX - 1).map(|x| &x.name),
            Some(&l.name)
        );
        assert!(d.lookup(l.start, l.time - 1).is_none());
    }
    // Optimized code has its tables: an .eh_frame that begins with a CIE
    // (id 0) and an .eh_frame_hdr (version 1) whose eh_frame_ptr, relative
    // to itself, points at the .eh_frame where it was placed.
    let opt = d
        .loads()
        .iter()
        .find(|l| l.name.starts_with("JS:*"))
        .expect("JS:*");
    let u = opt.unwind.as_ref().expect("tables");
    assert_eq!(&u.eh_frame[4..8], &[0, 0, 0, 0]);
    let hdr = u.eh_frame_hdr.as_ref().expect("hdr");
    assert_eq!(hdr[0], 1);
    let ptr = i32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    assert_eq!(
        (u.eh_frame_hdr_addr + 4).wrapping_add_signed(i64::from(ptr)),
        u.eh_frame_addr
    );
    // Baseline code (`^`) has none.
    let base = d
        .loads()
        .iter()
        .find(|l| l.name.starts_with("JS:^"))
        .expect("JS:^");
    assert!(base.unwind.is_none());
    assert!(opt.line_of(opt.start).is_some() || d.stats().debug_infos > 0);
}

#[test]
fn cpython_perf_jit_names_its_trampolines_with_their_tables() {
    let mut d = JitDump::new(fixture("python313-perf-jit.dump"), rules());
    assert_eq!(d.poll(0).expect("poll"), 5);
    assert_eq!(d.clock(), Some(Clock::Monotonic));
    let a = d
        .loads()
        .iter()
        .find(|l| l.name == "py::a:/tmp/jitfx/x.py")
        .expect("a");
    assert_eq!(a.end - a.start, 11);
    let u = a.unwind.as_ref().expect("tables");
    assert_eq!(u.eh_frame_addr, a.start + 16);
    let hdr = u.eh_frame_hdr.as_ref().expect("hdr");
    let ptr = i32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    assert_eq!(
        (u.eh_frame_hdr_addr + 4).wrapping_add_signed(i64::from(ptr)),
        u.eh_frame_addr
    );
}

#[test]
fn refused_dumps_say_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, Writer::new(0).0).expect("write");
    let link = dir.path().join("jit-1.dump");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let mut d = JitDump::new(&link, rules());
    let e = d.poll(0).expect_err("a link");
    assert!(
        matches!(
            e,
            Error::Refused {
                reason: Refusal::SymbolicLink,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("a symbolic link"), "{e}");
    assert_eq!(d.poll(1).expect("said once"), 0);
}
