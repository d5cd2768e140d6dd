//! The stall detector on real threads of this test process, with real
//! perf events: a stall in user code and one in the kernel are reported and
//! named, a loop that ticks is not, the rate limit holds, a dropped guard
//! and an exited thread stop being watched (their events closed), the wall
//! clock catches a blocking read, and the example runs.
//!
//! Tests run one at a time (they count perf descriptors and stall on a
//! 2-core machine). Stalls last until the detector has seen them, with a
//! deadline, never a fixed time that a busy machine could cut short. Where
//! perf events cannot be opened the CPU-clock tests fail naming the cause,
//! unless FLAMEREC_SKIP_PERF_TESTS=1.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use flamerec_stall::{Builder, Clock, Detector, Report};
use flamerec_testkit::{skip_or_fail, SKIP_PERF};

#[allow(dead_code)]
#[path = "../examples/stall_demo.rs"]
mod demo;

/// Longest any stall in these tests is kept up waiting for the detector.
const DEADLINE: Duration = Duration::from_secs(20);

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

type Reports = Arc<Mutex<Vec<Report>>>;

/// Starts a detector that collects its reports; `None` when perf tests are
/// skipped and the CPU clock was asked for but is not available.
fn start(builder: Builder, clock: Clock) -> Option<(Detector, Reports)> {
    let reports: Reports = Arc::default();
    let sink = Arc::clone(&reports);
    let d = builder
        .clock(clock)
        .on_report(move |r: &Report| sink.lock().unwrap().push(r.clone()))
        .on_warning(|w: &str| eprintln!("detector warning: {w}"))
        .start()
        .expect("start the detector");
    if d.clock() != clock {
        let why = d.warnings().join("; ");
        skip_or_fail(
            SKIP_PERF,
            format!("perf events are not usable here, so the CPU clock cannot be tested: {why}"),
        );
        return None;
    }
    Some((d, reports))
}

fn of_thread(reports: &Reports, tid: u32) -> Vec<Report> {
    reports
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.tid == tid)
        .cloned()
        .collect()
}

/// Waits (bounded) for `cond`; returns whether it held.
fn wait_for(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < DEADLINE {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

fn names(frames: &[flamerec_stall::Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.name.as_str()).collect()
}

/// Burns CPU in user code until `stop`.
#[inline(never)]
fn stall_in_user_code(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

/// Burns CPU in the kernel until `stop`: reads of /dev/zero, which the
/// kernel serves by clearing our buffer.
#[inline(never)]
fn stall_in_kernel(stop: &AtomicBool) {
    let mut zero = std::fs::File::open("/dev/zero").unwrap();
    let mut buf = vec![0u8; 8 << 20];
    while !stop.load(Ordering::Relaxed) {
        zero.read_exact(&mut buf).unwrap();
    }
}

/// Runs `stall` on a registered loop thread until `seen` says the
/// reports show it (or the deadline), then ticks and waits for the
/// stall's end to be reported. Returns the thread's reports.
fn stall_once(
    d: &Detector,
    reports: &Reports,
    name: &str,
    stall: fn(&AtomicBool),
    seen: impl Fn(&[Report]) -> bool,
) -> Vec<Report> {
    let stop = AtomicBool::new(false);
    let tid = AtomicU32::new(0);
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, || {
                let guard = d.register_current_thread().unwrap();
                tid.store(guard.tid(), Ordering::SeqCst);
                for _ in 0..3 {
                    guard.tick();
                }
                stall(&stop);
                guard.tick();
                // The end of a reported stall is reported, with its length.
                assert!(
                    wait_for(|| of_thread(reports, guard.tid()).iter().any(|r| r.ended)),
                    "no report of the stall's end: {:#?}",
                    of_thread(reports, guard.tid())
                );
            })
            .unwrap();
        let found = wait_for(|| {
            let t = tid.load(Ordering::SeqCst);
            t != 0 && seen(&of_thread(reports, t))
        });
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        let got = of_thread(reports, tid.load(Ordering::SeqCst));
        assert!(
            found,
            "within {DEADLINE:?}, no report as expected: {got:#?}"
        );
        got
    })
}

fn names_user(r: &Report, function: &str) -> bool {
    r.user.iter().any(|f| f.name.ends_with(function))
}

