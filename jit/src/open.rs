//! Opening another user's file in a shared directory without being led
//! astray: never through a symbolic link, never blocking (a FIFO named like
//! a map must not stall the recorder), only a regular file owned by the
//! process's user or root, and bounded in size.
//!
//! The checks run on the opened descriptor (`fstat`), not on the path, so
//! the file cannot be swapped between the check and the read.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::Refusal;

/// What a file must satisfy to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The uid of the process that writes the file (its effective uid):
    /// the file must be owned by it or by root.
    pub uid: u32,
    /// The largest size read; a file larger than this is refused when
    /// opened, and one that grows past it is read up to it.
    pub max_len: u64,
    /// When the process started ([`process_start`]): a file last written
    /// before then was left by an earlier process with the same pid.
    pub not_before: Option<SystemTime>,
}

/// Why opening failed: the system said no, or the file broke a rule.
#[derive(Debug)]
pub(crate) enum OpenError {
    Io(io::Error),
    Refused(Refusal),
}

/// Opens `path` for reading under `rules`.
pub(crate) fn open(path: &Path, rules: Rules) -> Result<File, OpenError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // O_NOFOLLOW on a final component that is a link.
            Some(libc::ELOOP) => OpenError::Refused(Refusal::SymbolicLink),
            _ => OpenError::Io(e),
        })?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    check(&meta, rules).map_err(OpenError::Refused)?;
    Ok(file)
}

/// The rules on an opened file's metadata.
pub(crate) fn check(meta: &Metadata, rules: Rules) -> Result<(), Refusal> {
    if meta.file_type().is_symlink() {
        return Err(Refusal::SymbolicLink);
    }
    if !meta.file_type().is_file() {
        return Err(Refusal::NotRegular);
    }
    if meta.uid() != rules.uid && meta.uid() != 0 {
        return Err(Refusal::WrongOwner {
            owner: meta.uid(),
            expected: rules.uid,
        });
    }
    if let (Some(start), Ok(written)) = (rules.not_before, meta.modified()) {
        if written < start {
            return Err(Refusal::Stale);
        }
    }
    if meta.len() > rules.max_len {
        return Err(Refusal::TooLarge {
            limit: rules.max_len,
        });
    }
    Ok(())
}

/// The effective uid of `pid`, from `/proc/PID/status`: the owner its
/// perf map and jitdump are created with.
pub fn process_uid(pid: u32) -> io::Result<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no Uid line in status"))
}

/// When `pid` started, to a second (less one, for the rounding): from its
/// start in clock ticks after boot (/proc/PID/stat) and the boot time
/// (/proc/stat).
pub fn process_start(pid: u32) -> io::Result<SystemTime> {
    // The kernel's tick as user space sees it (USER_HZ), 100 on x86-64.
    const TICKS: u64 = 100;
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let (_, rest) = stat
        .rsplit_once(") ")
        .ok_or_else(|| bad("stat without a name"))?;
    // Field 22 of the line, the 20th after the name.
    let ticks: u64 = rest
        .split_whitespace()
        .nth(19)
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| bad("stat without a start time"))?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|b| b.trim().parse().ok())
        .ok_or_else(|| bad("no btime in /proc/stat"))?;
    let secs = (boot + ticks / TICKS).saturating_sub(1);
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn own_uid() -> u32 {
        process_uid(std::process::id()).expect("own status")
    }

    fn rules() -> Rules {
        Rules {
            uid: own_uid(),
            max_len: 100,
            not_before: None,
        }
    }

    #[test]
    fn a_regular_file_of_the_processs_user_opens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("perf-1.map");
        std::fs::write(&p, b"1 2 x\n").expect("write");
        assert!(open(&p, rules()).is_ok());
    }

    #[test]
    fn a_symbolic_link_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target");
        std::fs::write(&target, b"1 2 x\n").expect("write");
        let link = dir.path().join("perf-1.map");
        symlink(&target, &link).expect("symlink");
        assert!(matches!(
            open(&link, rules()),
            Err(OpenError::Refused(Refusal::SymbolicLink))
        ));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("perf-1.map");
        let status = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        // Without O_NONBLOCK this open would wait for a writer forever.
        assert!(matches!(
            open(&p, rules()),
            Err(OpenError::Refused(Refusal::NotRegular))
        ));
    }

    #[test]
    fn a_file_too_large_or_of_another_user_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("perf-1.map");
        std::fs::write(&p, vec![b'x'; 101]).expect("write");
        assert!(matches!(
            open(&p, rules()),
            Err(OpenError::Refused(Refusal::TooLarge { limit: 100 }))
        ));
        std::fs::write(&p, b"small").expect("write");
        // As root the file can be given away; otherwise it is ours and we
        // claim to be someone else.
        let (owner, expected) = match std::os::unix::fs::chown(&p, Some(4321), None) {
            Ok(()) => (4321, 1234),
            Err(_) => (own_uid(), own_uid() + 1),
        };
        let rules = Rules {
            uid: expected,
            max_len: 100,
            not_before: None,
        };
        assert!(matches!(
            open(&p, rules),
            Err(OpenError::Refused(Refusal::WrongOwner { owner: o, expected: e }))
                if (o, e) == (owner, expected)
        ));
    }

    #[test]
    fn a_file_older_than_the_process_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("perf-1.map");
        std::fs::write(&p, b"1 2 x\n").expect("write");
        let started = process_start(std::process::id()).expect("own start");
        assert!(started <= SystemTime::now());
        // Written after this test process started: ours.
        let ours = Rules {
            not_before: Some(started),
            ..rules()
        };
        assert!(open(&p, ours).is_ok());
        // A process that started after the file was written did not write it.
        let later = Rules {
            not_before: Some(SystemTime::now() + Duration::from_secs(60)),
            ..rules()
        };
        assert!(matches!(
            open(&p, later),
            Err(OpenError::Refused(Refusal::Stale))
        ));
    }
}
