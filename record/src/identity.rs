//! Who each sampled process is beyond its pid: its cgroup, the container a
//! runtime's cgroup name gives, and its pid in its own pid namespace —
//! written once per process image, when its first sample is handled (a
//! runtime moves its container's process into the container's cgroup
//! before the exec, so the image that runs there is the one identified).

use std::collections::HashMap;

use flamerec_format::Identity;
use flamerec_perf::procfs::view;

use crate::select::Selection;

/// The processes identified since their last exec, and whether each is
/// kept by the recording's [`Selection`].
#[derive(Default)]
pub(crate) struct Identities {
    known: HashMap<u32, bool>,
    selection: Selection,
}

impl Identities {
    /// Processes are kept as `selection` says.
    pub(crate) fn new(selection: Selection) -> Self {
        Identities {
            known: HashMap::new(),
            selection,
        }
    }

    /// Whether `pid`'s samples are kept, and its identity the first time it
    /// is asked for this process image (when kept and still there).
    pub(crate) fn admit(&mut self, pid: u32, time_ns: u64) -> (bool, Option<Identity>) {
        if let Some(&kept) = self.known.get(&pid) {
            return (kept, None);
        }
        let id = read(pid, time_ns);
        let kept = self.selection.keeps(pid, id.as_ref());
        self.known.insert(pid, kept);
        (kept, id.filter(|_| kept))
    }

    /// `pid` called exec, exited, or was forked anew (pids are used
    /// again): its next image is identified again, and an ended process
    /// holds no memory in a recording that runs for days.
    pub(crate) fn forget(&mut self, pid: u32) {
        self.known.remove(&pid);
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
