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

use memmap2::{Mmap, MmapOptions};

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
