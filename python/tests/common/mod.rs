//! What the Python tests share: the CPythons on this machine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

fn skipping() -> bool {
    std::env::var("FLAMEREC_SKIP_PYTHON_TESTS").as_deref() == Ok("1")
}

/// Every CPython 3.8+ found, with its minor version.
pub fn interpreters() -> Vec<(u8, PathBuf)> {
    let mut found = Vec::new();
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    if let Some(Ok(dir)) = root.map(|r| std::fs::read_dir(r.join("versions"))) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut parts = name.split('.');
            let (Some("3"), Some(minor)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Ok(minor) = minor.parse::<u8>() else {
                continue;
            };
            let bin = e.path().join(format!("bin/python3.{minor}"));
            if minor >= 8 && bin.is_file() {
                found.push((minor, bin));
            }
        }
    }
    for minor in 8..=13u8 {
        let bin = PathBuf::from(format!("/usr/bin/python3.{minor}"));
        if bin.is_file() {
            found.push((minor, bin));
        }
    }
    found.sort();
    found
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
