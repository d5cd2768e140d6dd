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
//! This file is self-contained (no dependencies, no sibling modules): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;
use std::thread;

/// Units of work run when `--units` is not given, over all threads; calibrated to about
/// 1 s of CPU at opt-level 3 (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// Sixths of the units each worker runs; their ratio is the expected profile.
const A_SIXTHS: u64 = 1;
const B_SIXTHS: u64 = 2;
const C_SIXTHS: u64 = 3;

/// Xorshift steps over the whole state per unit: large enough that call overhead is noise.
const STEPS_PER_UNIT: u32 = 1024;

type State = [u64; 8];

const SEED: State = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
    0x4528_21e6_38d0_1377,
    0xbe54_66cf_34e9_0c6c,
    0xc0ac_29b7_c97c_50dd,
    0x3f84_d5b5_b547_0917,
];

/// The loop body of every work function, written out in each by a macro rather than by a
/// shared `#[inline(always)]` function: with debug info, that would be one more (inlined)
/// frame, and the leaf of every sample. `while` loops rather than iterators for the same
/// reason: an iterator's inlined `next` would show as std's frames. `salt` differs per
/// caller only so that LLVM cannot merge the functions into one symbol; it is an equally
/// sized constant, so the cost is identical.
macro_rules! units_of_work {
    ($state:expr, $units:expr, $salt:expr) => {
        let mut unit = 0;
        while unit < $units {
            // Opaque per unit: the compiler can neither fold units together nor skip one.
            let state: &mut State = black_box(&mut *$state);
            let mut step = 0;
            while step < STEPS_PER_UNIT {
                let mut i = 0;
                while i < state.len() {
                    let mut x = state[i];
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    state[i] = x ^ $salt;
                    i += 1;
                }
                step += 1;
            }
            unit += 1;
        }
    };
}

/// Runs `units` units from the seed and returns a checksum of the state.
macro_rules! checksum_of_work {
    ($units:expr, $salt:expr) => {{
        let mut state = SEED;
        units_of_work!(&mut state, $units, $salt);
        state[0] ^ state[1] ^ state[2] ^ state[3] ^ state[4] ^ state[5] ^ state[6] ^ state[7]
    }};
}

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

fn parse_units(mut args: impl Iterator<Item = String>) -> Result<u64, String> {
    let mut units = DEFAULT_UNITS;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--units" => args.next().ok_or("--units needs a value")?,
            other => match other.strip_prefix("--units=") {
                Some(value) => value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        units = value
            .parse()
            .map_err(|_| format!("--units: {value:?} is not a non-negative integer"))?;
    }
    Ok(units)
}

fn main() -> ExitCode {
    let units = match parse_units(std::env::args().skip(1)) {
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
