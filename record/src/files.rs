//! A process's files as it sees them. A process in a container, a chroot
//! or a mount namespace of its own maps files that the same path does not
//! reach from here (the host's libc is not the container's), and a file
//! replaced since it was mapped is another file at the same path. Each
//! mapped file is checked once against the file at its path (device and
//! inode, through `/proc/PID/map_files`); where they differ, the mapped file
//! itself is opened and held for the recording, so that unwinding, naming
//! and CPython read it even after its process (or its container) is gone,
//! and its build id is read from it where the kernel gave none.
//!
//! This module decides where a file is read; it reads no file's contents
//! beyond a build id.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use flamerec_format::{Module, ModuleKind};
use flamerec_perf::procfs::view;
use flamerec_symbolize::Located;

/// The most files held open for the recording (each a descriptor); past
/// it, mapped files are read at their path (and counted).
const MAX_HELD: usize = 512;

/// Where a mapped file is read, when its path does not reach it.
#[derive(Debug, Clone)]
pub(crate) struct Reached {
    /// The held file and its process's root (descriptor paths).
    pub(crate) at: Located,
    /// Its build id, read from it.
    pub(crate) build_id: Vec<u8>,
}

/// Every process's mapped files, checked once each.
#[derive(Default)]
pub(crate) struct ProcessFiles {
    /// (path, build id) → where it is read (`None`: at its path). Only
    /// mappings that came with a build id are looked up here: without one,
    /// two files at one path are not told apart before they are checked.
    known: HashMap<(String, Vec<u8>), Option<Reached>>,
    /// Held files by (device, inode): one descriptor per file.
    held: HashMap<(u64, u64), Reached>,
    /// Held roots by (device, inode) of the root directory.
    roots: HashMap<(u64, u64), PathBuf>,
    /// Descriptors kept open for the recording.
    open: Vec<File>,
    /// Mapped files that were not the file at their path and could not be
    /// opened otherwise (the process gone, no privilege, too many held).
    pub(crate) unreached: u64,
    /// The first of them, for the warning.
    pub(crate) first_unreached: Option<String>,
    /// Mapped files read through their process's own view.
    pub(crate) reached: u64,
}

impl ProcessFiles {
    /// Where the file `path` (with build id `build_id`, empty when the
    /// kernel gave none) that `pid` mapped at `range` is read: `None`
    /// for its path.
    pub(crate) fn reach(
        &mut self,
        pid: u32,
        range: Range<u64>,
        path: &str,
        build_id: &[u8],
    ) -> Option<Reached> {
        // Anonymous memory (`//anon`), `[vdso]` and other pseudo paths; a
        // memfd may hold an executable run from it (as container runtimes
        // run their own binary), read like any file when it is an ELF image.
        if Module::mapped(path, &[]).kind != ModuleKind::File && !is_memfd(path) {
            return None;
        }
        let key = (path.to_string(), build_id.to_vec());
        if !build_id.is_empty() {
            if let Some(known) = self.known.get(&key) {
                return known.clone();
            }
        }
        let found = self.check(pid, range, path, build_id);
        if !build_id.is_empty() {
            self.known.insert(key, found.clone());
        }
        found
    }

    fn check(
        &mut self,
        pid: u32,
        range: Range<u64>,
        path: &str,
        build_id: &[u8],
    ) -> Option<Reached> {
        let mapped = view::mapped_file(pid, range.start, range.end);
        if view::same_file(&mapped, Path::new(path)) {
            return None;
        }
        let wanted = |id: &[u8]| build_id.is_empty() || id == build_id;
        // The kernel named the build: the file at the path may still be it
        // (a container's copy of the host's libc).
        if !build_id.is_empty()
            && flamerec_symbolize::build_id_of(Path::new(path)).as_deref() == Some(build_id)
        {
            return None;
        }
        // The mapping's own file where it opens (root), else the path under
        // the process's own root when it sees other files than ours.
        let own_view = view::shares_our_files(pid) == Some(false);
        let file = File::open(&mapped).ok().or_else(|| {
            own_view
                .then(|| File::open(view::under_root(pid, path)).ok())
                .flatten()
        });
        let Some(file) = file else {
            // The process is gone, or its mapping is not ours to open: the
            // path stands (and the build id check when naming).
            if std::fs::metadata(&mapped).is_ok() || own_view {
                self.unreached(path);
            }
            return None;
        };
        let meta = file.metadata().ok()?;
        let id = (meta.dev(), meta.ino());
        if let Some(r) = self.held.get(&id) {
            return wanted(&r.build_id).then(|| r.clone());
        }
        // Code a runtime wrote into a memfd (JIT code, double-mapped) is no
        // ELF image: it stays anonymous memory.
        if is_memfd(path) && !is_elf(&file) {
            return None;
        }
        let fd_path = fd_path(&file);
        let file_id = flamerec_symbolize::build_id_of(&fd_path).unwrap_or_default();
        // A record read after its process exec'd: the range (or the path)
        // now holds another file.
        if self.open.len() >= MAX_HELD || !meta.is_file() || !wanted(&file_id) {
            self.unreached(path);
            return None;
        }
        let root = own_view.then(|| self.root_of(pid)).flatten();
        self.open.push(file);
        self.reached += 1;
        let r = Reached {
            at: Located {
                file: fd_path,
                root,
            },
            build_id: file_id,
        };
        self.held.insert(id, r.clone());
        Some(r)
    }

