//! How deep the kernel walks frame-pointer callchains, and raising it.
//!
//! The kernel cuts a sample's callchain (kernel and user addresses
//! together) at the event's `sample_max_stack`, which may not exceed
//! `kernel.perf_event_max_stack` (127 by default; asking for more is
//! refused with EOVERFLOW). In the frame-pointer modes the recorder asks
//! for [`WANTED`]; as root it raises the sysctl to that for the recording
//! and puts the old value back at the end (the kernel refuses the change,
//! EBUSY, while any perf event with callchains is open: then the value in
//! force is used). A deferred user callchain is not bound by it: the
//! kernel's deferred unwinder keeps one page of entries per task,
//! [`DEFERRED_CAP`] addresses.

use std::fs;
use std::io;

const SYSCTL: &str = "/proc/sys/kernel/perf_event_max_stack";

/// Callchain addresses asked for in the frame-pointer modes.
pub(crate) const WANTED: u16 = 1024;

/// Addresses a deferred user callchain holds at most (Linux 7.2: a page
/// of `unsigned long` less the unwind cache's header).
pub(crate) const DEFERRED_CAP: usize = 510;

/// The `sample_max_stack` in force for a recording, and what to put back.
#[derive(Debug)]
pub(crate) struct MaxStack {
    /// What to ask for (at most the sysctl).
    pub value: u16,
    /// The sysctl's value before it was raised, to write back.
    restore: Option<u32>,
    /// What was done, for the user.
    pub note: Option<String>,
}

impl MaxStack {
    /// Reads the sysctl and, as `root`, raises it to [`WANTED`].
    pub(crate) fn raise(root: bool) -> MaxStack {
        let current: Option<u32> = fs::read_to_string(SYSCTL)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let Some(current) = current else {
            // Unknown: leave it to the kernel's default.
            return MaxStack {
                value: 0,
                restore: None,
                note: None,
            };
        };
        if current >= u32::from(WANTED) {
            return MaxStack {
                value: WANTED,
                restore: None,
                note: None,
            };
        }
        let kept = MaxStack {
            value: current.min(u32::from(u16::MAX)) as u16,
            restore: None,
            note: None,
        };
        if !root {
            return kept;
        }
        match fs::write(SYSCTL, WANTED.to_string()) {
            Ok(()) => MaxStack {
                value: WANTED,
                restore: Some(current),
                note: Some(format!(
                    "kernel.perf_event_max_stack raised from {current} to {WANTED} while recording, so frame-pointer stacks up to {WANTED} frames are whole; set back to {current} at the end"
                )),
            },
            Err(e) => MaxStack {
                note: Some(format!(
                    "kernel.perf_event_max_stack stays {current} ({}): frame-pointer stacks are cut at {current} frames",
                    busy_or(&e)
                )),
                ..kept
            },
        }
    }

    /// The sysctl went down since it was read (another recorder put it
    /// back): use its value now, and restore nothing.
    pub(crate) fn lowered(&mut self) -> u16 {
        let now: u32 = fs::read_to_string(SYSCTL)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        self.value = now.min(u32::from(u16::MAX)) as u16;
        self.restore = None;
        self.note = Some(format!(
            "kernel.perf_event_max_stack was set back to {now} by another recorder while this one started: frame-pointer stacks are cut at {now} frames"
        ));
        self.value
    }

    /// Puts the sysctl back; says so when the kernel refuses.
    pub(crate) fn restore(&mut self) -> Option<String> {
        let old = self.restore.take()?;
        fs::write(SYSCTL, old.to_string()).err().map(|e| {
            format!(
                "kernel.perf_event_max_stack could not be set back to {old} ({}): run `sysctl kernel.perf_event_max_stack={old}`",
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

fn busy_or(e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::EBUSY) {
        "another perf session with callchains is open".into()
    } else {
        e.to_string()
    }
}
