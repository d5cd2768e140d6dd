//! The names section after the trailer: round trip, damage confined to the
//! names, skipping of unknown optional records, and reading files of format
//! 1.0, which have no such section.

use std::sync::Arc;

use flamerec_format::{
    write_names, Frame, Metadata, Module, ModuleKind, NamesState, Recording, Sample, Summary,
    Totals, Writer,
};

fn meta() -> Metadata {
    Metadata {
        command: vec!["prog".into()],
        target: "command".into(),
        event: "cpu-clock".into(),
        frequency_hz: 999,
        call_graph: "dwarf".into(),
        weight_unit: "samples".into(),
        ..Default::default()
    }
}

/// Names to embed, by frame id.
type Names = Vec<(u32, Vec<String>)>;

/// A finished recording of `frames` distinct user frames, each sampled once,
/// and the names to embed for them: frame i gets i % 3 names.
fn recording(frames: u64) -> (Vec<u8>, Names) {
    let mut w = Writer::new(Vec::new(), &meta()).unwrap();
    let m = w.module(&Module {
        kind: ModuleKind::File,
        path: "/usr/bin/prog".into(),
        build_id: vec![9; 20],
    });
    w.comm(0, 1, 1, "prog", true);
    let mut names = Vec::new();
    for i in 0..frames {
        let f = w.frame(Frame {
            module: m,
            address: 0x1000 + i * 16,
        });
        let s = w.stack(&[f]);
        w.sample(Sample {
            time_ns: i * 1000,
            pid: 1,
            tid: 1,
            stack: s,
            weight: 1,
        });
        let chain: Vec<String> = (0..i % 3)
            .map(|k| format!("ns::func_{}<{k}>", i / 7))
            .collect();
        names.push((f, chain));
    }
    let out = w.finish(Totals::default()).unwrap();
    (out, names)
}

fn with_names(frames: u64, complete: bool) -> (Vec<u8>, usize, Names) {
    let (mut bytes, names) = recording(frames);
    let trailer_end = bytes.len();
    write_names(&mut bytes, &names, complete).unwrap();
    (bytes, trailer_end, names)
}

fn as_strings(v: &[Arc<str>]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn names_round_trip_after_the_trailer() {
    let (bytes, _, names) = with_names(500, true);
    let rec = Recording::read(&bytes[..]).unwrap();
    assert!(rec.damage.is_none() && rec.totals.is_some());
    assert_eq!(rec.names.state(), NamesState::Embedded);
    assert_eq!(rec.names.frames.len(), names.len());
    for (id, chain) in &names {
        assert_eq!(&as_strings(&rec.names.frames[id]), chain, "frame {id}");
    }
    let s = Summary::read(&bytes[..]).unwrap();
    assert!(s.complete);
    assert_eq!((s.names, s.named_frames), (NamesState::Embedded, 500));
}

#[test]
fn an_incomplete_lookup_is_partial_and_no_section_is_none() {
    let (bytes, _, _) = with_names(20, false);
    let rec = Recording::read(&bytes[..]).unwrap();
    assert_eq!(rec.names.state(), NamesState::Partial);
    let (bare, _) = recording(20);
    let rec = Recording::read(&bare[..]).unwrap();
    assert_eq!(rec.names.state(), NamesState::None);
    assert!(rec.names.frames.is_empty());
}

#[test]
fn a_names_section_cut_anywhere_leaves_the_recording_whole() {
    // Big enough for several names chunks.
    let (bytes, trailer_end, names) = with_names(40_000, true);
    let full = Recording::read(&bytes[..]).unwrap();
    assert_eq!(full.names.frames.len(), names.len());
    let step = ((bytes.len() - trailer_end) / 300).max(1);
    for cut in (trailer_end..bytes.len()).step_by(step) {
        let rec = Recording::read(&bytes[..cut]).unwrap();
        assert!(rec.damage.is_none(), "cut at {cut}: {:?}", rec.damage);
        assert_eq!(rec.samples.len(), full.samples.len());
        assert_ne!(rec.names.state(), NamesState::Embedded, "cut at {cut}");
        if cut > trailer_end {
            assert!(rec.names.damage.is_some(), "cut at {cut}");
        }
        for (id, chain) in &rec.names.frames {
            assert_eq!(chain, &full.names.frames[id]);
        }
    }
}

#[test]
fn a_damaged_names_chunk_is_reported_and_the_rest_stands() {
    let (bytes, trailer_end, _) = with_names(300, true);
    for offset in [trailer_end + 3, trailer_end + 20, bytes.len() - 5] {
        let mut b = bytes.clone();
        b[offset] ^= 0x40;
        let rec = Recording::read(&b[..]).unwrap();
        assert!(rec.damage.is_none());
        assert_eq!(rec.samples.len(), 300);
        assert_eq!(rec.names.state(), NamesState::Partial, "flip at {offset}");
        assert!(rec.names.damage.is_some());
    }
}

/// One chunk holding `payload`, framed as the writer frames chunks.
fn chunk(payload: &[u8]) -> Vec<u8> {
    let compressed = zstd::bulk::compress(payload, 3).unwrap();
    let mut c = b"FRCK".to_vec();
    c.extend_from_slice(&(compressed.len() as u32).to_le_bytes());
    c.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&c[4..12]);
    crc.update(&compressed);
    c.extend_from_slice(&crc.finalize().to_le_bytes());
    c.extend_from_slice(&compressed);
    c
}

#[test]
fn unknown_optional_records_are_skipped() {
    let (bytes, trailer_end, names) = with_names(30, true);
    // A record of a later minor version (tag 99, length 3) before the names.
    let mut b = bytes[..trailer_end].to_vec();
    b.extend_from_slice(&chunk(&[99, 3, 1, 2, 3]));
    b.extend_from_slice(&bytes[trailer_end..]);
    let rec = Recording::read(&b[..]).unwrap();
    assert!(rec.damage.is_none() && rec.names.damage.is_none());
    assert_eq!(rec.names.state(), NamesState::Embedded);
    assert_eq!(rec.names.frames.len(), names.len());
    // A record that is not optional after the trailer is damage of the names.
    let mut b = bytes[..trailer_end].to_vec();
    b.extend_from_slice(&chunk(&[12, 0, 1]));
    let rec = Recording::read(&b[..]).unwrap();
    assert!(rec.damage.is_none());
    assert!(rec.names.damage.is_some());
}

#[test]
fn names_of_frames_the_file_does_not_have_are_refused() {
    let (mut bytes, names) = recording(10);
    let trailer_end = bytes.len();
    let mut bogus = names.clone();
    bogus.push((10_000, vec!["ghost".into()]));
    write_names(&mut bytes, &bogus, true).unwrap();
    let rec = Recording::read(&bytes[..]).unwrap();
    assert!(rec.damage.is_none());
    assert!(rec.names.damage.is_some(), "{:?}", rec.names);
    assert!(!rec.names.frames.contains_key(&10_000));
    assert!(bytes.len() > trailer_end);
}

#[test]
fn a_format_1_0_recording_still_reads() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/v1.0-cpu-mix.frec"
    );
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[8..12], &[1, 0, 0, 0], "the fixture is format 1.0");
    let rec = Recording::read(&bytes[..]).unwrap();
    assert!(rec.damage.is_none());
    assert_eq!(rec.totals.as_ref().map(|t| t.samples), Some(138));
    assert_eq!(rec.samples.len(), 138);
    assert_eq!(rec.names.state(), NamesState::None);
    assert!(rec
        .samples
        .iter()
        .all(|s| rec.tables.stack_frames(s.stack).count() > 0));
}
