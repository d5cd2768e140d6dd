//! How deep the kernel walks frame-pointer callchains, and raising it.
//!
//! The kernel cuts a sample's callchain (kernel and user addresses
//! together) at the event's `sample_max_stack`, which may not exceed
//! `kernel.perf_event_max_stack` (127 by default; asking for more is
//! refused with EOVERFLOW). In the frame-pointer modes the recorder asks
//! for [`WANTED`]; as root it raises the sysctl to that for the recording
//! and puts the old value back at the end (the kernel refuses the change,
//! EBUSY, while any perf event with callchains is open: then the value in
//! force is used). Overlapping recordings share the raise through a ledger
//! file ([`LEDGER`]): the last to end puts the first one's value back. A
//! deferred user callchain is not bound by it: the kernel's deferred
//! unwinder keeps one page of entries per task, [`DEFERRED_CAP`] addresses.

use crate::defer::DEFERRED_CAP;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const SYSCTL: &str = "/proc/sys/kernel/perf_event_max_stack";

/// Callchain addresses asked for in the frame-pointer modes.
pub(crate) const WANTED: u16 = 1024;

/// What the user should know about stacks cut at the kernel's caps
/// (`cut`, of `samples`; `fp_cap`: the frame-pointer cap in force) and
/// deferred user parts that never met their samples (`deferred`, in
/// `-g fp,defer`; `lost`: samples lost, one reason a part never came).
pub(crate) fn warnings(
    cut: u64,
    fp_cap: Option<usize>,
    deferred: Option<&crate::defer::DeferStats>,
    lost: u64,
    samples: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if cut > 0 {
        let cap = fp_cap.unwrap_or(0);
        out.push(format!(
            "{cut} of {samples} stacks reached the kernel's callchain cap ({cap} frames{}) and are cut there{}",
            if deferred.is_some() {
                format!(", {DEFERRED_CAP} for a deferred user part")
            } else {
                String::new()
            },
            if crate::sys::is_root() || cap >= usize::from(WANTED) {
                String::new()
            } else {
                format!(
                    "; as root flamerec raises kernel.perf_event_max_stack to {WANTED} for the recording"
                )
            }
        ));
    }
    let Some(d) = deferred else { return out };
    if d.unmatched_samples > 0 {
        let why = if lost > 0 {
            "their user stack was in a record the kernel dropped with the lost samples, or their thread exited, or recording stopped, before it returned to user space"
        } else {
            "their thread exited, or recording stopped, before it returned to user space, where the kernel walks the user stack (-g fp,defer)"
        };
        out.push(format!(
            "{} samples kept only their kernel frames: {why}",
            d.unmatched_samples
        ));
    }
    if d.orphan_records > 0 {
        out.push(format!(
            "{} deferred user stacks came for samples that were lost",
            d.orphan_records
        ));
    }
    out
}

/// Where root recorders note the sysctl's value from before any of them
/// raised it: overlapping recordings raise it once and the last to end puts
/// it back (the kernel refuses the change while another has callchain
/// events open), and a recorder that was killed leaves the value for the
/// next one to put back. Each holds a shared lock on its `.users` file
/// while recording.
const LEDGER: &str = "/run/flamerec-max-stack";

/// The ledger file (locked exclusively while read or changed) and the
/// lock file its users hold shared while they record.
#[derive(Debug)]
struct Ledger {
    notes: File,
    users: File,
}

impl Ledger {
    /// Opens both and takes the ledger exclusively; `None` without them.
    fn open(path: &Path) -> Option<Ledger> {
        let open = |p: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .ok()
        };
        let notes = open(path)?;
        let users = open(&path.with_extension("users"))?;
        notes.lock().ok()?;
        Some(Ledger { notes, users })
    }
}

