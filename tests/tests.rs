//! flamerec's end-to-end tests, one binary (every module below used to be
//! its own, each linking the whole command line). Helpers shared by all of
//! them are in `common`: it runs the `flamerec` binary with HOME redirected
//! into the test build, records (failing with the cause when
//! perf_event_open is unusable, unless FLAMEREC_SKIP_PERF_TESTS=1) and folds.
//!
//! A test that samples states its margin and why it holds on a loaded
//! 2-core machine; `.ci/stress-tests` runs this suite beside a CPU hog.

mod common;

mod accuracy;
mod agent;
mod cli;
mod containers;
mod deep;
mod diff;
mod docs;
mod export;
mod fold_threads;
mod inputs;
mod jit;
mod names;
mod plt;
mod python;
mod record;
mod stacks;
mod vm;
