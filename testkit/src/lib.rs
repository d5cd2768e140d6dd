//! What flamerec's tests share, written once: every test binary of the
//! workspace takes these from here instead of keeping its own copy (in the
//! spirit of ripgrep's shared test helpers).
//!
//! - The skip rule ([`skip_or_fail`]): a test that cannot run its real
//!   part fails with the cause, unless its documented skip variable
//!   (`FLAMEREC_SKIP_*_TESTS`, see README.md) is `1`; then it says on
//!   stderr what it skipped. Nothing is skipped silently.
//! - The CPythons present ([`mod@python`]): pyenv's and the system's, and a
//!   test that runs on each of a range of versions runs on every one
//!   present, the missing ones skipped by name ([`python::pythons_or_skip`]).
//! - Folded text read by the input layer's own parser ([`folded`]).
//! - The test process's own executable mappings, read by the recorder's
//!   parser of /proc/PID/maps ([`maps`]).
//!
//! A dev-dependency only (`publish = false`); a helper here panics where a
//! test would, naming what went wrong.

pub mod folded;
pub mod maps;
pub mod python;
mod skip;

pub use python::{python, pythons, pythons_or_skip};
pub use skip::{
    skip_or_fail, skipping, SKIP_BPF, SKIP_COLLECTOR, SKIP_CONTAINER, SKIP_JAVA, SKIP_NODE,
    SKIP_PERF, SKIP_PYTHON, SKIP_VM,
};