/// The `sample_max_stack` in force for a recording, and what to put back.
#[derive(Debug)]
pub(crate) struct MaxStack {
    /// What to ask for (at most the sysctl).
    pub value: u16,
    /// The sysctl's value before it was raised, to write back.
    restore: Option<u32>,
    /// The ledger, and its users' lock (held shared while this recording
    /// uses the raised value).
    ledger: Option<Ledger>,
    sysctl: PathBuf,
    /// What was done, for the user.
    pub note: Option<String>,
}

impl MaxStack {
    /// Reads the sysctl and, as `root`, raises it to [`WANTED`].
    pub(crate) fn raise(root: bool) -> MaxStack {
        Self::raise_at(root, Path::new(SYSCTL), Path::new(LEDGER))
    }

    fn raise_at(root: bool, sysctl: &Path, ledger: &Path) -> MaxStack {
        let unchanged = |value| MaxStack {
            value,
            restore: None,
            ledger: None,
            sysctl: sysctl.to_path_buf(),
            note: None,
        };
        let Some(current) = read_u32(sysctl) else {
            // Unknown: leave it to the kernel's default.
            return unchanged(0);
        };
        let kept = current.min(u32::from(u16::MAX)) as u16;
        if !root {
            return unchanged(kept.min(WANTED));
        }
        let Some(ledger) = Ledger::open(ledger) else {
            // No ledger (no /run): raise and restore alone.
            return Self::raised(sysctl, current, current, None);
        };
        // The ledger speaks only while the value is raised: below it, a
        // note left there is stale (someone set the sysctl since).
        let original = if current >= u32::from(WANTED) {
            read_u32_from(&ledger.notes).unwrap_or(current)
        } else {
            current
        };
        if original >= u32::from(WANTED) {
            return unchanged(WANTED);
        }
        let mut m = Self::raised(sysctl, current, original, Some(&ledger.notes));
        if m.restore.is_some() {
            // Held while recording: a recorder ending meanwhile sees it and
            // leaves the value for this one to put back.
            let _ = ledger.users.lock_shared();
            let _ = ledger.notes.unlock();
            m.ledger = Some(ledger);
        }
        m
    }

    /// Raises the sysctl from `current` (unless it is there already) and
    /// notes `original` in `ledger`, to write back at the end.
    fn raised(sysctl: &Path, current: u32, original: u32, ledger: Option<&File>) -> MaxStack {
        let kept = current.min(u32::from(u16::MAX)) as u16;
        let mut m = MaxStack {
            value: WANTED,
            restore: Some(original),
            ledger: None,
            sysctl: sysctl.to_path_buf(),
            note: None,
        };
        if current < u32::from(WANTED) {
            if let Err(e) = fs::write(sysctl, WANTED.to_string()) {
                m.value = kept;
                m.restore = None;
                m.note = Some(format!(
                    "kernel.perf_event_max_stack stays {current} ({}): frame-pointer stacks are cut at {current} frames",
                    busy_or(&e)
                ));
                return m;
            }
            m.note = Some(format!(
                "kernel.perf_event_max_stack raised from {current} to {WANTED} while recording, so frame-pointer stacks up to {WANTED} frames are whole; set back to {original} at the end"
            ));
        }
        if let Some(mut f) = ledger {
            let _ = f
                .set_len(0)
                .and_then(|()| f.seek(SeekFrom::Start(0)))
                .and_then(|_| f.write_all(original.to_string().as_bytes()));
        }
        m
    }

    /// The sysctl went down since it was read (another recorder put it
    /// back): use its value now, and restore nothing.
    pub(crate) fn lowered(&mut self) -> u16 {
        let now = read_u32(&self.sysctl).unwrap_or(0);
        self.value = now.min(u32::from(u16::MAX)) as u16;
        self.restore = None;
        self.ledger = None;
        self.note = Some(format!(
            "kernel.perf_event_max_stack was set back to {now} by another recorder while this one started: frame-pointer stacks are cut at {now} frames"
        ));
        self.value
    }

