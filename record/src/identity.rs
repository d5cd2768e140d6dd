//! Who each sampled process is beyond its pid: its cgroup, the container a
//! runtime's cgroup name gives, and its pid in its own pid namespace —
//! written once per process image, when its first sample is handled (a
//! runtime moves its container's process into the container's cgroup
//! before the exec, so the image that runs there is the one identified).

use std::collections::HashSet;

use flamerec_format::Identity;
use flamerec_perf::procfs::view;

/// The processes identified since their last exec.
#[derive(Default)]
pub(crate) struct Identities {
    known: HashSet<u32>,
}

impl Identities {
    /// The identity of `pid`, the first time it is asked for this process
    /// image; `None` after that, or when the process is gone.
    pub(crate) fn first(&mut self, pid: u32, time_ns: u64) -> Option<Identity> {
        if !self.known.insert(pid) {
            return None;
        }
        read(pid, time_ns)
    }

    /// `pid` called exec: the next image is identified again.
    pub(crate) fn exec(&mut self, pid: u32) {
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
        let first = ids.first(me, 5).expect("this process");
        assert_eq!((first.pid, first.ns_pid, first.time_ns), (me, me, 5));
        assert!(first.cgroup.starts_with('/'));
        let exe = std::env::current_exe().unwrap();
        assert_eq!(first.executable, exe.to_string_lossy());
        assert_eq!(ids.first(me, 6), None);
        ids.exec(me);
        assert!(ids.first(me, 7).is_some());
        assert_eq!(ids.first(u32::MAX, 8), None);
    }
}
