//! The CPythons the tests run: pyenv's (`$PYENV_ROOT`, else `~/.pyenv`:
//! every `versions/3.X.Y/bin/python3.X`) and the system's
//! (`/usr/bin/python3.X`, Debian's, linked statically).
//!
//! A test that checks every CPython of a range runs on each one present and
//! skips the missing ones by name under `FLAMEREC_SKIP_PYTHON_TESTS=1`
//! ([`pythons_or_skip`]): one version that cannot be installed does not
//! keep the others from being tested.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{skip_or_fail, SKIP_PYTHON};

/// The minor versions looked for as `/usr/bin/python3.X`.
const SYSTEM_MINORS: RangeInclusive<u8> = 8..=13;

/// pyenv's root: `$PYENV_ROOT`, else `~/.pyenv`.
fn pyenv_root() -> Option<PathBuf> {
    std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")))
}

/// The minor version a pyenv version directory is named for: `3.12.1`,
/// `3.13-dev` and `3.13t` are 12, 13 and 13.
fn minor_of(version: &str) -> Option<u8> {
    let rest = version.strip_prefix("3.")?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..digits].parse().ok()
}

/// pyenv's CPythons 3 under `root`: `(minor, versions/3.X.Y/bin/python3.X)`
/// for each version directory that has its interpreter, sorted.
fn pyenv_in(root: &Path) -> Vec<(u8, PathBuf)> {
    let Ok(dir) = std::fs::read_dir(root.join("versions")) else {
        return Vec::new();
    };
    let mut found: Vec<(u8, PathBuf)> = dir
        .flatten()
        .filter_map(|e| {
            let minor = minor_of(e.file_name().to_str()?)?;
            let bin = e.path().join(format!("bin/python3.{minor}"));
            bin.is_file().then_some((minor, bin))
        })
        .collect();
    found.sort();
    found
}

/// Every CPython 3.8 and later installed where the tests look, with its
/// minor version, sorted: pyenv's (see the module) and the system's
/// `/usr/bin/python3.8` to `python3.13`. A version may be there twice
/// (pyenv's build and Debian's).
pub fn pythons() -> Vec<(u8, PathBuf)> {
    let mut found: Vec<(u8, PathBuf)> = pyenv_root()
        .map(|r| pyenv_in(&r))
        .unwrap_or_default()
        .into_iter()
        .filter(|(minor, _)| *minor >= 8)
        .collect();
    for minor in SYSTEM_MINORS {
        let bin = PathBuf::from(format!("/usr/bin/python3.{minor}"));
        if bin.is_file() {
            found.push((minor, bin));
        }
    }
    found.sort();
    found
}

/// The minor versions of `required` that none of `found` is.
fn missing(found: &[(u8, PathBuf)], required: RangeInclusive<u8>) -> Vec<u8> {
    required
        .filter(|m| !found.iter().any(|(f, _)| f == m))
        .collect()
}

