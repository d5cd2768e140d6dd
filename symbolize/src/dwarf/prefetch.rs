//! Inflating the big compressed `.debug_info` sections ahead, while the
//! recording is still being read.
//!
//! Inflating libc's debug info is the longest single piece of a fold with
//! inlined frames, and it cannot be split (a deflate stream is read from its
//! start). It does not need the sampled addresses to start, only to know
//! where to stop: so as soon as the module table is known, one pool thread
//! starts inflating the separate debug files (found by build id) of the
//! recorded binaries, biggest first, a piece at a time. When symbolization
//! reaches such a binary it takes the reader over with whatever it inflated
//! so far ([`Prefetch::take`]) and goes on as far as the addresses need.
//!
//! Only binaries with sampled frames count, and nothing is prefetched with
//! one thread (`-j 1` means no parallel work), without inlined frames (no
//! DWARF is read), or for binaries the symbol cache already knows. It pays
//! off in long recordings, whose reading takes a while; everything stops when
//! the [`Prefetch`] is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::elf::debugfile::build_id_path;
use crate::elf::read_elf;
use crate::elf::sections::{Reader, Sections};

/// Debug files smaller than this are not worth a head start.
const MIN_FILE: u64 = 1 << 20;
/// At most this many debug files are prefetched.
const MAX_FILES: usize = 4;
/// Inflated between two looks at the stop flag and at whether symbolization
/// wants the reader, which waits for the piece underway: 64 KiB is ≈ 0.15 ms
/// (256 KiB made the handover cost 0.6-1 ms of a 17 ms fold).
const PIECE: u64 = 64 << 10;

/// Debug-info readers being filled ahead of need.
#[derive(Default)]
pub struct Prefetch {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    slots: Mutex<HashMap<PathBuf, Slot>>,
    /// Everything stops.
    stop: AtomicBool,
}

enum Slot {
    /// Being inflated.
    Running(Arc<Job>),
    /// Symbolization got here first (or took it): not to be started.
    Taken,
}

/// One debug file being inflated.
struct Job {
    /// `None` once taken.
    reader: Mutex<Option<Reader<'static>>>,
    /// Symbolization wants it: the prefetching task lets go after its
    /// current piece (a mutex alone would let it grab the lock again first).
    wanted: AtomicBool,
}

impl Prefetch {
    /// Starts prefetching on `pool` the debug files of the binaries with
    /// `build_ids` found under `debug_dirs`.
    pub fn start(
        pool: &rayon::ThreadPool,
        build_ids: Vec<Vec<u8>>,
        debug_dirs: Vec<PathBuf>,
    ) -> Self {
        let prefetch = Prefetch::default();
        if build_ids.is_empty() {
            return prefetch;
        }
        let shared = Arc::clone(&prefetch.shared);
        pool.spawn(move || run(&shared, &build_ids, &debug_dirs));
        prefetch
    }

