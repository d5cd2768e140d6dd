//! Who each sampled process is beyond its pid: its cgroup, the container a
//! runtime's cgroup name gives, and its pid in its own pid namespace —
//! written once per process image, when its first sample is handled (a
//! runtime moves its container's process into the container's cgroup
//! before the exec, so the image that runs there is the one identified).

use std::collections::HashMap;

use flamerec_format::Identity;
use flamerec_perf::procfs::view;

use crate::ended::Ended;
use crate::select::Selection;

/// The processes identified since their last exec, and whether each is
/// kept by the recording's [`Selection`].
#[derive(Default)]
pub(crate) struct Identities {
    /// pid → (kept, the time of its first sample).
    known: HashMap<u32, (bool, u64)>,
    /// Processes that ended, oldest first: (exit time, pid).
    ended: Ended<ENDED_KEPT_NS>,
    selection: Selection,
}

/// How long an ended process's decision is kept (record time): samples
/// taken on its way out, after its exit record, stay kept or left out as
/// it was. They follow the exit within microseconds.
const ENDED_KEPT_NS: u64 = 1_000_000_000;

impl Identities {
    /// Processes are kept as `selection` says.
    pub(crate) fn new(selection: Selection) -> Self {
        Identities {
            selection,
            ..Identities::default()
        }
    }

    /// Whether `pid`'s samples are kept, and its identity the first time it
    /// is asked for this process image (when kept and still there).
    pub(crate) fn admit(&mut self, pid: u32, time_ns: u64) -> (bool, Option<Identity>) {
        if let Some(&(kept, _)) = self.known.get(&pid) {
            return (kept, None);
        }
        let id = read(pid, time_ns);
        let kept = self.selection.keeps(pid, id.as_ref());
        self.known.insert(pid, (kept, time_ns));
        (kept, id.filter(|_| kept))
    }

    /// `pid` called exec, or was forked anew (pids are used again): its
    /// next image is identified again.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.known.remove(&pid);
    }

    /// `pid` ended at `time_ns`: forgotten a second later, so that ended
    /// processes hold no memory in a recording that runs for days.
    pub(crate) fn exited(&mut self, pid: u32, time_ns: u64) {
        self.ended.push(time_ns, pid);
        for (t, old) in self.ended.expired(time_ns) {
            // Not a process that took the pid since.
            if self.known.get(&old).is_some_and(|&(_, since)| since <= t) {
                self.known.remove(&old);
            }
        }
    }
}

/// What /proc says of `pid` now.
pub(crate) fn read(pid: u32, time_ns: u64) -> Option<Identity> {
    let cgroup = view::cgroup_of(pid).unwrap_or_default();
    let ns_pid = view::ns_pid(pid).ok()?;
    let container = view::container_of(&cgroup);
    Some(Identity {
        time_ns,
        pid,
        ns_pid,
        runtime: container
            .as_ref()
            .map_or_else(String::new, |c| c.runtime.name().to_string()),
        container: container.map_or_else(String::new, |c| c.id),
        cgroup,
        executable: std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_image() {
        let me = std::process::id();
        let mut ids = Identities::default();
        let (kept, first) = ids.admit(me, 5);
        let first = first.expect("this process");
        assert!(kept);
        assert_eq!((first.pid, first.ns_pid, first.time_ns), (me, me, 5));
        assert!(first.cgroup.starts_with('/'));
        let exe = std::env::current_exe().unwrap();
        assert_eq!(first.executable, exe.to_string_lossy());
        assert_eq!(ids.admit(me, 6), (true, None));
        ids.forget(me);
        assert!(ids.admit(me, 7).1.is_some());
        assert_eq!(ids.admit(u32::MAX, 8), (true, None));
    }

    #[test]
    fn an_ended_process_is_forgotten_a_second_later() {
        let me = std::process::id();
        let mut ids = Identities::default();
        assert!(ids.admit(me, 1).1.is_some());
        ids.exited(me, 2);
        // Its samples on the way out are judged as it was.
        assert_eq!(ids.admit(me, 3), (true, None));
        ids.exited(1, 2 + ENDED_KEPT_NS);
        assert!(!ids.known.contains_key(&me) && ids.ended.len() == 1);
        // A process that took the pid after the exit is not forgotten.
        let t = 3 + ENDED_KEPT_NS;
        ids.exited(me, t);
        ids.forget(me);
        assert!(ids.admit(me, t + 1).1.is_some());
        ids.exited(2, t + ENDED_KEPT_NS);
        assert!(ids.known.contains_key(&me));
    }

    #[test]
    fn a_process_left_out_is_not_identified() {
        let me = std::process::id();
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_string_lossy().into_owned();
        let mut ids = Identities::new(Selection {
            include: vec![],
            exclude: vec![crate::select::ProcessRule::Executable(name)],
        });
        assert_eq!(ids.admit(me, 5), (false, None));
        assert_eq!(ids.admit(me, 6), (false, None));
        assert_eq!(ids.admit(u32::MAX, 7), (true, None), "gone: kept");
    }
}
