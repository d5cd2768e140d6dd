//! syscall-loop: a kernel-heavy loop of `read` and `write` system calls.
//!
//! Usage: `syscall-loop [--iterations N]` (default: about one second on a modern core).
//!
//! Each iteration reads 64 KiB from `/dev/zero` (the kernel zero-fills the user buffer) and
//! writes them to `/dev/null` (the kernel discards them), so nearly all the time is spent
//! in the kernel, and most of it under `syscall_loop_read`. The stack is
//! `main → syscall_loop_run → syscall_loop_{read,write} → std → libc → kernel`; the three
//! named levels are `#[no_mangle]` and `#[inline(never)]`, so their symbol names are plain
//! and identical in every build.
//!
//! This file is self-contained (no dependencies, no sibling modules): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::fs::File;
use std::hint::black_box;
use std::io::{self, Read, Write};
use std::process::ExitCode;

/// Iterations run when `--iterations` is not given; calibrated to about 1 s
/// (0.85 µs per iteration on a 2-core AMD EPYC VM).
const DEFAULT_ITERATIONS: u64 = 1_200_000;

const BUFFER_BYTES: usize = 64 * 1024;

// The `black_box` around each call's result keeps it from being a tail call: a tail call
// would replace this function's frame with std's, and it would vanish from the stacks.

/// One `read(2)` of up to a buffer's worth of zeros.
#[no_mangle]
#[inline(never)]
fn syscall_loop_read(zero: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    black_box(zero.read(buffer))
}

/// `write(2)` of the bytes just read; `/dev/null` takes them all at once.
#[no_mangle]
#[inline(never)]
fn syscall_loop_write(null: &mut File, bytes: &[u8]) -> io::Result<()> {
    black_box(null.write_all(bytes))
}

/// Runs `iterations` read + write pairs and returns the number of bytes moved.
#[no_mangle]
#[inline(never)]
fn syscall_loop_run(zero: &mut File, null: &mut File, iterations: u64) -> io::Result<u64> {
    let mut buffer = vec![0u8; BUFFER_BYTES];
    let mut moved = 0u64;
    for _ in 0..iterations {
        let n = syscall_loop_read(zero, &mut buffer)?;
        syscall_loop_write(null, &buffer[..n])?;
        moved += n as u64;
    }
    Ok(moved)
}

fn parse_iterations(mut args: impl Iterator<Item = String>) -> Result<u64, String> {
    let mut iterations = DEFAULT_ITERATIONS;
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--iterations" => args.next().ok_or("--iterations needs a value")?,
            other => match other.strip_prefix("--iterations=") {
                Some(value) => value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        };
        iterations = value
            .parse()
            .map_err(|_| format!("--iterations: {value:?} is not a non-negative integer"))?;
    }
    Ok(iterations)
}

fn run(iterations: u64) -> io::Result<u64> {
    let mut zero = File::open("/dev/zero")?;
    let mut null = File::options().write(true).open("/dev/null")?;
    syscall_loop_run(&mut zero, &mut null, iterations)
}

fn main() -> ExitCode {
    let iterations = match parse_iterations(std::env::args().skip(1)) {
        Ok(iterations) => iterations,
        Err(message) => {
            eprintln!(
                "syscall-loop: {message}\n\
                 usage: syscall-loop [--iterations N]   (default {DEFAULT_ITERATIONS})"
            );
            return ExitCode::from(2);
        }
    };
    match run(iterations) {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("syscall-loop: {error}");
            ExitCode::FAILURE
        }
    }
}
