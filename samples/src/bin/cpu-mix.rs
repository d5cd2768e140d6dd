//! cpu-mix: CPU work split across three named functions in fixed proportions.
//!
//! Usage: `cpu-mix [--units N] [--slow-gamma K] [--slower FUNC=PCT]...` (default: about
//! one second of CPU on a modern core).
//!
//! `--slow-gamma K` is a deliberate regression for diff tests: `cpu_mix_gamma` does K times
//! its units per round (K = 3: shares 5/14, 3/14, 6/14 ≈ 36/21/43%).
//!
//! `--slower FUNC=PCT` (FUNC `alpha`, `beta`, `gamma` or `all`; PCT a whole percent, 0–1000)
//! makes each unit of FUNC PCT percent longer: its inner loop runs `1024 × (100 + PCT) / 100`
//! steps instead of 1024. The regression gate's tests and benchmark use it: `beta=10` makes
//! `cpu_mix_beta` 10% slower (CPU time 1.10× its own, the whole run 1.03×, shares
//! 50/33/20 over 1.03 ≈ 48.5/32.0/19.4%); `all=10` makes every function, and the run, 1.10×
//! slower with the shares unchanged.
//!
//! The work is counted in units, not in time: every unit runs the same loop body, so a
//! profile's self shares follow the unit split exactly — `cpu_mix_alpha` 50%,
//! `cpu_mix_beta` 30%, `cpu_mix_gamma` 20%. The functions are called interleaved, in rounds
//! of 5 + 3 + 2 units, so the shares hold for any prefix of the run (a recording cut short);
//! each round starts at a pseudo-random one of the three, so no sampling clock locks onto the
//! rounds' period.
//! The stack is `main → cpu_mix_run → cpu_mix_{alpha,beta,gamma}`; all three levels are
//! `#[no_mangle]` and `#[inline(never)]`, so their symbol names are plain and identical in
//! every build (with or without frame pointers, by cargo or by `rustc` directly).
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;

include!("../work.rs");

/// Units of work run when `--units` is not given; calibrated to about 1 s at opt-level 3
/// (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// Units per round for each function; their ratio is the expected profile.
const ALPHA_UNITS: u64 = 5;
const BETA_UNITS: u64 = 3;
const GAMMA_UNITS: u64 = 2;
const UNITS_PER_ROUND: u64 = ALPHA_UNITS + BETA_UNITS + GAMMA_UNITS;

/// Largest `--slower` percentage.
const MAX_SLOWER_PCT: u32 = 1000;

/// 50% of the work.
#[no_mangle]
#[inline(never)]
fn cpu_mix_alpha(state: &mut State, units: u64, steps: u32) {
    units_of_work!(state, units, steps, 0x9e37_79b9_7f4a_7c15_u64);
}

/// 30% of the work.
#[no_mangle]
#[inline(never)]
fn cpu_mix_beta(state: &mut State, units: u64, steps: u32) {
    units_of_work!(state, units, steps, 0xbf58_476d_1ce4_e5b9_u64);
}

/// 20% of the work.
#[no_mangle]
#[inline(never)]
fn cpu_mix_gamma(state: &mut State, units: u64, steps: u32) {
    units_of_work!(state, units, steps, 0x94d0_49bb_1331_11eb_u64);
}

/// What the command line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Args {
    units: u64,
    slow_gamma: u64,
    /// Inner-loop steps per unit of alpha, beta and gamma.
    steps: [u32; 3],
}

/// Runs `args.units` units (rounded up to whole rounds; gamma's share times `slow_gamma`)
/// and returns a checksum of the state.
#[no_mangle]
#[inline(never)]
fn cpu_mix_run(args: &Args) -> u64 {
    let mut state = SEED;
    let [alpha, beta, gamma] = args.steps;
    let gamma_units = GAMMA_UNITS * args.slow_gamma;
    // Each round starts at a pseudo-random one of the three functions, so
    // the run has no period a sampling clock could lock onto: with a fixed
    // order (a round is ≈ 30 µs), a 4999 Hz clock sampled alpha 48% and,
    // with every function 30% slower, 50% — shares moved by the round's
    // length, not the work.
    let mut pick: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..args.units.div_ceil(UNITS_PER_ROUND) {
        pick ^= pick << 13;
        pick ^= pick >> 7;
        pick ^= pick << 17;
        match pick % 3 {
            0 => {
                cpu_mix_alpha(&mut state, ALPHA_UNITS, alpha);
                cpu_mix_beta(&mut state, BETA_UNITS, beta);
                cpu_mix_gamma(&mut state, gamma_units, gamma);
            }
            1 => {
                cpu_mix_beta(&mut state, BETA_UNITS, beta);
                cpu_mix_gamma(&mut state, gamma_units, gamma);
                cpu_mix_alpha(&mut state, ALPHA_UNITS, alpha);
            }
            _ => {
                cpu_mix_gamma(&mut state, gamma_units, gamma);
                cpu_mix_alpha(&mut state, ALPHA_UNITS, alpha);
                cpu_mix_beta(&mut state, BETA_UNITS, beta);
            }
        }
    }
    state.iter().fold(0, |acc, word| acc ^ word)
}

/// Steps per unit `pct` percent above [`STEPS_PER_UNIT`].
fn slower_steps(pct: u32) -> u32 {
    STEPS_PER_UNIT * (100 + pct) / 100
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        units: DEFAULT_UNITS,
        slow_gamma: 1,
        steps: [STEPS_PER_UNIT; 3],
    };
    while let Some(arg) = args.next() {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), value.to_owned()),
            None => {
                let value = args.next().ok_or(format!("{arg} needs a value"))?;
                (arg, value)
            }
        };
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|_| format!("{flag}: {text:?} is not a non-negative integer"))
        };
        match flag.as_str() {
            "--units" => out.units = number(&value)?,
            "--slow-gamma" => out.slow_gamma = number(&value)?,
            "--slower" => {
                let (func, pct) = value
                    .split_once('=')
                    .ok_or(format!("--slower: {value:?} is not FUNC=PCT"))?;
                let pct = u32::try_from(number(pct)?)
                    .ok()
                    .filter(|&p| p <= MAX_SLOWER_PCT)
                    .ok_or(format!("--slower: {pct} is over {MAX_SLOWER_PCT} percent"))?;
                let which: &[usize] = match func {
                    "alpha" => &[0],
                    "beta" => &[1],
                    "gamma" => &[2],
                    "all" => &[0, 1, 2],
                    other => {
                        return Err(format!(
                            "--slower: {other:?} is not alpha, beta, gamma or all"
                        ))
                    }
                };
                for &i in which {
                    out.steps[i] = slower_steps(pct);
                }
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
        Ok(args) => {
            black_box(cpu_mix_run(&args));
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("cpu-mix: {message}\nusage: cpu-mix [--units N] [--slow-gamma K] [--slower alpha|beta|gamma|all=PCT]...   (default {DEFAULT_UNITS} units, K = 1)");
            ExitCode::from(2)
        }
    }
}
