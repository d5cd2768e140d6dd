//! Round trip, truncation and corruption tests of the `.frec` reader and writer.

use flamerec_format::{
    Damage, Event, FormatError, Frame, Identity, KernelSymbol, Mapping, Metadata, Module,
    ModuleKind, Recording, Sample, Summary, Totals, Writer,
};

/// Small deterministic generator so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn meta() -> Metadata {
    Metadata {
        command: vec!["sample".into(), "--units".into(), "3".into()],
        target: "command".into(),
        host: "test".into(),
        kernel_release: "6.0".into(),
        start_unix_ns: 1,
        event: "cpu-clock".into(),
        frequency_hz: 999,
        call_graph: "fp".into(),
        weight_unit: "samples".into(),
        flamerec_version: "0".into(),
        embeds_names: false,
        window: None,
    }
}

/// Writes a multi-chunk recording and returns (bytes, samples written).
/// What the test wrote for one sample: pid, tid, frames (module, address) root first, weight.
type Written = (u32, u32, Vec<(u32, u64)>, u64);

fn synthetic(chunks: usize) -> (Vec<u8>, Vec<Written>) {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut w = Writer::new(Vec::new(), &meta()).unwrap();
    let kernel = w.module(&Module {
        kind: ModuleKind::Kernel,
        path: "[kernel.kallsyms]".into(),
        build_id: vec![],
    });
    let exe = w.module(&Module {
        kind: ModuleKind::File,
        path: "/usr/bin/prog".into(),
        build_id: vec![1, 2, 3, 4],
    });
    w.kernel_symbol(&KernelSymbol {
        start: 0xffff_ffff_8100_0000,
        size: 0x100,
        name: "vfs_read".into(),
        module: String::new(),
    });
    w.comm(0, 100, 100, "prog", true);
    w.mapping(&Mapping {
        time_ns: 0,
        pid: 100,
        start: 0x5555_0000,
        end: 0x5556_0000,
        pgoff: 0x1000,
        module: exe,
    });
    let mut expected = Vec::new();
    let mut t = 0u64;
    for c in 0..chunks {
        for _ in 0..300 {
            t += 1_000_000 + rng.below(50_000);
            let depth = 1 + rng.below(6) as usize;
            let mut frames = Vec::new();
            for d in 0..depth {
                let (m, a) = if d == depth - 1 && rng.below(3) == 0 {
                    (kernel, 0xffff_ffff_8100_0000 + rng.below(0x100))
                } else {
                    (exe, 0x1000 + d as u64 * 0x40 + rng.below(4))
                };
                frames.push((m, a));
            }
            let ids: Vec<_> = frames
                .iter()
                .map(|&(module, address)| w.frame(Frame { module, address }))
                .collect();
            let stack = w.stack(&ids);
            let tid = 100 + rng.below(3) as u32;
            let weight = 1 + rng.below(2);
            w.sample(Sample {
                time_ns: t,
                pid: 100,
                tid,
                stack,
                weight,
            });
            expected.push((100, tid, frames, weight));
        }
        if c == 1 {
            w.lost(t, 7);
            w.fork(t, 200, 100, 200, 100);
            w.comm(t, 200, 200, "child", false);
            w.exit(t, 200, 200);
        }
        w.flush().unwrap();
    }
    let out = w
        .finish(Totals {
            lost_samples: 7,
            duration_ns: t,
            processes: 2,
            threads: 4,
            ..Default::default()
        })
        .unwrap();
    (out, expected)
}