#[test]
fn a_stall_in_user_code_names_the_function() {
    let _serial = serial();
    let builder = Detector::builder().max_reports_per_minute(1000);
    let Some((d, reports)) = start(builder, Clock::Cpu) else {
        return;
    };
    let got = stall_once(
        &d,
        &reports,
        "stall-user",
        |s| {
            stall_in_user_code(s);
        },
        |rs| rs.iter().any(|r| names_user(r, "::stall_in_user_code")),
    );
    let r = got
        .iter()
        .find(|r| names_user(r, "::stall_in_user_code"))
        .unwrap();
    assert!(!r.ended);
    assert_eq!(r.thread_name, "stall-user");
    assert!(r.duration >= d.threshold(), "{r}");
    // The leaf is our loop (or what it inlined: the range iterator's steps
    // are up to five frames), not the detector's sampling.
    let user = names(&r.user);
    assert!(
        user.iter()
            .take(8)
            .any(|n| n.ends_with("::stall_in_user_code")),
        "{r}"
    );
    let ended = got.iter().find(|r| r.ended).unwrap();
    assert!(ended.duration >= r.duration, "{ended}");
    // The folded lines of a stall add up to its duration (one report each
    // threshold, weights of what each adds), within a millisecond a report.
    let total: u128 = got.iter().map(|r| r.new_time.as_millis()).sum();
    let slack = got.len() as u128;
    assert!(
        total + slack >= ended.duration.as_millis() && total <= ended.duration.as_millis(),
        "{total} ms over {} reports vs {ended}",
        got.len()
    );
    let folded = r.folded();
    assert!(folded.starts_with("stall-user;"), "{folded}");
    assert!(folded.contains("::stall_in_user_code"), "{folded}");
}

#[test]
fn a_stall_in_the_kernel_shows_kernel_frames() {
    let _serial = serial();
    // Reports go on until one shows the read path (a sample may land in
    // user code between reads); the rate limit must not end them first.
    let builder = Detector::builder().max_reports_per_minute(1000);
    let Some((d, reports)) = start(builder, Clock::Cpu) else {
        return;
    };
    let kernel = d.kernel_stacks();
    let is_read = |n: &&str| n.contains("read") || n.contains("clear_user") || n.contains("zero");
    let got = stall_once(&d, &reports, "stall-kernel", stall_in_kernel, |rs| {
        rs.iter().any(|r| {
            names_user(r, "::stall_in_kernel") && (!kernel || names(&r.kernel).iter().any(is_read))
        })
    });
    let r = got
        .iter()
        .find(|r| names_user(r, "::stall_in_kernel") && !r.kernel.is_empty())
        .or_else(|| got.first())
        .unwrap();
    if kernel {
        // The syscall path, e.g. read_zero / iov_iter_zero <- vfs_read <- ksys_read.
        assert!(names(&r.kernel).iter().any(is_read), "{r}");
        assert!(!r.kernel.iter().any(|f| f.name.starts_with("perf_")), "{r}");
    } else {
        eprintln!("kernel sampling not allowed here; checked user frames only: {r}");
    }
}

#[test]
fn a_loop_that_ticks_every_10ms_is_never_reported() {
    let _serial = serial();
    let Some((d, reports)) = start(Detector::builder(), Clock::Cpu) else {
        return;
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = d.register_current_thread().unwrap();
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(1500) {
                let task = Instant::now();
                while task.elapsed() < Duration::from_millis(10) {
                    std::hint::black_box(task.elapsed());
                }
                guard.tick();
            }
        });
    });
    drop(d);
    assert!(
        reports.lock().unwrap().is_empty(),
        "{:#?}",
        reports.lock().unwrap()
    );
}

#[test]
fn the_rate_limit_lets_two_a_minute_through_and_counts_the_rest() {
    let _serial = serial();
    let builder = Detector::builder()
        .threshold(Duration::from_millis(50))
        .max_reports_per_minute(2);
    let Some((d, reports)) = start(builder, Clock::Cpu) else {
        return;
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = d.register_current_thread().unwrap();
            for k in 1..=5u64 {
                guard.tick();
                // Stall until the detector has counted this stall.
                let start = Instant::now();
                while d.stats().stalls < k && start.elapsed() < DEADLINE {
                    for _ in 0..1000 {
                        std::hint::black_box(start.elapsed());
                    }
                }
                assert_eq!(d.stats().stalls, k, "stall {k} not seen in {DEADLINE:?}");
            }
            guard.tick();
        });
    });
    // Each of the five stalls asked the limit at least once when it began
    // (a stall whose report went out may ask again when it ends, if its
    // stack was in by then: timing decides), and only two tokens exist.
    assert!(wait_for(|| d.stats().suppressed >= 3), "{:?}", d.stats());
    // Dropping delivers what was decided.
    drop(d);
    let got = reports.lock().unwrap();
    // Two tokens; the next comes 30 s later, far beyond this test.
    assert_eq!(got.len(), 2, "{got:#?}");
    assert!(got.iter().all(|r| r.suppressed == 0), "{got:#?}");
}

/// Perf event descriptors this process has open.
fn perf_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.to_string_lossy() == "anon_inode:[perf_event]")
        .count()
}

