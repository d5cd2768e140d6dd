//! What a loop pays per `tick()`: one relaxed store, measured on a thread
//! registered with a running detector (CPU clock where perf events open,
//! else the wall clock), next to a bare atomic store for scale.
//!
//! `cargo bench -p flamerec-stall --bench tick`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_main, Criterion};
use flamerec_stall::Detector;

fn tick(c: &mut Criterion) {
    // Criterion's own pauses between samples are not stalls worth a report.
    let detector = Detector::builder()
        .threshold(Duration::from_secs(60))
        .on_report(|_| {})
        .on_warning(|w| eprintln!("tick bench: {w}"))
        .start()
        .expect("start the stall detector");
    let guard = detector
        .register_current_thread()
        .expect("register the bench thread");
    let mut g = c.benchmark_group("stall");
    g.bench_function(format!("tick ({:?} clock)", detector.clock()), |b| {
        b.iter(|| black_box(&guard).tick())
    });
    g.bench_function("idle", |b| b.iter(|| black_box(&guard).idle()));
    let bare = AtomicU64::new(0);
    g.bench_function("bare relaxed store", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 2;
            black_box(&bare).store(n, Ordering::Relaxed)
        })
    });
    g.finish();
}

// The macro's generated function has no doc comment of its own.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::tick);
}
criterion_main!(group::benches);
