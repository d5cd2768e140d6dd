//! Folding does not depend on how it is run: one symbolization thread or
//! several, no cache, a cold cache or a warm one give the same bytes.

use crate::common::*;
use flamerec_samples::{FramePointers, Sample};

/// `flamerec fold` of `rec` with `extra`, its stdout as bytes.
fn folded(rec: &std::path::Path, extra: &[&str]) -> Vec<u8> {
    let o = flamerec()
        .arg("fold")
        .args(extra)
        .arg(rec)
        .output()
        .expect("run flamerec fold");
    assert!(o.status.success(), "fold {extra:?}: {}", stderr(&o));
    o.stdout
}

#[test]
fn one_thread_or_many_and_cold_or_warm_caches_fold_to_the_same_bytes() {
    // Several binaries with DWARF and inlined frames (two Rust samples) and
    // without (the shell, libc, ls), recorded without embedded names so
    // every fold reads the binaries.
    let inline = sample_bin(Sample::InlineHeavy, FramePointers::No);
    let mix = sample_bin(Sample::CpuMix, FramePointers::No);
    let script = format!(
        "{} --units 40000; {} --units 40000; ls -lR /usr/lib > /dev/null",
        inline.display(),
        mix.display()
    );
    let dir = tmp();
    let rec = dir.path().join("many.frec");
    let Some(o) = record(&rec, &["--no-embed-symbols"], &["sh", "-c", &script]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));

    let one = folded(&rec, &["--no-cache", "-j", "1"]);
    let many = folded(&rec, &["--no-cache", "-j", "4"]);
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let cold = folded(&rec, &["--cache-dir", cache]);
    let warm = folded(&rec, &["--cache-dir", cache]);
    let text = String::from_utf8_lossy(&one);
    // Inlined frames were expanded, so the DWARF path ran.
    assert!(
        text.contains("inline_heavy_alpha"),
        "no inlined frame: {}",
        &text[..text.len().min(2000)]
    );
    assert!(one == many, "-j1 and -j4 differ");
    assert!(one == cold, "no cache and a cold cache differ");
    assert!(one == warm, "a cold and a warm cache differ");
}