#[test]
fn round_trip_keeps_every_sample_and_stack() {
    let (bytes, expected) = synthetic(4);
    let rec = Recording::read(&bytes[..]).unwrap();
    assert!(rec.damage.is_none(), "{:?}", rec.damage);
    assert_eq!(rec.metadata, meta());
    let totals = rec.totals.as_ref().unwrap();
    assert_eq!(totals.samples, expected.len() as u64);
    assert_eq!(totals.weight, expected.iter().map(|e| e.3).sum::<u64>());
    assert_eq!(rec.lost_samples(), 7);
    assert_eq!(rec.samples.len(), expected.len());
    for (s, (pid, tid, frames, weight)) in rec.samples.iter().zip(&expected) {
        assert_eq!((s.pid, s.tid, s.weight), (*pid, *tid, *weight));
        let got: Vec<(u32, u64)> = rec
            .tables
            .stack_frames(s.stack)
            .map(|f| (f.module, f.address))
            .collect();
        let want: Vec<(u32, u64)> = frames.iter().rev().copied().collect();
        assert_eq!(got, want);
    }
    // Times keep microsecond resolution and order.
    assert!(rec.samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert_eq!(rec.tables.modules[1].build_id, vec![1, 2, 3, 4]);
    assert_eq!(rec.tables.kernel_symbols[0].name, "vfs_read");
    assert!(rec
        .events
        .iter()
        .any(|e| matches!(e, Event::Comm { name, .. } if name == "child")));
    assert!(rec
        .events
        .iter()
        .any(|e| matches!(e, Event::Mapping(m) if m.pgoff == 0x1000)));
}

#[test]
fn stacks_are_interned() {
    let mut w = Writer::new(Vec::new(), &meta()).unwrap();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: "/bin/x".into(),
        build_id: vec![],
    });
    let a = w.frame(Frame {
        module: m,
        address: 1,
    });
    let b = w.frame(Frame {
        module: m,
        address: 2,
    });
    let s1 = w.stack(&[a, b]);
    let s2 = w.stack(&[a, b]);
    let s3 = w.stack(&[a]);
    assert_eq!(s1, s2);
    assert_ne!(s1, s3);
    // Whatever the stack before (a prefix, another root, a longer one, none),
    // a stack interns to the same node.
    let s4 = w.stack(&[b, a]);
    assert_ne!(s4, s1);
    assert_eq!(w.stack(&[a, b, a]), w.stack(&[a, b, a]));
    assert_eq!(w.stack(&[a, b]), s1);
    assert_eq!(w.stack(&[]), 0);
    assert_eq!(w.stack(&[a]), s3);
    assert_eq!(w.stack(&[b, a]), s4);
    assert_eq!(w.stack(&[a, b]), s1);
    assert_eq!(
        w.frame(Frame {
            module: m,
            address: 1
        }),
        a
    );
}

#[test]
fn truncation_at_every_byte_yields_the_complete_prefix() {
    let (bytes, expected) = synthetic(3);
    let full = Recording::read(&bytes[..]).unwrap();
    let mut last_samples = 0;
    for cut in 0..bytes.len() {
        match Recording::read(&bytes[..cut]) {
            Ok(rec) => {
                assert!(
                    matches!(rec.damage, Some(Damage::Truncated { .. })),
                    "cut at {cut}: {:?}",
                    rec.damage
                );
                assert!(rec.totals.is_none());
                // Only whole chunks: never more than at a longer cut, and a prefix of the full samples.
                assert!(rec.samples.len() >= last_samples);
                assert_eq!(rec.samples[..], full.samples[..rec.samples.len()]);
                last_samples = rec.samples.len();
            }
            Err(e) => assert!(
                matches!(
                    e,
                    FormatError::Empty | FormatError::NotFrec | FormatError::NoData(_)
                ),
                "cut at {cut}: {e}"
            ),
        }
    }
    assert!(last_samples >= expected.len() * 2 / 3);
}

#[test]
fn bit_flips_never_panic_and_never_invent_samples() {
    let (bytes, expected) = synthetic(3);
    let mut rng = Rng(42);
    for _ in 0..3000 {
        let mut b = bytes.clone();
        let flips = 1 + rng.below(4);
        for _ in 0..flips {
            let i = rng.below(b.len() as u64) as usize;
            b[i] ^= 1 << rng.below(8);
        }
        if let Ok(rec) = Recording::read(&b[..]) {
            assert!(rec.samples.len() <= expected.len());
            // Damage is reported unless the flip hit bytes no check covers (the header's reserved field).
            if rec.damage.is_none() {
                assert_eq!(rec.samples.len(), expected.len());
            }
        }
    }
}

#[test]
fn random_bytes_are_refused() {
    let mut rng = Rng(7);
    for len in [0usize, 1, 7, 8, 16, 100, 4096] {
        let b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        assert!(Recording::read(&b[..]).is_err());
        // Even behind a valid magic and version.
        let mut framed = b"FLAMEREC\x01\x00\x00\x00\x00\x00\x00\x00".to_vec();
        framed.extend_from_slice(&b);
        assert!(Recording::read(&framed[..]).is_err());
    }
}