    /// Puts the sysctl back, unless another recorder still uses the raised
    /// value (it puts it back when it ends); a warning when the kernel
    /// refuses.
    pub(crate) fn restore(&mut self) -> Option<String> {
        let old = self.restore.take()?;
        let ledger = self.ledger.take();
        if let Some(l) = &ledger {
            let _ = l.notes.lock();
            let _ = l.users.unlock();
            if l.users.try_lock().is_err() {
                return None;
            }
        }
        let done = fs::write(&self.sysctl, old.to_string());
        if let (Ok(()), Some(l)) = (&done, &ledger) {
            let _ = l.notes.set_len(0);
        }
        done.err().map(|e| {
            let later = if ledger.is_some() {
                " (or a later frame-pointer recording as root will)"
            } else {
                ""
            };
            format!(
                "kernel.perf_event_max_stack could not be set back to {old} ({}): run `sysctl kernel.perf_event_max_stack={old}`{later}",
                busy_or(&e)
            )
        })
    }
}

impl Drop for MaxStack {
    fn drop(&mut self) {
        // An early return (an error while recording) restores it too.
        let _ = self.restore();
    }
}

fn read_u32(path: &Path) -> Option<u32> {
    read_u32_from(&File::open(path).ok()?)
}

fn read_u32_from(mut f: &File) -> Option<u32> {
    let mut text = String::new();
    f.seek(SeekFrom::Start(0)).ok()?;
    f.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn busy_or(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::EBUSY) {
        "another perf session with callchains is open".into()
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in sysctl (a plain file) and ledger in a temporary folder.
    fn files(value: u32) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("temporary folder");
        let sysctl = dir.path().join("max_stack");
        fs::write(&sysctl, format!("{value}\n")).expect("write");
        let ledger = dir.path().join("ledger");
        (dir, sysctl, ledger)
    }

    #[test]
    fn overlapping_recordings_put_the_first_value_back_when_the_last_ends() {
        let (_dir, sysctl, ledger) = files(127);
        let mut a = MaxStack::raise_at(true, &sysctl, &ledger);
        assert_eq!((a.value, read_u32(&sysctl)), (WANTED, Some(1024)));
        assert!(a
            .note
            .as_deref()
            .is_some_and(|n| n.contains("raised from 127")));
        let mut b = MaxStack::raise_at(true, &sysctl, &ledger);
        assert_eq!(b.value, WANTED);
        // a ends first: b still records with the raised value.
        assert_eq!(a.restore(), None);
        assert_eq!(read_u32(&sysctl), Some(1024));
        assert_eq!(b.restore(), None);
        assert_eq!(read_u32(&sysctl), Some(127));
        assert_eq!(read_u32(&ledger), None, "the ledger is emptied");
    }

    #[test]
    fn a_killed_recorders_raise_is_put_back_by_the_next() {
        let (_dir, sysctl, ledger) = files(127);
        let mut killed = MaxStack::raise_at(true, &sysctl, &ledger);
        // Killed: its lock goes with its file, and nothing else runs.
        drop(killed.ledger.take());
        std::mem::forget(killed);
        assert_eq!(read_u32(&sysctl), Some(1024));
        let mut next = MaxStack::raise_at(true, &sysctl, &ledger);
        assert_eq!(next.value, WANTED);
        next.restore();
        assert_eq!(read_u32(&sysctl), Some(127));
    }

    #[test]
    fn a_value_set_since_a_crash_is_the_one_put_back() {
        let (_dir, sysctl, ledger) = files(400);
        fs::write(&ledger, "127").expect("a stale note");
        let mut m = MaxStack::raise_at(true, &sysctl, &ledger);
        m.restore();
        assert_eq!(read_u32(&sysctl), Some(400));
    }

    #[test]
    fn without_root_nothing_changes() {
        let (_dir, sysctl, ledger) = files(127);
        let mut m = MaxStack::raise_at(false, &sysctl, &ledger);
        assert_eq!(m.value, 127);
        assert_eq!(m.restore(), None);
        assert!(!ledger.exists());
    }
}
