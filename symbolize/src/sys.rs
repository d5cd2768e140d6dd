//! The one thing this crate asks of the OS that Rust cannot check: mapping
//! a file's bytes into memory.
//!
//! Plain (uncompressed) DWARF sections of a big binary are tens of
//! megabytes, of which a fold touches a fraction. Reading them copied every
//! byte out of the page cache into freshly zeroed memory: two fifths of a
//! cold fold of a Rust binary with debug info. The same held for symbol and
//! string tables (librustc_driver's are 26 MB, of which a fold reads the
//! symbols and the few names it finds): copying them was a quarter of a
//! cold fold of a cargo build. Mapped, the pages a lookup touches come
//! straight from the page cache, and the rest are never read.
//!
//! The cost of mapping: a file truncated in place while it is mapped makes
//! reading the lost pages fault (SIGBUS). Linkers and package managers
//! replace binaries (a new file renamed over the old one, or unlinked
//! first) rather than truncating them, which leaves a mapping valid; so do
//! perf, samply and addr2line, which map the files they read too.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

use memmap2::{Mmap, MmapOptions, UncheckedAdvice};

/// `len` bytes of `file` from `offset`, mapped read-only; an error when the
/// file is shorter than that (a mapping past its end faults when read).
pub(crate) fn map_file(file: &File, offset: u64, len: usize) -> io::Result<Mmap> {
    let size = file.metadata()?.len();
    let end = offset
        .checked_add(len as u64)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    if end > size {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    // SAFETY: the mapping is private and read-only, so nothing this process
    // does can change what it shows, and it lies within the file's current
    // size (checked above). What Rust cannot rule out is another process
    // truncating the file while it is mapped (see the module docs); reads
    // then fault instead of returning stale bytes.
    unsafe { MmapOptions::new().offset(offset).len(len).map(file) }
}

/// Lets go of the pages of `map` this process has read: they leave its
/// resident set (the page cache keeps them, shared), and the next read of
/// each maps it from the file again. A namer kept running (the agent) would
/// otherwise hold every page of the symbol tables its lookups ever touched:
/// 28 MB of libLLVM's, librustc_driver's and cargo's beside a `cargo build`.
pub(crate) fn release_pages(map: &Mmap) {
    // SAFETY: `map` was made by `map_file`: private and read-only, so no
    // page of it was ever written or copied. Dropping such pages from this
    // process's page tables loses nothing: a later read maps the file's page
    // again and sees the file's bytes, as the first read did, and borrows of
    // the mapping stay valid (the mapping itself stays). Failing to advise
    // (an old kernel) leaves the pages where they were.
    let _ = unsafe { map.unchecked_advise(UncheckedAdvice::DontNeed) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resident size of the mapping starting at `map`, from this
    /// process's smaps.
    fn resident_kib(map: &Mmap) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let start = format!("{:x}-", map.as_ptr() as usize);
        let mut lines = smaps.lines().skip_while(|l| !l.starts_with(&start));
        lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("the mapping is in smaps")
    }

    #[test]
    fn released_pages_leave_the_resident_set_and_read_the_same() {
        let file = File::open(std::env::current_exe().unwrap()).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        let map = map_file(&file, 0, len).unwrap();
        let sum = |m: &Mmap| {
            m.iter()
                .step_by(4096)
                .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(u64::from(b)))
        };
        let read = sum(&map);
        assert!(resident_kib(&map) >= 4, "every page was read");
        release_pages(&map);
        assert_eq!(resident_kib(&map), 0);
        assert_eq!(sum(&map), read, "the same bytes read again");
    }
}
