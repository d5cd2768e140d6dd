//! proc-tree: CPU work spread over a tree of processes — a fork + exec'd child and a shell
//! pipeline — each process in its own function.
//!
//! Usage: `proc-tree [--units N]` (default: about one second of CPU on a modern core, in all).
//!
//! The process started by the user (the parent) starts itself as a child process
//! (`--role child`: fork + exec, through `std::process::Command`) that runs
//! `proc_tree_child` on 6/20 of the units, and the shell pipeline
//! `sh -c 'proc-tree --role producer … | proc-tree --role consumer'`, runs
//! `proc_tree_parent` on 4/20 meanwhile, and waits for both (all four at once, so a change
//! in the machine's speed during the run skews none of their shares). The producer runs `proc_tree_producer` on 5/20 of the units in chunks,
//! writing one line per chunk with the chunk's size; the consumer reads the lines and runs
//! `proc_tree_consumer` on as many units as each says, 5/20 in all. So a profile's shares
//! are, per process and per function: parent 20%, child 30%, producer 25%, consumer 25%
//! (the shell itself does next to nothing). Every unit runs the same loop body, so the split
//! is exact by construction. All four processes are named `proc-tree`; the functions tell
//! them apart. The work functions are `#[no_mangle]` and `#[inline(never)]`, so their symbol
//! names are plain and identical in every build.
//!
//! This file and the `work.rs` it includes are all of it (no dependencies): `flamerec-samples`
//! compiles it directly with `rustc` as well as through cargo.

use std::hint::black_box;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus};

include!("../work.rs");

/// Units of work run when `--units` is not given, over all processes; calibrated to about
/// 1 s of CPU at opt-level 3 (3.5 µs per unit on a 2-core AMD EPYC VM).
const DEFAULT_UNITS: u64 = 285_000;

/// Twentieths of the units each process runs; their ratio is the expected profile.
const PARENT_TWENTIETHS: u64 = 4;
const CHILD_TWENTIETHS: u64 = 6;
const PRODUCER_TWENTIETHS: u64 = 5;
const CONSUMER_TWENTIETHS: u64 = 5;

/// Units per line the producer writes: about 3.5 ms of work.
const CHUNK_UNITS: u64 = 1000;

/// 4/20 of the work, in the parent process.
#[no_mangle]
#[inline(never)]
fn proc_tree_parent(units: u64) -> u64 {
    checksum_of_work!(units, 0x9e37_79b9_7f4a_7c15_u64)
}

/// 6/20 of the work, in the child process.
#[no_mangle]
#[inline(never)]
fn proc_tree_child(units: u64) -> u64 {
    checksum_of_work!(units, 0xbf58_476d_1ce4_e5b9_u64)
}

/// 5/20 of the work, in the pipeline's first process, one chunk per call.
#[no_mangle]
#[inline(never)]
fn proc_tree_producer(units: u64) -> u64 {
    checksum_of_work!(units, 0x94d0_49bb_1331_11eb_u64)
}

/// 5/20 of the work, in the pipeline's second process, one chunk per call.
#[no_mangle]
#[inline(never)]
fn proc_tree_consumer(units: u64) -> u64 {
    checksum_of_work!(units, 0xd6e8_feb8_6659_fd93_u64)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Parent,
    Child,
    Producer,
    Consumer,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<(Role, u64), String> {
    let mut units = DEFAULT_UNITS;
    let mut role = Role::Parent;
    while let Some(arg) = args.next() {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = || value.clone().or_else(|| args.next());
        match flag.as_str() {
            "--units" => {
                let value = value().ok_or("--units needs a value")?;
                units = value
                    .parse()
                    .map_err(|_| format!("--units: {value:?} is not a non-negative integer"))?;
            }
            // Internal: how the parent starts its children.
            "--role" => {
                role = match value().ok_or("--role needs a value")?.as_str() {
                    "child" => Role::Child,
                    "producer" => Role::Producer,
                    "consumer" => Role::Consumer,
                    other => return Err(format!("--role: unknown role {other:?}")),
                };
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    Ok((role, units))
}

/// `path` quoted for `sh`.
fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

fn check(what: &str, status: ExitStatus) -> io::Result<()> {
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("{what} failed: {status}")))
    }
}

fn run_parent(units: u64) -> io::Result<u64> {
    let twentieth = units.div_ceil(20);
    let exe = std::env::current_exe()?;
    // The child and the pipeline run while the parent works: all four processes share the
    // machine at the same time, so a change in its speed (a busy host) skews none of them.
    let mut child = Command::new(&exe)
        .args(["--role", "child", "--units"])
        .arg((twentieth * CHILD_TWENTIETHS).to_string())
        .spawn()?;
    // Both halves get the same number of units: the consumer runs what the producer sends.
    debug_assert_eq!(PRODUCER_TWENTIETHS, CONSUMER_TWENTIETHS);
    let quoted = shell_quote(&exe);
    let pipeline = format!(
        "{quoted} --role producer --units {} | {quoted} --role consumer",
        twentieth * PRODUCER_TWENTIETHS
    );
    let mut shell = Command::new("sh").arg("-c").arg(&pipeline).spawn()?;
    let checksum = black_box(proc_tree_parent(twentieth * PARENT_TWENTIETHS));
    check("the child process", child.wait()?)?;
    check("the pipeline", shell.wait()?)?;
    Ok(checksum)
}

fn run_producer(units: u64) -> io::Result<u64> {
    let mut out = BufWriter::new(io::stdout().lock());
    let mut checksum = 0;
    let mut left = units;
    while left > 0 {
        let chunk = left.min(CHUNK_UNITS);
        checksum ^= black_box(proc_tree_producer(chunk));
        writeln!(out, "{chunk}")?;
        // Each chunk goes out at once, so the consumer works alongside.
        out.flush()?;
        left -= chunk;
    }
    Ok(checksum)
}

fn run_consumer() -> io::Result<u64> {
    let mut checksum = 0;
    for line in io::stdin().lock().lines() {
        let line = line?;
        let chunk: u64 = line.trim().parse().map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, format!("bad chunk {line:?}"))
        })?;
        checksum ^= black_box(proc_tree_consumer(chunk));
    }
    Ok(checksum)
}

fn main() -> ExitCode {
    let (role, units) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!(
                "proc-tree: {message}\nusage: proc-tree [--units N]   (default {DEFAULT_UNITS})"
            );
            return ExitCode::from(2);
        }
    };
    let result = match role {
        Role::Parent => run_parent(units),
        Role::Child => Ok(black_box(proc_tree_child(units))),
        Role::Producer => run_producer(units),
        Role::Consumer => run_consumer(),
    };
    match result {
        Ok(checksum) => {
            black_box(checksum);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("proc-tree ({role:?}): {error}");
            ExitCode::FAILURE
        }
    }
}
