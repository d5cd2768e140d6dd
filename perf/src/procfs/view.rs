//! A process as it sees itself: the files it mapped, reached through its
//! own root (a container, a chroot, a mount namespace of its own sees other
//! files at the same paths than the host), its pid in its own pid
//! namespace (`NSpid`, the number its runtime writes in `perf-PID.map`),
//! and its cgroup with the container a runtime's cgroup name gives.
//!
//! Parsing is separate from reading; this module reads /proc only.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The path that reaches the file `pid` has mapped at `start..end`
/// exactly, even when it was replaced or deleted since, or lies in another
/// mount namespace (`/proc/PID/map_files`; opening it takes
/// CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
pub fn mapped_file(pid: u32, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// `path` as process `pid` sees it: under its own root (`/proc/PID/root`).
/// `path` must be absolute; a relative one is taken from that root too.
pub fn under_root(pid: u32, path: &str) -> PathBuf {
    let rel = path.trim_start_matches('/');
    PathBuf::from(format!("/proc/{pid}/root")).join(rel)
}

/// Whether process `pid` sees the same files as this one at the same
/// paths: the same mount namespace and the same root directory. `None`
/// when that cannot be read (the process is gone, or not ours to look at).
pub fn shares_our_files(pid: u32) -> Option<bool> {
    /// A file's (device, inode).
    type FileId = (u64, u64);
    let id = |p: &str| fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    // Ours, read once: this process does not change its namespace or root.
    static OURS: std::sync::OnceLock<Option<(FileId, FileId)>> = std::sync::OnceLock::new();
    let (our_ns, our_root) =
        (*OURS.get_or_init(|| Some((id("/proc/self/ns/mnt")?, id("/proc/self/root")?))))?;
    let same_ns = id(&format!("/proc/{pid}/ns/mnt"))? == our_ns;
    let same_root = id(&format!("/proc/{pid}/root"))? == our_root;
    Some(same_ns && same_root)
}

/// Whether `a` and `b` name the same file (device and inode), following
/// links (a `map_files` entry, a path under a process's root).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The pid `pid` has in its own (innermost) pid namespace: the last number
/// of the `NSpid:` line of its status file (the same pid on the host).
pub fn ns_pid(pid: u32) -> io::Result<u32> {
    parsed(pid, "status", parse_ns_pid, "no NSpid line")
}

/// `parse` of /proc/PID/`file`, or an error that says `missing` of it.
fn parsed<T>(pid: u32, file: &str, parse: fn(&str) -> Option<T>, missing: &str) -> io::Result<T> {
    let path = format!("/proc/{pid}/{file}");
    let text = fs::read_to_string(&path)?;
    parse(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{missing} in {path}")))
}

/// The innermost pid of a status file's `NSpid:` line.
pub fn parse_ns_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_ascii_whitespace()
        .last()?
        .parse()
        .ok()
}

/// The cgroup (v2, the unified hierarchy) process `pid` is in, as a path
/// from the hierarchy's root (`/system.slice/docker-ID.scope`).
pub fn cgroup_of(pid: u32) -> io::Result<String> {
    parsed(pid, "cgroup", parse_cgroup, "no cgroup v2 line")
}

/// The v2 path of a cgroup file (`0::PATH`; on a hybrid tree beside v1
/// lines, which are left out).
pub fn parse_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_string())
}

/// The container runtimes whose cgroup names give a container id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// Docker (`docker-ID.scope`, `/docker/ID`).
    Docker,
    /// podman and libpod (`libpod-ID.scope`, `libpod-ID`).
    Podman,
    /// containerd's CRI plugin, as Kubernetes runs it (`cri-containerd-ID.scope`).
    Containerd,
    /// CRI-O (`crio-ID.scope`).
    CriO,
}

impl Runtime {
    /// Its short name, as recordings and labels spell it.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
        }
    }

    /// The runtime a short name names.
    pub fn from_name(name: &str) -> Option<Runtime> {
        [
            Runtime::Docker,
            Runtime::Podman,
            Runtime::Containerd,
            Runtime::CriO,
        ]
        .into_iter()
        .find(|r| r.name() == name)
    }
}

