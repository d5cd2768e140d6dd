//! thread-states: a process whose threads sit in known states in known functions, for the
//! tests of `flamerec stacks`.
//!
//! Usage: `thread-states [--churn]`. The threads (by name) and where they stay:
//!
//! - `thread-states` (main): `ts_pipe_reader`, blocked in `read` on stdin (a pipe in the
//!   tests). For every line it reads it prints `progress SPINS`, SPINS being the spinner's
//!   count so far, so a test can tell that the process still runs and makes progress. At the
//!   end of its input it exits 0.
//! - `ts-spin`: `ts_spin`, always running: counts in a loop without system calls.
//! - `ts-sleep`: `ts_sleep`, in `nanosleep` (`std::thread::sleep`, an hour at a time).
//! - `ts-wait`: `ts_wait`, in a futex wait (a `Condvar` nobody notifies).
//! - `ts-deep`: `ts_recurse` 200 levels below its first call (201 frames), then
//!   `ts_deep_sleep`, in `nanosleep`.
//! - with `--churn`, `ts-churn`: `ts_churn` starts threads named `ts-brief` that exit at
//!   once, over and over (threads that vanish while someone looks at them).
//!
//! It prints `ready` once every thread has reached its function (the blocking ones may still
//! be a few instructions before their system call). The named functions are `#[no_mangle]`
//! and `#[inline(never)]`, so their symbols are plain in every build.
//!
//! Self-contained (no dependencies, no modules): the tests compile it with `rustc` alone.

use std::hint::black_box;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// How deep `ts_recurse` recurses below its first call.
const DEPTH: u32 = 200;

/// The spinner's count, published every 1024 rounds.
static SPINS: AtomicU64 = AtomicU64::new(0);
/// Threads that have reached their function.
static ARRIVED: AtomicUsize = AtomicUsize::new(0);

/// Runs forever without a system call.
#[no_mangle]
#[inline(never)]
fn ts_spin() {
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    let mut n: u64 = 0;
    loop {
        n = black_box(n + 1);
        if n % 1024 == 0 {
            SPINS.store(n, Ordering::Relaxed);
        }
    }
}

/// Sleeps in `nanosleep`, forever.
#[no_mangle]
#[inline(never)]
fn ts_sleep() {
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    loop {
        thread::sleep(Duration::from_secs(3600));
        black_box(());
    }
}

/// Waits on a condition variable nobody notifies: a futex wait.
#[no_mangle]
#[inline(never)]
fn ts_wait() {
    let lock = Mutex::new(false);
    let cvar = Condvar::new();
    let mut woken = lock.lock().unwrap_or_else(|e| e.into_inner());
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    while !*woken {
        woken = cvar.wait(woken).unwrap_or_else(|e| e.into_inner());
    }
}

/// Sleeps at the bottom of the recursion.
#[no_mangle]
#[inline(never)]
fn ts_deep_sleep() -> u64 {
    ARRIVED.fetch_add(1, Ordering::SeqCst);
    loop {
        thread::sleep(Duration::from_secs(3600));
        black_box(());
    }
}

/// One frame per level: `depth` more below this one, then `ts_deep_sleep`.
#[no_mangle]
#[inline(never)]
fn ts_recurse(depth: u32) -> u64 {
    // `black_box` keeps LLVM from unrolling the recursion and the calls from being tail
    // calls, which would reuse this frame.
    let below = if black_box(depth) == 0 {
        ts_deep_sleep()
    } else {
        ts_recurse(depth - 1)
    };
    black_box(below).rotate_left(1)
}

/// Starts threads that exit at once, forever.
#[no_mangle]
#[inline(never)]
fn ts_churn() {
    loop {
        let brief = thread::Builder::new()
            .name("ts-brief".into())
            .spawn(|| black_box(()));
        if let Ok(handle) = brief {
            let _ = handle.join();
        }
    }
}

/// Answers every line of stdin with the spinner's count; returns at the end of input.
#[no_mangle]
#[inline(never)]
fn ts_pipe_reader() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut line = String::new();
    loop {
        line.clear();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(());
        }
        writeln!(stdout, "progress {}", SPINS.load(Ordering::Relaxed))?;
        stdout.flush()?;
    }
}

fn spawn(name: &str, f: fn()) -> std::io::Result<()> {
    thread::Builder::new().name(name.into()).spawn(f).map(drop)
}

fn run(churn: bool) -> std::io::Result<()> {
    spawn("ts-spin", ts_spin)?;
    spawn("ts-sleep", ts_sleep)?;
    spawn("ts-wait", ts_wait)?;
    spawn("ts-deep", || {
        black_box(ts_recurse(DEPTH));
    })?;
    while ARRIVED.load(Ordering::SeqCst) < 4 {
        thread::sleep(Duration::from_millis(1));
    }
    if churn {
        spawn("ts-churn", ts_churn)?;
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready")?;
    stdout.flush()?;
    ts_pipe_reader()
}

fn main() -> ExitCode {
    let mut churn = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--churn" => churn = true,
            other => {
                eprintln!("thread-states: unexpected argument {other:?}\nusage: thread-states [--churn]");
                return ExitCode::from(2);
            }
        }
    }
    match run(churn) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("thread-states: {e}");
            ExitCode::FAILURE
        }
    }
}
