//! recursion: CPU work at the bottom of a 250-frame-deep recursion.
//!
//! Usage: `recursion [--units N]` (default: about one second of CPU on a modern core).
//!
//! `recursion_run` calls `recursion_descend(250, …)`, which calls itself until the depth is
//! 0 — 251 frames of `recursion_descend` on the stack — and there calls `recursion_leaf`,
//! which does all the work. So nearly every sample's leaf is `recursion_leaf`, and a
//! profiler that unwinds whole stacks shows 251 `recursion_descend` frames above it, under
//! `recursion_run`. Kernel-walked frame-pointer callchains stop at
//! `kernel.perf_event_max_stack` entries (127 by default), so this is also the sample that
//! shows where a profiler cuts deep stacks. The functions are `#[no_mangle]` and
//! `#[inline(never)]`, so their symbol names are plain and identical in every build.
//!
//! This file is self-contained (no dependencies, no sibling modules): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;

/// Units of work run when `--units` is not given; calibrated to about 1 s at opt-level 3
/// (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// How deep `recursion_descend` recurses below its first call.
const DEPTH: u32 = 250;

/// Xorshift steps over the whole state per unit: large enough that call overhead is noise.
const STEPS_PER_UNIT: u32 = 1024;

type State = [u64; 8];

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

/// All the work, at the bottom of the recursion.
#[no_mangle]
#[inline(never)]
fn recursion_leaf(units: u64) -> u64 {
    let mut state: State = [1, 2, 3, 4, 5, 6, 7, 8];
    units_of_work!(&mut state, units, 0_u64);
    state[0] ^ state[1] ^ state[2] ^ state[3] ^ state[4] ^ state[5] ^ state[6] ^ state[7]
}

/// One frame per level: `depth` more below this one, then `recursion_leaf`.
#[no_mangle]
#[inline(never)]
fn recursion_descend(depth: u32, units: u64) -> u64 {
    // `black_box` around the depth stops LLVM from unrolling the recursion, and around each
    // result keeps the calls from being tail calls, which would reuse this frame.
    let below = if black_box(depth) == 0 {
        recursion_leaf(units)
    } else {
        recursion_descend(depth - 1, units)
    };
    black_box(below).rotate_left(1)
}

/// The recursion's root.
#[no_mangle]
#[inline(never)]
fn recursion_run(units: u64) -> u64 {
    black_box(recursion_descend(DEPTH, units))
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
    match parse_units(std::env::args().skip(1)) {
        Ok(units) => {
            black_box(recursion_run(units));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!(
                "recursion: {message}\nusage: recursion [--units N]   (default {DEFAULT_UNITS})"
            );
            ExitCode::from(2)
        }
    }
}