    /// The `.debug_info` reader of the debug file at `path`, with what was
    /// inflated so far; `None` when it was not prefetched (and it will not be).
    pub(crate) fn take(&self, path: &Path) -> Option<Reader<'static>> {
        let slot = {
            let mut slots = self.shared.slots.lock().ok()?;
            slots.insert(path.to_path_buf(), Slot::Taken)
        };
        match slot {
            // Waits for the piece being inflated, then the reader is ours.
            Some(Slot::Running(job)) => {
                job.wanted.store(true, Ordering::Release);
                job.reader.lock().ok()?.take()
            }
            _ => None,
        }
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

/// The prefetching task: debug files biggest first, each inflated until
/// taken, finished, or told to stop.
fn run(shared: &Shared, build_ids: &[Vec<u8>], debug_dirs: &[PathBuf]) {
    let mut files: Vec<(u64, PathBuf)> = build_ids
        .iter()
        .filter_map(|c| {
            debug_dirs.iter().find_map(|d| {
                let p = build_id_path(d, c)?;
                let len = std::fs::metadata(&p).ok()?.len();
                Some((len, p))
            })
        })
        .filter(|(len, _)| *len >= MIN_FILE)
        .collect();
    files.sort_unstable_by(|a, b| b.cmp(a));
    files.dedup_by(|a, b| a.1 == b.1);
    files.truncate(MAX_FILES);

    for (_, path) in files {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(reader) = info_reader(&path) else {
            continue;
        };
        let job = Arc::new(Job {
            reader: Mutex::new(Some(reader)),
            wanted: AtomicBool::new(false),
        });
        {
            let Ok(mut slots) = shared.slots.lock() else {
                return;
            };
            if slots.contains_key(&path) {
                continue;
            }
            slots.insert(path, Slot::Running(Arc::clone(&job)));
        }
        loop {
            if shared.stop.load(Ordering::Relaxed) {
                return;
            }
            if job.wanted.load(Ordering::Acquire) {
                break;
            }
            let Ok(mut guard) = job.reader.lock() else {
                return;
            };
            let Some(r) = guard.as_mut() else {
                break; // taken
            };
            let had = r.bytes().len() as u64;
            r.read_to(had + PIECE);
            if r.bytes().len() as u64 == had {
                break; // the whole section
            }
        }
    }
}

/// A reader of the compressed `.debug_info` of the file at `path`.
fn info_reader(path: &Path) -> Option<Reader<'static>> {
    let elf = read_elf(path).ok()?;
    let sections = Sections::parse(&elf.data, Some(elf.file))?;
    let info = sections.debug("info")?.into_file_backed()?;
    info.is_compressed().then(|| info.reader())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::{hex, Object};

    /// A separate debug file of this test binary with zlib-compressed DWARF,
    /// at its build-id path under a fresh debug directory.
    fn debug_dir() -> (tempfile::TempDir, Vec<u8>, PathBuf) {
        let exe = std::env::current_exe().expect("exe");
        let data = std::fs::read(&exe).expect("read");
        let obj = Object::parse(&data).expect("ELF");
        let id = obj.build_id().expect("build id").to_vec();
        let dir = tempfile::tempdir().expect("temp dir");
        let h = hex(&id);
        let path = dir
            .path()
            .join(".build-id")
            .join(&h[..2])
            .join(format!("{}.debug", &h[2..]));
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        let ok = std::process::Command::new("objcopy")
            .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
            .arg(&exe)
            .arg(&path)
            .status()
            .expect("objcopy runs");
        assert!(ok.success(), "objcopy failed");
        (dir, id, path)
    }

    #[test]
    fn a_prefetched_reader_holds_the_section_and_is_taken_once() {
        let (dir, build_id, path) = debug_dir();
        let shared = Shared::default();
        run(&shared, &[build_id], &[dir.path().to_path_buf()]);
        let prefetch = Prefetch {
            shared: Arc::new(shared),
        };
        let mut reader = prefetch.take(&path).expect("prefetched");
        let inflated = reader.bytes().len();
        assert!(inflated > 0, "the task inflated the section");
        reader.read_to(u64::MAX);
        let elf = crate::elf::read_elf(&path).expect("debug file");
        let sections = Sections::parse(&elf.data, Some(elf.file)).expect("sections");
        let info = sections.debug("info").expect("info");
        assert!(info.is_compressed());
        assert!(reader.section().same_as(&info));
        assert_eq!(reader.bytes(), &info.full()[..]);
        assert!(prefetch.take(&path).is_none(), "taken once");
    }

    #[test]
    fn a_taken_path_is_not_started_and_stop_ends_the_task() {
        let (dir, build_id, path) = debug_dir();
        let candidates = [build_id];
        let shared = Arc::new(Shared::default());
        let prefetch = Prefetch {
            shared: Arc::clone(&shared),
        };
        assert!(prefetch.take(&path).is_none(), "nothing prefetched yet");
        run(&shared, &candidates, &[dir.path().to_path_buf()]);
        assert!(
            prefetch.take(&path).is_none(),
            "symbolization had claimed it"
        );
        let other = Shared::default();
        other.stop.store(true, Ordering::Relaxed);
        run(&other, &candidates, &[dir.path().to_path_buf()]);
        assert!(other.slots.lock().expect("lock").is_empty());
    }
}