/// `3.9, 3.12`.
fn names(minors: impl IntoIterator<Item = u8>) -> String {
    minors
        .into_iter()
        .map(|m| format!("3.{m}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The CPythons present here for a test that runs on each: every one
/// [`pythons`] finds from 3.`required.start()` on (a newer one installed is
/// tested too), where each minor version of `required` must be. Where some
/// of those are missing the test fails naming them, unless
/// `FLAMEREC_SKIP_PYTHON_TESTS=1` — then the missing ones are said by name
/// on stderr and the ones present are returned, to be tested still. With
/// none present and the variable set, the list is empty and stderr says
/// nothing is tested.
#[track_caller]
pub fn pythons_or_skip(required: RangeInclusive<u8>) -> Vec<(u8, PathBuf)> {
    assert!(!required.is_empty(), "no versions required: {required:?}");
    let (first, last) = (*required.start(), *required.end());
    let found: Vec<(u8, PathBuf)> = pythons().into_iter().filter(|(m, _)| *m >= first).collect();
    let missing = missing(&found, required);
    if missing.is_empty() {
        return found;
    }
    skip_or_fail(
        SKIP_PYTHON,
        format!(
            "this test runs on every CPython 3.{first} to 3.{last} and finds no {} here \
             (pyenv's, under $PYENV_ROOT or ~/.pyenv, or /usr/bin/python3.X)",
            names(missing)
        ),
    );
    if found.is_empty() {
        eprintln!("no CPython 3.{first} to 3.{last} here: nothing is tested");
    } else {
        let mut present: Vec<u8> = found.iter().map(|(m, _)| *m).collect();
        present.dedup();
        eprintln!("tested on the CPythons present: {}", names(present));
    }
    found
}

/// Whether `python -c pass` succeeds: a pyenv shim on PATH runs only where
/// its version is selected.
fn runs(python: &Path) -> bool {
    Command::new(python)
        .args(["-c", "pass"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// CPython 3.`minor` for a test that needs that one version: pyenv's
/// (the last of its builds of that version, by name), else `python3.minor`
/// on PATH, whichever runs. `None` when there is none and
/// `FLAMEREC_SKIP_PYTHON_TESTS=1` (said on stderr); a missing one fails
/// the test naming it otherwise.
#[track_caller]
pub fn python(minor: u8) -> Option<PathBuf> {
    let name = format!("python3.{minor}");
    let pyenv = pyenv_root()
        .map(|r| pyenv_in(&r))
        .unwrap_or_default()
        .into_iter()
        .filter(|(m, _)| *m == minor)
        .map(|(_, p)| p)
        .next_back();
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(&name))
                .find(|p| p.is_file() && runs(p))
        })
    };
    let found = pyenv.filter(|p| runs(p)).or_else(on_path);
    if found.is_none() {
        skip_or_fail(
            SKIP_PYTHON,
            format!("no {name} that runs here (pyenv's or on PATH), so this test cannot run it"),
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_directories_name_their_minor_version() {
        assert_eq!(minor_of("3.12.1"), Some(12));
        assert_eq!(minor_of("3.13-dev"), Some(13));
        assert_eq!(minor_of("3.13t"), Some(13));
        assert_eq!(minor_of("3.8"), Some(8));
        assert_eq!(minor_of("2.7.18"), None);
        assert_eq!(minor_of("pypy3.10-7.3.17"), None);
        assert_eq!(minor_of("3.x"), None);
    }

    #[test]
    fn pyenv_versions_with_their_interpreter_are_found_sorted() {
        let root = tempfile::tempdir().expect("a temporary directory");
        for (version, bin) in [
            ("3.12.1", Some("python3.12")),
            ("3.9.18", Some("python3.9")),
            ("3.11.7", None),
            ("3.10.13", Some("python3.9")),
            ("2.7.18", Some("python2.7")),
        ] {
            let dir = root.path().join("versions").join(version).join("bin");
            std::fs::create_dir_all(&dir).expect("a version directory");
            if let Some(bin) = bin {
                std::fs::write(dir.join(bin), "").expect("an interpreter");
            }
        }
        let versions = root.path().join("versions");
        assert_eq!(
            pyenv_in(root.path()),
            [
                (9, versions.join("3.9.18/bin/python3.9")),
                (12, versions.join("3.12.1/bin/python3.12")),
            ]
        );
        assert!(pyenv_in(&root.path().join("none")).is_empty());
    }

    #[test]
    fn the_missing_versions_are_those_no_interpreter_is() {
        let found = [
            (8, PathBuf::from("a")),
            (11, PathBuf::from("b")),
            (11, PathBuf::from("c")),
        ];
        assert_eq!(missing(&found, 8..=13), [9, 10, 12, 13]);
        assert!(missing(&found, 11..=11).is_empty());
        assert_eq!(names([9, 12]), "3.9, 3.12");
    }

    /// What this machine has: each one found is a CPython of its version.
    #[test]
    fn each_python_found_is_of_its_version() {
        for (minor, python) in pythons() {
            assert!(minor >= 8, "{}", python.display());
            let name = python.file_name().and_then(|n| n.to_str());
            assert_eq!(name, Some(format!("python3.{minor}").as_str()));
        }
    }
}
