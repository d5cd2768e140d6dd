//! A directory of files kept within a total size and an age, the oldest
//! removed first: the local sink's rotated windows and each backend's
//! spool of windows not yet delivered.
//!
//! Files are named so that their names sort by age (the window's start,
//! zero-padded), written under a temporary name and renamed into place, so
//! a reader never sees half a file and a restart finds only whole ones.
//! They are not synced to the disk: a restart of the agent finds them in
//! the page cache; only a crash of the machine loses the last ones (a
//! sync per window cost up to a second on a busy disk, in the delay
//! every window waits).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The bounds of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Total bytes of its files, at most.
    pub max_bytes: u64,
    /// The oldest a file may be.
    pub max_age: Duration,
}

impl Default for Bounds {
    /// 256 MiB and a day.
    fn default() -> Self {
        Bounds {
            max_bytes: 256 << 20,
            max_age: Duration::from_secs(24 * 3600),
        }
    }
}

/// A bounded directory of whole files.
#[derive(Debug)]
pub struct Rotated {
    dir: PathBuf,
    suffix: String,
    bounds: Bounds,
}

impl Rotated {
    /// The directory `dir` (made if missing) for files ending in `suffix`.
    pub fn open(dir: &Path, suffix: &str, bounds: Bounds) -> io::Result<Rotated> {
        fs::create_dir_all(dir)?;
        Ok(Rotated {
            dir: dir.to_path_buf(),
            suffix: suffix.to_string(),
            bounds,
        })
    }

    /// Where it is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` as `NAME` + suffix, then removes the oldest files
    /// until the bounds hold; returns how many it removed.
    pub fn put(&self, name: &str, bytes: &[u8]) -> io::Result<usize> {
        let path = self.dir.join(format!("{name}{}", self.suffix));
        let tmp = self.dir.join(format!(".{name}{}.part", self.suffix));
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        drop(f);
        fs::rename(&tmp, &path)?;
        self.enforce()
    }

    /// The files, oldest first, with their sizes.
    pub fn files(&self) -> io::Result<Vec<(PathBuf, u64)>> {
        let mut files = Vec::new();
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.ends_with(&self.suffix) {
                continue;
            }
            let meta = e.metadata()?;
            if meta.is_file() {
                files.push((e.path(), meta.len()));
            }
        }
        files.sort();
        Ok(files)
    }

    /// The oldest file, if any.
    pub fn oldest(&self) -> io::Result<Option<PathBuf>> {
        Ok(self.files()?.into_iter().next().map(|(p, _)| p))
    }

    /// Removes files older than the age bound, then the oldest until the
    /// total fits; returns how many it removed.
    pub fn enforce(&self) -> io::Result<usize> {
        let files = self.files()?;
        let mut total: u64 = files.iter().map(|(_, n)| n).sum();
        let now = SystemTime::now();
        let mut removed = 0;
        for (path, len) in files {
            let age = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default();
            if total <= self.bounds.max_bytes && age <= self.bounds.max_age {
                break;
            }
            match fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            total -= len;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_within_bytes() {
        let d = tempfile::tempdir().unwrap();
        let bounds = Bounds {
            max_bytes: 250,
            max_age: Duration::from_secs(3600),
        };
        let r = Rotated::open(d.path(), ".bin", bounds).unwrap();
        let mut removed = 0;
        for i in 0..5 {
            removed += r.put(&format!("{i:04}"), &[i as u8; 100]).unwrap();
        }
        let names: Vec<String> = r
            .files()
            .unwrap()
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["0003.bin", "0004.bin"]);
        assert_eq!(removed, 3);
        // Other files are not its own.
        fs::write(d.path().join("notes.txt"), [0; 1000]).unwrap();
        assert_eq!(r.enforce().unwrap(), 0);
        assert_eq!(
            r.oldest().unwrap().unwrap().file_name().unwrap(),
            "0003.bin"
        );
    }

    #[test]
    fn removes_what_is_too_old() {
        let d = tempfile::tempdir().unwrap();
        let bounds = Bounds {
            max_bytes: u64::MAX,
            max_age: Duration::from_secs(60),
        };
        let r = Rotated::open(d.path(), ".bin", bounds).unwrap();
        r.put("0001", b"old").unwrap();
        let old = SystemTime::now() - Duration::from_secs(120);
        fs::File::options()
            .write(true)
            .open(d.path().join("0001.bin"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(r.put("0002", b"new").unwrap(), 1);
        assert_eq!(r.files().unwrap().len(), 1);
    }
}