    fn unreached(&mut self, path: &str) {
        self.unreached += 1;
        self.first_unreached.get_or_insert_with(|| path.to_string());
    }

    /// The root directory `pid` sees, held open (one per distinct root).
    fn root_of(&mut self, pid: u32) -> Option<PathBuf> {
        let dir = File::open(format!("/proc/{pid}/root")).ok()?;
        let meta = dir.metadata().ok()?;
        let id = (meta.dev(), meta.ino());
        if let Some(p) = self.roots.get(&id) {
            return Some(p.clone());
        }
        if self.open.len() >= MAX_HELD {
            return None;
        }
        let p = fd_path(&dir);
        self.open.push(dir);
        self.roots.insert(id, p.clone());
        Some(p)
    }
}

/// Whether `file` starts as an ELF file does.
fn is_elf(file: &File) -> bool {
    let mut magic = [0u8; 4];
    file.read_exact_at(&mut magic, 0).is_ok() && magic == *b"\x7fELF"
}

/// A memfd's mapping (`/memfd:NAME (deleted)`).
fn is_memfd(path: &str) -> bool {
    path.starts_with("/memfd:")
}

/// The path that reopens a descriptor this process holds.
fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_files_are_read_at_their_paths() {
        let me = std::process::id();
        let maps = flamerec_perf::procfs::exec_maps(me);
        let exe = std::env::current_exe().unwrap();
        let own = maps
            .iter()
            .find(|m| Path::new(&m.path) == exe)
            .expect("this test's executable is mapped");
        let mut files = ProcessFiles::default();
        assert!(files
            .reach(me, own.start..own.end, &own.path, &[1, 2])
            .is_none());
        assert!(files.reach(me, own.start..own.end, "[vdso]", &[]).is_none());
        assert!(files.reach(me, own.start..own.end, "//anon", &[]).is_none());
        assert_eq!((files.reached, files.unreached), (0, 0));
    }

    /// A memfd mapping is reached when its file is an ELF image (the
    /// mapping here is this test's own executable, standing in for one run
    /// from a memfd), and read from there; memory without a file, or a
    /// file that is no ELF image, is not.
    #[test]
    fn a_memfd_is_reached_only_as_an_elf_image() {
        let me = std::process::id();
        let exe = std::env::current_exe().unwrap();
        let maps = flamerec_perf::procfs::exec_maps(me);
        let own = maps
            .iter()
            .find(|m| Path::new(&m.path) == exe)
            .expect("this test's executable is mapped");
        let mut files = ProcessFiles::default();
        let r = files
            .reach(me, own.start..own.end, "/memfd:x (deleted)", &[])
            .expect("an ELF image behind a memfd path is reached");
        assert_eq!(
            std::fs::read(&r.at.file).unwrap(),
            std::fs::read(&exe).unwrap()
        );
        assert_eq!((files.reached, files.unreached), (1, 0));
        let text = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(text.path(), b"JIT code, no ELF header").unwrap();
        assert!(!is_elf(&File::open(text.path()).unwrap()));
        assert!(is_elf(&File::open(&exe).unwrap()));
    }

    #[test]
    fn a_replaced_binary_is_read_as_it_was_mapped() {
        // A program started, then another file put at its path: the
        // mapping's own file is held, and read after its path changed.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sleep");
        let original = std::fs::read("/bin/sleep").expect("/bin/sleep");
        std::fs::write(&path, &original).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let mut child = std::process::Command::new(&path).arg("30").spawn().unwrap();
        let pid = child.id();
        let path_str = path.to_str().unwrap();
        let mut text = None;
        for _ in 0..200 {
            let maps = flamerec_perf::procfs::exec_maps(pid);
            text = maps.into_iter().find(|m| m.path == path_str);
            if text.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let text = text.expect("the program's text is mapped");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"another file").unwrap();
        let mut files = ProcessFiles::default();
        let r = files.reach(pid, text.start..text.end, path_str, &[]);
        let _ = child.kill();
        let _ = child.wait();
        let r = r.expect("read through the mapping");
        assert_eq!(std::fs::read(&r.at.file).unwrap(), original);
        assert_eq!(r.at.root, None, "the program sees our files");
        assert_eq!(
            r.build_id,
            flamerec_symbolize::build_id_of(Path::new("/bin/sleep")).unwrap()
        );
        assert_eq!(files.reached, 1);
    }
}