/// A container, as its cgroup names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Container {
    /// Who runs it.
    pub runtime: Runtime,
    /// Its id: 64 lowercase hex digits.
    pub id: String,
}

/// The container a cgroup path names: the innermost component that is a
/// runtime's name for one (`docker-ID.scope`, `libpod-ID`,
/// `cri-containerd-ID.scope`, `crio-ID.scope`, or `ID` under a `docker`
/// component), its id 64 hex digits. `None` for any other cgroup (the
/// host's, a systemd service, a pod's own cgroup, podman's `conmon`).
pub fn container_of(cgroup: &str) -> Option<Container> {
    let parts: Vec<&str> = cgroup.split('/').filter(|p| !p.is_empty()).collect();
    parts.iter().enumerate().rev().find_map(|(i, part)| {
        let part: &str = part.strip_suffix(".scope").unwrap_or(part);
        let prefixed = [
            ("docker-", Runtime::Docker),
            ("libpod-", Runtime::Podman),
            ("cri-containerd-", Runtime::Containerd),
            ("crio-", Runtime::CriO),
        ]
        .into_iter()
        .find_map(|(prefix, runtime)| Some((runtime, part.strip_prefix(prefix)?)));
        let (runtime, id) = match prefixed {
            Some(found) => found,
            None if i > 0 && parts[i - 1] == "docker" => (Runtime::Docker, part),
            None => return None,
        };
        is_container_id(id).then(|| Container {
            runtime,
            id: id.to_string(),
        })
    })
}

fn is_container_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid tree), from this process's
/// mountinfo.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_cgroup2_mount(&text)
}

/// The mount point of the first `cgroup2` file system in a mountinfo text.
pub fn parse_cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        // The fields after ` - ` are the type, the source and the options.
        let (mount, rest) = l.split_once(" - ")?;
        (rest.split(' ').next()? == "cgroup2").then_some(())?;
        mount.split(' ').nth(4).map(PathBuf::from)
    })
}

/// The directory of a cgroup named as `/proc/PID/cgroup` and `perf record
/// -G` name it (a path from the hierarchy's root), or by its directory.
pub fn cgroup_dir(name: &Path) -> io::Result<PathBuf> {
    let mount = cgroup2_mount().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "no cgroup v2 hierarchy is mounted")
    })?;
    let dir = if name.starts_with(&mount) {
        name.to_path_buf()
    } else {
        mount.join(name.strip_prefix("/").unwrap_or(name))
    };
    if dir.join("cgroup.procs").is_file() {
        Ok(dir)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not a cgroup (no cgroup.procs)", dir.display()),
        ))
    }
}

