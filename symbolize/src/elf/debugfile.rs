//! Separate debug files, for binaries whose DWARF was split off (Debian's
//! `-dbg`/`-dbgsym` packages, `objcopy --only-keep-debug`).
//!
//! Looked for the way gdb does: first by build id,
//! `DEBUG_DIR/.build-id/xx/rest.debug`; then by the `.gnu_debuglink` name,
//! beside the binary, in its `.debug/` subdirectory and under
//! `DEBUG_DIR/<binary's directory>`. A candidate is used only when it is the
//! same build (its build id matches; without build ids, the debuglink CRC-32
//! matches). This module only finds and checks files; it reads nothing else.

use std::path::{Path, PathBuf};

use super::file::{build_id_matches, hex, read_elf, ElfFile};
use super::object::Object;

/// Where distributions install debug files.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";

/// Path of the build-id debug file for `build_id` under `dir`.
pub(crate) fn build_id_path(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let h = hex(build_id);
    let (head, rest) = h.split_at(2);
    Some(
        dir.join(".build-id")
            .join(head)
            .join(format!("{rest}.debug")),
    )
}

/// Finds and reads the debug file of the binary at `binary_path` (as its
/// process saw it: its debug link is looked for beside it), read from
/// `opened`, whose parsed object is `obj` and whose build id is `build_id`
/// (may be empty). Returns the file as read; the caller parses it again to
/// borrow from it.
pub(crate) fn find(
    binary_path: &Path,
    opened: &Path,
    obj: &Object<'_>,
    build_id: &[u8],
    debug_dirs: &[PathBuf],
) -> Option<ElfFile> {
    for dir in debug_dirs {
        let Some(path) = build_id_path(dir, build_id) else {
            break;
        };
        if let Some(data) = usable(&path, opened, build_id, None) {
            return Some(data);
        }
    }
    let (name, crc) = obj.debug_link()?;
    let name = Path::new(std::str::from_utf8(name).ok()?);
    // Only a plain file name: a link must not point elsewhere (`../../x`).
    if name.components().count() != 1 || name.file_name().is_none() {
        return None;
    }
    let bin_dir = binary_path.parent()?;
    let mut candidates = vec![bin_dir.join(name), bin_dir.join(".debug").join(name)];
    if let Ok(rel) = bin_dir.strip_prefix("/") {
        candidates.extend(debug_dirs.iter().map(|d| d.join(rel).join(name)));
    }
    candidates
        .iter()
        .find_map(|c| usable(c, opened, build_id, Some(crc)))
}

/// Reads `path` when it is another file than the binary (read from
/// `binary_path`), parses as ELF, and
/// is the same build: matching build id, or, without one, matching CRC.
fn usable(path: &Path, binary_path: &Path, build_id: &[u8], crc: Option<u32>) -> Option<ElfFile> {
    if same_file(path, binary_path) {
        return None;
    }
    let file = read_elf(path).ok()?;
    let obj = Object::parse(&file.data)?;
    let same_build = if build_id.is_empty() {
        // The CRC covers the whole file.
        crc.is_some_and(|c| crc32fast::hash(&file.data) == c)
    } else {
        build_id_matches(&obj, build_id)
    };
    (same_build && (obj.has_debug_info() || obj.has_symbols())).then_some(file)
}

/// The same file by device and inode (a binary read through a descriptor
/// path or another root has no canonical path here to compare).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_paths_split_the_first_byte() {
        assert_eq!(
            build_id_path(Path::new("/usr/lib/debug"), &[0xab, 0xcd, 0xef]),
            Some(PathBuf::from("/usr/lib/debug/.build-id/ab/cdef.debug"))
        );
        assert_eq!(build_id_path(Path::new("/d"), &[0xab]), None);
    }
}
