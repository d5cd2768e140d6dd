//! threads: three threads, each doing its share of CPU work in its own function.
//!
//! Usage: `threads [--units N]` (default: about one second of CPU on a modern core, in all).
//!
//! The main thread starts three threads named `worker-a`, `worker-b` and `worker-c` and
//! waits for them. They run `threads_worker_a`, `threads_worker_b` and `threads_worker_c`,
//! which do 1, 2 and 3 sixths of the units, so a profile's self shares are 16.7%, 33.3%
//! and 50% (and each thread holds its function's share of the samples). Every unit runs the
//! same loop body, so the split is exact by construction; CPU-time sampling keeps it however
//! the threads are scheduled. The stack of each worker is
//! `clone → start_thread → std → threads_worker_X`; the worker functions are `#[no_mangle]`
//! and `#[inline(never)]`, so their symbol names are plain and identical in every build.
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;
use std::thread;

include!("../work.rs");

/// Units of work run when `--units` is not given, over all threads; calibrated to about
/// 1 s of CPU at opt-level 3 (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// Sixths of the units each worker runs; their ratio is the expected profile.
const A_SIXTHS: u64 = 1;
const B_SIXTHS: u64 = 2;
const C_SIXTHS: u64 = 3;

/// 1/6 of the work, on thread `worker-a`.
#[no_mangle]
#[inline(never)]
fn threads_worker_a(units: u64) -> u64 {
    checksum_of_work!(units, 0x9e37_79b9_7f4a_7c15_u64)
}

/// 2/6 of the work, on thread `worker-b`.
#[no_mangle]
#[inline(never)]
fn threads_worker_b(units: u64) -> u64 {
    checksum_of_work!(units, 0xbf58_476d_1ce4_e5b9_u64)
}

/// 3/6 of the work, on thread `worker-c`.
#[no_mangle]
#[inline(never)]
fn threads_worker_c(units: u64) -> u64 {
    checksum_of_work!(units, 0x94d0_49bb_1331_11eb_u64)
}

/// A worker thread: its name, what it runs, and how many sixths of the units.
type Worker = (&'static str, fn(u64) -> u64, u64);

/// Starts the three workers on `units` units in all and returns their checksums combined.
fn run(units: u64) -> std::io::Result<u64> {
    let sixth = units.div_ceil(6);
    // `black_box` around each result keeps the worker call from being a tail call, which
    // would drop the worker's frame from the stack.
    let workers: [Worker; 3] = [
        ("worker-a", |n| black_box(threads_worker_a(n)), A_SIXTHS),
        ("worker-b", |n| black_box(threads_worker_b(n)), B_SIXTHS),
        ("worker-c", |n| black_box(threads_worker_c(n)), C_SIXTHS),
    ];
    let mut handles = Vec::new();
    for (name, work, sixths) in workers {
        let units = sixth * sixths;
        handles.push(
            thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || work(units))?,
        );
    }
    let mut checksum = 0;
    for handle in handles {
        // A worker cannot panic (no indexing, no allocation); if one did, report it.
        checksum ^= handle
            .join()
            .map_err(|_| std::io::Error::other("a worker thread panicked"))?;
    }
    Ok(checksum)
}

fn main() -> ExitCode {
    let units = match parse_units(std::env::args().skip(1), DEFAULT_UNITS) {
        Ok(units) => units,
        Err(message) => {
            eprintln!("threads: {message}\nusage: threads [--units N]   (default {DEFAULT_UNITS})");
            return ExitCode::from(2);
        }
    };
    match run(units) {
        Ok(checksum) => {
            black_box(checksum);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("threads: {error}");
            ExitCode::FAILURE
        }
    }
}
