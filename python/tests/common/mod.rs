//! What the Python tests share: the CPythons on this machine.
#![allow(dead_code)]

use std::path::PathBuf;

fn skipping() -> bool {
    std::env::var("FLAMEREC_SKIP_PYTHON_TESTS").as_deref() == Ok("1")
}

/// Every CPython 3.8+ found, with its minor version.
pub fn interpreters() -> Vec<(u8, PathBuf)> {
    flamerec_python::installed()
}

/// Whether a minor version from 3.8 to 3.13 is missing from `found`: then
/// the test is skipped under `FLAMEREC_SKIP_PYTHON_TESTS=1` and fails
/// naming it otherwise.
pub fn missing_versions(found: &[(u8, PathBuf)]) -> bool {
    let missing: Vec<u8> = (8..=13u8)
        .filter(|m| !found.iter().any(|(f, _)| f == m))
        .collect();
    if missing.is_empty() {
        return false;
    }
    if skipping() {
        eprintln!("skipped (FLAMEREC_SKIP_PYTHON_TESTS=1): no CPython 3.{missing:?} here");
        return true;
    }
    panic!(
        "this test reads every CPython from 3.8 to 3.13 and finds no 3.{missing:?} (pyenv's under ~/.pyenv/versions, or /usr/bin/python3.X); set FLAMEREC_SKIP_PYTHON_TESTS=1 where they cannot be installed"
    );
}