/// Every process in the cgroup at `dir` and its descendants, ascending.
pub fn processes_in(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if let Ok(text) = fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = fs::read_dir(&d) {
            todo.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// The cgroup (as `/proc/PID/cgroup` names it) of the one running container
/// whose id starts with `prefix` (at least 4 hex digits), found through its
/// processes.
pub fn container_cgroup(prefix: &str) -> Result<String, String> {
    if prefix.len() < 4 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "{prefix:?} is not a container id (give at least 4 of its hex digits)"
        ));
    }
    let prefix = prefix.to_ascii_lowercase();
    let mut found: Vec<(Container, String)> = Vec::new();
    for pid in super::all_pids().unwrap_or_default() {
        let Ok(cgroup) = cgroup_of(pid) else { continue };
        let Some(c) = container_of(&cgroup) else {
            continue;
        };
        if c.id.starts_with(&prefix) && !found.iter().any(|(f, _)| *f == c) {
            // The container's own cgroup: the path up to its component
            // (a runtime may nest one below it).
            let end = cgroup.find(&c.id).map_or(cgroup.len(), |i| {
                cgroup[i..].find('/').map_or(cgroup.len(), |j| i + j)
            });
            found.push((c, cgroup[..end].to_string()));
        }
    }
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => Err(format!(
            "no running container has an id starting with {prefix}"
        )),
        n => Err(format!(
            "{n} running containers have ids starting with {prefix}: give more of the id"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1c1f8f0b1e9c2f53b0e5c6f36b3f0b1d2e3f4a5b6c7d8e9f00112233445566";

    #[test]
    fn ns_pid_is_the_innermost() {
        let status = "Name:\tctrspin\nTgid:\t4242\nNSpid:\t4242\t7\t1\nPPid:\t1\n";
        assert_eq!(parse_ns_pid(status), Some(1));
        assert_eq!(parse_ns_pid("NSpid:\t99\n"), Some(99));
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
        assert_eq!(parse_ns_pid("NSpid:\t\n"), None);
    }

    #[test]
    fn cgroup_v2_line_of_a_hybrid_tree() {
        let hybrid = "12:pids:/user.slice\n1:name=systemd:/user.slice/x.scope\n\
                      0::/libpod_parent/libpod-abc\n";
        assert_eq!(
            parse_cgroup(hybrid).as_deref(),
            Some("/libpod_parent/libpod-abc")
        );
        assert_eq!(parse_cgroup("0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_cgroup("3:cpu:/a\n"), None);
    }

    #[test]
    fn containers_by_their_runtimes_cgroup_names() {
        let cases = [
            (format!("/system.slice/docker-{ID}.scope"), Runtime::Docker),
            (format!("/docker/{ID}"), Runtime::Docker),
            (format!("/libpod_parent/libpod-{ID}"), Runtime::Podman),
            (
                format!("/machine.slice/libpod-{ID}.scope/container"),
                Runtime::Podman,
            ),
            (
                format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{ID}.scope"),
                Runtime::Containerd,
            ),
            (format!("/kubepods.slice/crio-{ID}.scope"), Runtime::CriO),
        ];
        for (cgroup, runtime) in cases {
            let c = container_of(&cgroup).unwrap_or_else(|| panic!("{cgroup}"));
            assert_eq!((c.runtime, c.id.as_str()), (runtime, ID), "{cgroup}");
            assert_eq!(Runtime::from_name(runtime.name()), Some(runtime));
        }
        for host in [
            "/",
            "/user.slice/user-0.slice/session-3.scope",
            "/system.slice/sshd.service",
            "/libpod_parent/conmon",
            "/system.slice/docker-1234.scope",
            &format!("/system.slice/docker-{}.scope", ID.to_uppercase()),
            &format!("/{ID}"),
        ] {
            assert_eq!(container_of(host), None, "{host}");
        }
    }

    #[test]
    fn the_cgroup2_mount_of_a_hybrid_tree() {
        let text = "30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n\
                    35 30 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    41 30 0:37 / /sys/fs/cgroup/unified rw shared:9 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_cgroup2_mount(text),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            parse_cgroup2_mount("30 24 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"),
            None
        );
        // This process's own cgroup, named both ways, holds it.
        let me = std::process::id();
        let own = cgroup_of(me).unwrap();
        let dir = cgroup_dir(Path::new(&own)).unwrap();
        assert_eq!(cgroup_dir(&dir).unwrap(), dir);
        assert!(processes_in(&dir).contains(&me));
        assert!(cgroup_dir(Path::new("/no/such/cgroup")).is_err());
        assert!(container_cgroup("xyz").is_err());
    }

    #[test]
    fn this_process_sees_its_own_files() {
        let me = std::process::id();
        assert_eq!(shares_our_files(me), Some(true));
        assert_eq!(shares_our_files(u32::MAX), None);
        assert_eq!(ns_pid(me).unwrap(), me);
        assert!(cgroup_of(me).is_ok_and(|c| c.starts_with('/')));
        assert_eq!(
            under_root(me, "/proc/self/exe"),
            PathBuf::from(format!("/proc/{me}/root/proc/self/exe"))
        );
        let exe = std::env::current_exe().unwrap();
        assert!(same_file(&under_root(me, exe.to_str().unwrap()), &exe));
        assert!(!same_file(&exe, Path::new("/")));
    }
}