#[test]
fn unknown_major_version_is_refused_with_its_number() {
    let (mut bytes, _) = synthetic(1);
    bytes[8] = 9;
    let err = Recording::read(&bytes[..]).unwrap_err();
    let version = format!("9.{}", flamerec_format::VERSION_MINOR);
    assert!(err.to_string().contains(&version), "{err}");
}

#[test]
fn huge_declared_lengths_do_not_allocate() {
    let (bytes, _) = synthetic(1);
    // Point the second chunk's lengths at 4 GiB: refused as corrupt, prefix kept.
    let mut b = bytes.clone();
    let second = 16 + 16 + u32::from_le_bytes(bytes[20..24].try_into().unwrap()) as usize;
    b[second + 4..second + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    b[second + 8..second + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let rec = Recording::read(&b[..]).unwrap();
    assert!(matches!(rec.damage, Some(Damage::Corrupt { .. })));
}

#[test]
fn samples_out_of_time_order_and_off_period_round_trip() {
    // Samples arrive late (a recorder writes the ones it had to wait for
    // after newer ones), from several threads, some on the period, some not.
    let mut w = Writer::new(Vec::new(), &meta()).unwrap();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: "/bin/x".into(),
        build_id: vec![],
    });
    let mut rng = Rng(99);
    let mut want = Vec::new();
    for i in 0..5000u64 {
        let f = w.frame(Frame {
            module: m,
            address: rng.below(50),
        });
        let stack = w.stack(&[f]);
        let tid = 10 + rng.below(4) as u32;
        let time_ns = match rng.below(4) {
            0 => i * 1_001_000 - rng.below(1_000_000).min(i * 1_001_000),
            _ => i * 1_001_000 + rng.below(3_000),
        };
        let s = Sample {
            time_ns: time_ns / 1000 * 1000,
            pid: 10,
            tid,
            stack,
            weight: 1 + rng.below(3),
        };
        w.sample(s);
        want.push(s);
        if i % 700 == 0 {
            w.flush().unwrap();
        }
    }
    let bytes = w.finish(Totals::default()).unwrap();
    let rec = Recording::read(&bytes[..]).unwrap();
    assert!(rec.damage.is_none());
    assert_eq!(rec.samples, want);
}

#[test]
fn identities_round_trip_and_count_samples_per_container() {
    let id = "0bcaeb88efd843ea3faed5895ae7bcb926995622d8630e489b9dab71399001b1";
    let mut w = Writer::new(Vec::new(), &meta()).unwrap();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: "/opt/x/ctrspin".into(),
        build_id: vec![],
    });
    let f = w.frame(Frame {
        module: m,
        address: 1,
    });
    let stack = w.stack(&[f]);
    let sample = |pid, time_ns| Sample {
        time_ns,
        pid,
        tid: pid,
        stack,
        weight: 1,
    };
    let in_container = Identity {
        time_ns: 1_000,
        pid: 40,
        ns_pid: 1,
        cgroup: format!("/libpod_parent/libpod-{id}"),
        runtime: "podman".into(),
        container: id.into(),
        executable: "/usr/bin/python3".into(),
    };
    let on_host = Identity {
        time_ns: 2_000,
        pid: 50,
        ns_pid: 50,
        cgroup: "/user.slice".into(),
        ..Identity::default()
    };
    w.identity(&in_container);
    w.identity(&on_host);
    for t in 0..3 {
        w.sample(sample(40, 3_000 + t * 1_000));
    }
    w.sample(sample(50, 9_000));
    // Never identified (gone before): counted as unknown, not guessed.
    w.sample(sample(60, 10_000));
    let bytes = w.finish(Totals::default()).unwrap();

    let rec = Recording::read(&bytes[..]).unwrap();
    let ids: Vec<&Identity> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Identity(i) => Some(i),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [&in_container, &on_host]);
    assert_eq!(in_container.container_label(), "podman:0bcaeb88efd8");
    assert_eq!(on_host.container_label(), "host");

    let s = Summary::read(&bytes[..]).unwrap();
    let counts: Vec<(&str, u64, u64)> = s
        .containers
        .iter()
        .map(|c| (c.label.as_str(), c.processes, c.samples))
        .collect();
    assert_eq!(
        counts,
        [
            ("podman:0bcaeb88efd8", 1, 3),
            ("host", 1, 1),
            ("unknown", 1, 1)
        ]
    );
    assert_eq!(s.containers[0].id, id);
}