#[test]
fn a_dropped_guard_stops_reports_and_closes_its_event() {
    let _serial = serial();
    let before = perf_fds();
    let Some((d, reports)) = start(Detector::builder(), Clock::Cpu) else {
        return;
    };
    let stop = AtomicBool::new(false);
    let (kept, dropped) = (AtomicU32::new(0), AtomicU32::new(0));
    std::thread::scope(|s| {
        // Both stall side by side; only the one still registered is reported.
        s.spawn(|| {
            let guard = d.register_current_thread().unwrap();
            kept.store(guard.tid(), Ordering::SeqCst);
            stall_in_user_code(&stop);
        });
        s.spawn(|| {
            let guard = d.register_current_thread().unwrap();
            guard.tick();
            let tid = guard.tid();
            drop(guard);
            dropped.store(tid, Ordering::SeqCst);
            stall_in_user_code(&stop);
        });
        let two = wait_for(|| {
            let k = kept.load(Ordering::SeqCst);
            k != 0 && of_thread(&reports, k).len() >= 2
        });
        // Its event is closed while the thread lives on.
        let closed = wait_for(|| perf_fds() == before + 1);
        stop.store(true, Ordering::Relaxed);
        assert!(two, "the registered thread was not reported twice");
        assert!(closed, "{} perf fds, expected {}", perf_fds(), before + 1);
    });
    let dropped = of_thread(&reports, dropped.load(Ordering::SeqCst));
    assert!(dropped.is_empty(), "{dropped:#?}");
    drop(d);
    assert_eq!(perf_fds(), before);
}

#[test]
fn a_thread_that_exits_while_registered_leaves_no_event() {
    let _serial = serial();
    let before = perf_fds();
    let Some((d, reports)) = start(Detector::builder(), Clock::Cpu) else {
        return;
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = d.register_current_thread().unwrap();
            guard.tick();
            assert_eq!(perf_fds(), before + 1);
            // Exits without deregistering.
            std::mem::forget(guard);
        });
    });
    assert!(
        wait_for(|| perf_fds() == before && d.stats().threads == 0),
        "{} perf fds (expected {before}), {:?}",
        perf_fds(),
        d.stats()
    );
    assert!(reports.lock().unwrap().is_empty());
}

/// Waits on a socket until the test sends a byte.
#[inline(never)]
fn wait_for_input(s: &mut UnixStream) {
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
}

#[test]
fn the_wall_clock_catches_a_blocking_read() {
    let _serial = serial();
    let (d, reports) = start(Detector::builder(), Clock::Wall).unwrap();
    let (mut near, mut far) = UnixStream::pair().unwrap();
    let tid = AtomicU32::new(0);
    let got = std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name("stall-read".into())
            .spawn_scoped(s, || {
                let guard = d.register_current_thread().unwrap();
                tid.store(guard.tid(), Ordering::SeqCst);
                guard.tick();
                wait_for_input(&mut near);
                guard.tick();
                guard.idle();
            })
            .unwrap();
        let found = wait_for(|| {
            let t = tid.load(Ordering::SeqCst);
            t != 0 && of_thread(&reports, t).iter().any(|r| !r.user.is_empty())
        });
        far.write_all(b"x").unwrap();
        h.join().unwrap();
        assert!(found, "no report of the blocked thread within {DEADLINE:?}");
        of_thread(&reports, tid.load(Ordering::SeqCst))
    });
    let r = got.iter().find(|r| !r.user.is_empty()).unwrap();
    assert_eq!(r.clock, Clock::Wall);
    assert!(names_user(r, "::wait_for_input"), "{r}");
    if d.kernel_stacks() {
        // As root: where in the kernel it waits (a socket read).
        assert!(!r.kernel.is_empty(), "{r}");
    }
}

#[test]
fn the_example_reports_its_three_stalls() {
    let _serial = serial();
    let any = |rs: &[Report], f: &str| rs.iter().any(|r| names_user(r, f));
    let perf = start(Detector::builder(), Clock::Cpu).is_some();
    if perf {
        let cpu = demo::run(Clock::Cpu, Duration::from_millis(300)).unwrap();
        assert!(any(&cpu, "::busy_user_task"), "{cpu:#?}");
        assert!(any(&cpu, "::touch_big_allocation"), "{cpu:#?}");
        // Blocked is not a stall of CPU time.
        assert!(!any(&cpu, "::blocking_read_task"), "{cpu:#?}");
    }
    let wall = demo::run(Clock::Wall, Duration::from_millis(300)).unwrap();
    assert!(any(&wall, "::busy_user_task"), "{wall:#?}");
    assert!(any(&wall, "::blocking_read_task"), "{wall:#?}");
}
