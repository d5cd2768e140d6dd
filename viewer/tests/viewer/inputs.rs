//! Reading inputs: folded text by `flamerec diff`'s rules, damaged files
//! as errors or warnings, never a panic.

use std::path::Path;

use flamerec_viewer::ViewData;

use crate::json;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write input");
    p
}

#[test]
fn folded_text_loads_and_a_bad_line_names_its_number() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let good = write(
        dir.path(),
        "good.folded",
        b"# comment\na;b 2\n\na;c 1\na;b 1\n",
    );
    let data = ViewData::load(&good, None).expect("folded text loads");
    let v = json(&data);
    assert_eq!(v["totals"], serde_json::json!([4]));
    assert_eq!(data.stack_count(), 2);

    let bad = write(dir.path(), "bad.folded", b"a;b 2\na;c many\n");
    let err = ViewData::load(&bad, None).expect_err("bad count");
    assert!(err.to_string().contains("bad.folded:2:"), "{err}");

    let diff = ViewData::load(&good, Some(&good)).expect("diff of a file with itself");
    assert_eq!(json(&diff)["totals"], serde_json::json!([4, 4]));
}

#[test]
fn junk_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for (i, len) in [0usize, 1, 7, 8, 9, 100, 4096].into_iter().enumerate() {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let p = write(dir.path(), &format!("junk{i}"), &bytes);
        // Empty input is an empty profile; anything else must fail cleanly.
        if let Ok(d) = ViewData::load(&p, None) {
            assert_eq!(json(&d)["schema"], "flamerec-view/1");
        }
    }
    for magic in [
        &b"FLAMEREC"[..],
        b"FLAMEREC\x01\x00garbage",
        b"PERFILE2\0\0\0\0",
    ] {
        let p = write(dir.path(), "magic", magic);
        assert!(ViewData::load(&p, None).is_err(), "{magic:?}");
    }
    let missing = ViewData::load(&dir.path().join("missing.frec"), None).expect_err("missing");
    assert!(missing.to_string().contains("missing.frec"), "{missing}");
}

#[test]
fn a_cut_recording_loads_up_to_where_it_was_cut() {
    let Some(rec) = crate::browser::cpu_mix_recording() else {
        return;
    };
    let bytes = std::fs::read(rec).expect("read recording");
    let dir = tempfile::tempdir().expect("temporary directory");
    for cut in [9, 64, bytes.len() / 3, bytes.len() / 2, bytes.len() - 1] {
        let p = write(dir.path(), "cut.frec", &bytes[..cut.min(bytes.len())]);
        match ViewData::load(&p, None) {
            Ok(d) => {
                assert_eq!(json(&d)["schema"], "flamerec-view/1");
                assert!(
                    !d.warnings().is_empty(),
                    "cut at {cut}: no truncation warning"
                );
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
