//! sleeper: mostly off CPU — sleeps of known lengths in named functions, and a little CPU work.
//!
//! Usage: `sleeper [--rounds N]` (default 10 rounds: about 1 s of wall time, 0.2 s of CPU).
//!
//! Each round runs `sleeper_spin` (CPU work, about 20 ms), then `sleeper_short` (sleeps
//! 20 ms), then `sleeper_long` (sleeps 60 ms). Off CPU (time blocked, `-e off-cpu`), the
//! profile is `sleeper_short` 25% and `sleeper_long` 75% of the blocked time: the sleeps are
//! of fixed length, so the split is exact by construction up to timer slack (tens of µs per
//! sleep). On CPU (`cpu-clock`), nearly all samples are in `sleeper_spin`. The stacks are
//! `main → sleeper_run → sleeper_{spin,short,long}`, the sleeps continuing into
//! `std::thread::sleep → clock_nanosleep → kernel`; the named functions are `#[no_mangle]`
//! and `#[inline(never)]`, so their symbol names are plain and identical in every build.
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

include!("../work.rs");

/// Rounds run when `--rounds` is not given: about 1 s of wall time.
const DEFAULT_ROUNDS: u64 = 10;

/// How long each sleep of a round lasts; their ratio is the expected off-CPU profile.
const SHORT: Duration = Duration::from_millis(20);
const LONG: Duration = Duration::from_millis(60);

/// Units of CPU work per round: about 20 ms (3.5 µs per unit on a 2-core AMD EPYC VM).
const SPIN_UNITS: u64 = 5_700;

/// CPU work: the on-CPU part of the profile.
#[no_mangle]
#[inline(never)]
fn sleeper_spin(units: u64) -> u64 {
    let mut state: State = [1, 2, 3, 4, 5, 6, 7, 8];
    units_of_work!(&mut state, units, 0_u64);
    state[0] ^ state[1] ^ state[2] ^ state[3] ^ state[4] ^ state[5] ^ state[6] ^ state[7]
}

// The `black_box` after each sleep keeps it from being a tail call: a tail call would
// replace this function's frame with std's, and it would vanish from the stacks.

/// 25% of the time off CPU.
#[no_mangle]
#[inline(never)]
fn sleeper_short() {
    thread::sleep(black_box(SHORT));
    black_box(());
}

/// 75% of the time off CPU.
#[no_mangle]
#[inline(never)]
fn sleeper_long() {
    thread::sleep(black_box(LONG));
    black_box(());
}

/// Runs `rounds` rounds of spin, short sleep, long sleep.
#[no_mangle]
#[inline(never)]
fn sleeper_run(rounds: u64) -> u64 {
    let mut checksum = 0;
    for _ in 0..rounds {
        checksum ^= sleeper_spin(SPIN_UNITS);
        sleeper_short();
        sleeper_long();
    }
    checksum
}

fn parse_rounds(mut args: impl Iterator<Item = String>) -> Result<u64, String> {
    let mut rounds = DEFAULT_ROUNDS;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--rounds" => args.next().ok_or("--rounds needs a value")?,
            other => match other.strip_prefix("--rounds=") {
                Some(value) => value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        rounds = value
            .parse()
            .map_err(|_| format!("--rounds: {value:?} is not a non-negative integer"))?;
    }
    Ok(rounds)
}

fn main() -> ExitCode {
    match parse_rounds(std::env::args().skip(1)) {
        Ok(rounds) => {
            black_box(sleeper_run(rounds));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!(
                "sleeper: {message}\nusage: sleeper [--rounds N]   (default {DEFAULT_ROUNDS})"
            );
            ExitCode::from(2)
        }
    }
}
