//! A loop thread that stalls three ways — in its own code, in the kernel
//! (a big allocation touched page by page), and blocked in a `read` — under
//! the stall detector. Reports go to stderr as text; at the end, stdout gets
//! one folded line per report (`... | inferno-flamegraph > stalls.svg`).
//!
//! ```text
//! cargo run --release -p flamerec-stall --example stall_demo            # CPU clock
//! cargo run --release -p flamerec-stall --example stall_demo -- --wall  # wall clock
//! ```
//!
//! Under the CPU clock the blocked `read` uses no CPU and is not a stall;
//! under the wall clock it is (and, as root, its report shows where in the
//! kernel the thread waits). Each stall lasts at least 300 ms and until the
//! detector has seen it (at most 10 s), so the demo shows a report even on
//! a busy machine.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flamerec_stall::{Clock, Detector, Report};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let clock = if std::env::args().any(|a| a == "--wall") {
        Clock::Wall
    } else {
        Clock::Cpu
    };
    match run(clock, Duration::from_millis(300)) {
        Ok(reports) => {
            for r in &reports {
                println!("{}", r.folded());
            }
        }
        Err(e) => {
            eprintln!("stall_demo: error: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs the loop under a detector with `clock`; returns every report.
pub fn run(clock: Clock, stall: Duration) -> Result<Vec<Report>, BoxError> {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&reports);
    let detector = Detector::builder()
        .threshold(Duration::from_millis(100))
        .max_reports_per_minute(60)
        .clock(clock)
        .on_report(move |r: &Report| {
            eprintln!("{r}\n");
            if let Ok(mut v) = sink.lock() {
                v.push(r.clone());
            }
        })
        .start()?;
    eprintln!(
        "stall_demo: timing stalls by {:?} clock, kernel stacks {}",
        detector.clock(),
        if detector.kernel_stacks() {
            "on"
        } else {
            "off"
        }
    );
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("demo-loop".into())
            .spawn_scoped(s, || event_loop(&detector, stall))?
            .join()
            .map_err(|_| "the loop thread panicked")?
    })?;
    let stats = detector.stats();
    // Dropping the detector delivers what is still on its way.
    drop(detector);
    eprintln!("stall_demo: {stats:?}");
    let reports = reports.lock().map_err(|_| "a report callback panicked")?;
    Ok(reports.clone())
}

fn event_loop(detector: &Detector, stall: Duration) -> Result<(), BoxError> {
    let guard = detector.register_current_thread()?;
    let tasks: [fn(&Detector, Duration); 3] =
        [busy_user_task, touch_big_allocation, blocking_read_task];
    for task in tasks {
        for _ in 0..5 {
            guard.tick();
            quick_task();
        }
        guard.tick();
        task(detector, stall);
    }
    guard.tick();
    guard.idle();
    Ok(())
}

/// Whether to go on stalling: the detector has not seen this stall yet,
/// and 10 s have not passed.
fn long_enough(detector: &Detector, seen: u64, start: Instant) -> bool {
    detector.stats().stalls == seen && start.elapsed() < Duration::from_secs(10)
}

fn quick_task() {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < Duration::from_millis(5) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// User code that runs far past the threshold.
#[inline(never)]
fn busy_user_task(detector: &Detector, stall: Duration) {
    let start = Instant::now();
    let seen = detector.stats().stalls;
    let mut x = 1u64;
    while start.elapsed() < stall || long_enough(detector, seen, start) {
        for _ in 0..10_000 {
            x = std::hint::black_box(
                x.wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407),
            );
        }
    }
}

/// Kernel time: every page of a fresh 256 MiB allocation is a page fault
/// the kernel must zero, then the memory goes back with munmap.
#[inline(never)]
fn touch_big_allocation(detector: &Detector, stall: Duration) {
    let start = Instant::now();
    let seen = detector.stats().stalls;
    while start.elapsed() < stall || long_enough(detector, seen, start) {
        let mut big = vec![0u8; 256 << 20];
        for page in big.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&big);
    }
}

/// Blocked: waits for a byte that another thread sends after the stall
/// (under the wall clock, once the detector has seen it).
#[inline(never)]
fn blocking_read_task(detector: &Detector, stall: Duration) {
    let Ok((mut near, mut far)) = UnixStream::pair() else {
        return;
    };
    std::thread::scope(|s| {
        s.spawn(move || {
            let start = Instant::now();
            let seen = detector.stats().stalls;
            let wall = detector.clock() == Clock::Wall;
            while start.elapsed() < stall || (wall && long_enough(detector, seen, start)) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = far.write_all(b"x");
        });
        let mut b = [0u8; 1];
        let _ = near.read(&mut b);
    });
}
