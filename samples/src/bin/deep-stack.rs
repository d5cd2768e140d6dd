//! deep-stack: CPU work at the bottom of stacks deeper than any sampled copy of them, on
//! two threads.
//!
//! Usage: `deep-stack [--units N] [--alternate] [--round-units N]` (default: about one
//! second of CPU on a modern core, in all; rounds of 10,000 units).
//!
//! The main thread and a second thread (`deep-2`) each run `deep_stack_run`, which calls
//! `deep_stack_descend_a(DEPTH, …)`: it recurses until the depth is 0 — `DEPTH + 1` frames
//! of 2 KiB or more each, over 200 KiB of stack — and there calls `deep_stack_leaf`, which
//! does the work. Every frame fills its buffer with values that depend on its depth, its
//! chain and the round, so no frame ever holds the bytes of another (of another chain, or
//! of an earlier round at the same place). The threads come back up and go down again
//! every ≈ 35 ms (rounds of 10,000 units; `--round-units` sets another length, and short
//! rounds make a profiler's later look at the stack find it changed).
//!
//! With `--alternate`, the rounds alternate between chain `a` (`deep_stack_descend_a`) and
//! chain `b` (`deep_stack_descend_b`), whose frames are the same size: a profiler that
//! completes a stack from the live thread's memory after the fact finds the other chain
//! there every other round, and must not stitch a sample's leaf frames to it.
//!
//! So a whole stack is, below `deep_stack_run`, exactly `DEPTH + 1` frames of one chain's
//! descend function and `deep_stack_leaf`. The functions are `#[no_mangle]` and
//! `#[inline(never)]`, so their symbol names are plain and identical in every build.
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::process::ExitCode;

include!("../work.rs");

/// Units of work run when `--units` is not given; calibrated to about 1 s at opt-level 3
/// (3.5 µs per unit on a 2-core AMD EPYC VM), split between the two threads.
const DEFAULT_UNITS: u64 = 285_000;

/// How deep the recursion goes below its first call.
const DEPTH: u32 = 100;

/// Units per round by default: each round descends, works, and comes back up (≈ 35 ms).
const UNITS_PER_ROUND: u64 = 10_000;

/// Words of each frame's buffer (2 KiB).
const FRAME_WORDS: usize = 256;

/// All the work, at the bottom of the recursion.
#[no_mangle]
#[inline(never)]
fn deep_stack_leaf(units: u64) -> u64 {
    let mut state: State = [1, 2, 3, 4, 5, 6, 7, 8];
    units_of_work!(&mut state, units, 0);
    state[0] ^ state[1] ^ state[2] ^ state[3] ^ state[4] ^ state[5] ^ state[6] ^ state[7]
}

/// One 2 KiB frame per level of chain `a`: `depth` more below this one, then the leaf.
#[no_mangle]
#[inline(never)]
fn deep_stack_descend_a(depth: u32, units: u64, round: u64) -> u64 {
    let mut frame = [0u64; FRAME_WORDS];
    fill(&mut frame, 0xa000_0000 | round << 32, depth);
    // `black_box` on the buffer keeps it in the frame; using it after the call keeps the
    // call from being a tail call, which would reuse this frame.
    let below = if black_box(depth) == 0 {
        deep_stack_leaf(units)
    } else {
        deep_stack_descend_a(depth - 1, units, round)
    };
    black_box(&frame)[depth as usize % FRAME_WORDS] ^ below
}

/// Chain `b`: the same frame size as chain `a`, other contents, another name.
#[no_mangle]
#[inline(never)]
fn deep_stack_descend_b(depth: u32, units: u64, round: u64) -> u64 {
    let mut frame = [0u64; FRAME_WORDS];
    fill(&mut frame, 0xb000_0000 | round << 32, depth);
    let below = if black_box(depth) == 0 {
        deep_stack_leaf(units)
    } else {
        deep_stack_descend_b(depth - 1, units, round)
    };
    black_box(&frame)[depth as usize % FRAME_WORDS] ^ below
}

/// Fills a frame's buffer with values of its chain (and round) and depth.
#[inline(always)]
fn fill(frame: &mut [u64; FRAME_WORDS], chain: u64, depth: u32) {
    let mut i = 0;
    while i < FRAME_WORDS {
        frame[i] = chain | (u64::from(depth) << 12) | i as u64;
        i += 1;
    }
    black_box(frame);
}

/// One thread's work: rounds down the recursion and back.
#[no_mangle]
#[inline(never)]
fn deep_stack_run(units: u64, alternate: bool, per_round: u64) -> u64 {
    let mut acc = 0u64;
    let mut done = 0;
    let mut round = 0u64;
    while done < units {
        let n = per_round.max(1).min(units - done);
        acc ^= if alternate && round % 2 == 1 {
            deep_stack_descend_b(DEPTH, n, round)
        } else {
            deep_stack_descend_a(DEPTH, n, round)
        };
        done += n;
        round += 1;
    }
    black_box(acc)
}

/// What the command line asks for.
struct Args {
    units: u64,
    alternate: bool,
    per_round: u64,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        units: DEFAULT_UNITS,
        alternate: false,
        per_round: UNITS_PER_ROUND,
    };
    while let Some(arg) = args.next() {
        let (flag, value) = match arg.as_str() {
            "--alternate" => {
                a.alternate = true;
                continue;
            }
            "--units" | "--round-units" => {
                let value = args.next().ok_or(format!("{arg} needs a value"))?;
                (arg.clone(), value)
            }
            other => match other.split_once('=') {
                Some((f @ ("--units" | "--round-units"), v)) => (f.to_owned(), v.to_owned()),
                _ => return Err(format!("unexpected argument {other:?}")),
            },
        };
        let n = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a non-negative integer"))?;
        if flag == "--units" {
            a.units = n;
        } else {
            a.per_round = n;
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    match parse(std::env::args().skip(1)) {
        Ok(Args {
            units,
            alternate,
            per_round,
        }) => {
            let second = std::thread::Builder::new()
                .name("deep-2".into())
                .stack_size(8 << 20)
                .spawn(move || deep_stack_run(units / 2, alternate, per_round));
            let mine = deep_stack_run(units - units / 2, alternate, per_round);
            match second.map(|t| t.join()) {
                Ok(Ok(theirs)) => {
                    black_box(mine ^ theirs);
                    ExitCode::SUCCESS
                }
                _ => {
                    eprintln!("deep-stack: the second thread failed");
                    ExitCode::from(1)
                }
            }
        }
        Err(message) => {
            eprintln!(
                "deep-stack: {message}\nusage: deep-stack [--units N] [--alternate] [--round-units N]   (default {DEFAULT_UNITS}, {UNITS_PER_ROUND})"
            );
            ExitCode::from(2)
        }
    }
}
