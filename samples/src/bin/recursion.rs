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
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;

include!("../work.rs");

/// Units of work run when `--units` is not given; calibrated to about 1 s at opt-level 3
/// (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// How deep `recursion_descend` recurses below its first call.
const DEPTH: u32 = 250;

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

fn main() -> ExitCode {
    match parse_units(std::env::args().skip(1), DEFAULT_UNITS) {
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
