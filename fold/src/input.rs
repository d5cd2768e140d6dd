//! What an input file is, from its first bytes: the one place fold, diff,
//! the exports and the viewer tell a recording from folded text.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The kinds of input flamerec reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A `.frec` recording (starts with [`flamerec_format::MAGIC`]).
    Recording,
    /// A little-endian perf.data file (`PERFILE2`), imported into a recording.
    PerfData,
    /// Anything else is read as folded text (`frame;frame COUNT` lines).
    FoldedText,
}

/// perf.data's magic as perf writes it on a little-endian machine.
const PERF_DATA_MAGIC: &[u8; 8] = b"PERFILE2";

impl InputKind {
    /// The kind of a file that starts with `head` (its first eight bytes or
    /// fewer, for a shorter file).
    pub fn of_bytes(head: &[u8]) -> InputKind {
        match head.get(..8) {
            Some(m) if m == flamerec_format::MAGIC => InputKind::Recording,
            Some(m) if m == PERF_DATA_MAGIC => InputKind::PerfData,
            _ => InputKind::FoldedText,
        }
    }

    /// Whether fold reads it as a recording (`.frec` or perf.data).
    pub fn is_recording(self) -> bool {
        matches!(self, InputKind::Recording | InputKind::PerfData)
    }
}

/// The kind of the file at `path`, from its first eight bytes.
pub fn sniff(path: &Path) -> io::Result<InputKind> {
    let mut head = Vec::with_capacity(8);
    File::open(path)?.take(8).read_to_end(&mut head)?;
    Ok(InputKind::of_bytes(&head))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_their_first_bytes() {
        assert_eq!(
            InputKind::of_bytes(b"FLAMEREC\x01\x00"),
            InputKind::Recording
        );
        assert_eq!(InputKind::of_bytes(b"PERFILE2"), InputKind::PerfData);
        assert_eq!(InputKind::of_bytes(b"main;f 3\n"), InputKind::FoldedText);
        assert_eq!(InputKind::of_bytes(b"FLAME"), InputKind::FoldedText);
        assert_eq!(InputKind::of_bytes(b""), InputKind::FoldedText);
        // Big-endian perf.data (magic byte-swapped) is not read as perf.data.
        assert_eq!(InputKind::of_bytes(b"2ELIFREP"), InputKind::FoldedText);
    }
}
