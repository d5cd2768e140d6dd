//! inline-heavy: CPU work in functions that are all inlined into one outer function.
//!
//! Usage: `inline-heavy [--units N]` (default: about one second of CPU on a modern core).
//!
//! `inline_heavy_run` is a real (`#[inline(never)]`) function; it calls, in interleaved rounds
//! of 5 + 3 + 2 units, `inline_heavy_alpha`, `inline_heavy_beta` and `inline_heavy_gamma`,
//! which are `#[inline(always)]`: in the binary all the work is inside `inline_heavy_run`'s
//! machine code, and only the debug information (DWARF inlined subroutines, so this sample
//! is built with full debug info, `-C debuginfo=2`) says which helper an instruction
//! belongs to. Folded with inlined frames expanded, the self shares are 50 / 30 / 20% under
//! `inline_heavy_run`; without (`--no-inline`, or perf's symbol table view),
//! `inline_heavy_run` holds nearly 100% of the samples as self time. The helpers cannot be
//! `#[no_mangle]` (an exported function is never inlined), so in the debug information they
//! are `inline_heavy::inline_heavy_alpha` and so on; `inline_heavy_run` is plain.
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;

include!("../work.rs");

/// Units of work run when `--units` is not given; calibrated to about 1 s at opt-level 3
/// (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// Units per round for each helper; their ratio is the expected profile.
const ALPHA_UNITS: u64 = 5;
const BETA_UNITS: u64 = 3;
const GAMMA_UNITS: u64 = 2;
const UNITS_PER_ROUND: u64 = ALPHA_UNITS + BETA_UNITS + GAMMA_UNITS;

/// 50% of the work, inlined into `inline_heavy_run`.
#[inline(always)]
fn inline_heavy_alpha(state: &mut State, units: u64) {
    units_of_work!(state, units, 0x9e37_79b9_7f4a_7c15_u64);
}

/// 30% of the work, inlined into `inline_heavy_run`.
#[inline(always)]
fn inline_heavy_beta(state: &mut State, units: u64) {
    units_of_work!(state, units, 0xbf58_476d_1ce4_e5b9_u64);
}

/// 20% of the work, inlined into `inline_heavy_run`.
#[inline(always)]
fn inline_heavy_gamma(state: &mut State, units: u64) {
    units_of_work!(state, units, 0x94d0_49bb_1331_11eb_u64);
}

/// Runs `units` units (rounded up to whole rounds) and returns a checksum of the state.
#[no_mangle]
#[inline(never)]
fn inline_heavy_run(units: u64) -> u64 {
    let mut state = SEED;
    for _ in 0..units.div_ceil(UNITS_PER_ROUND) {
        inline_heavy_alpha(&mut state, ALPHA_UNITS);
        inline_heavy_beta(&mut state, BETA_UNITS);
        inline_heavy_gamma(&mut state, GAMMA_UNITS);
    }
    state.iter().fold(0, |acc, word| acc ^ word)
}

fn main() -> ExitCode {
    match parse_units(std::env::args().skip(1), DEFAULT_UNITS) {
        Ok(units) => {
            black_box(inline_heavy_run(units));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!(
                "inline-heavy: {message}\nusage: inline-heavy [--units N]   (default {DEFAULT_UNITS})"
            );
            ExitCode::from(2)
        }
    }
}
