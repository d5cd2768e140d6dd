//! Reading inputs: the one place fold, diff, info, the exports and the
//! viewer open a profile and tell what it is.
//!
//! An input is a path, or `-` for standard input. What it holds is decided
//! from its first bytes, never from its name: a `.frec` recording
//! ([`flamerec_format::MAGIC`]), a perf.data file in file mode (`PERFILE2`
//! and a 104-byte header) or in pipe mode (`PERFILE2` and a 16-byte header,
//! what `perf record -o -` writes), or else folded text. The bytes sniffed
//! are handed back in front of the rest, so a pipe is read once and never
//! rewound. Only file-mode perf.data needs to seek (its sections are
//! addressed by offset): from a pipe it is first copied to an unnamed
//! temporary file, so memory stays bounded.
//!
//! This module also owns the rules every reader shares: the folded-text
//! reader ([`folded`]) and what an empty weight unit means
//! ([`weight_unit`]). It must not fold or symbolize anything.

pub mod folded;

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use flamerec_format::Metadata;

use crate::FoldError;

/// The kinds of input flamerec reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A `.frec` recording (starts with [`flamerec_format::MAGIC`]).
    Recording,
    /// A little-endian perf.data file in file mode (`PERFILE2`, then a
    /// header size of 104), imported into a recording.
    PerfData,
    /// perf.data in pipe mode (`PERFILE2`, then a header size of 16), as
    /// `perf record -o -` writes it; imported as it streams.
    PerfPipe,
    /// Anything else is read as folded text (`frame;frame COUNT` lines).
    FoldedText,
}

/// perf.data's magic as perf writes it on a little-endian machine.
pub const PERF_DATA_MAGIC: &[u8; 8] = b"PERFILE2";
/// Header size of a pipe-mode perf.data stream (magic and this size).
const PERF_PIPE_HEADER: u64 = 16;
/// Bytes read to tell the kinds apart: a magic and perf.data's header size.
const HEAD: usize = 16;
/// The path that stands for standard input.
pub const STDIN: &str = "-";
/// How standard input is named in messages.
const STDIN_NAME: &str = "(standard input)";

impl InputKind {
    /// The kind of an input that starts with `head` (its first 16 bytes or
    /// fewer, for a shorter input).
    pub fn of_bytes(head: &[u8]) -> InputKind {
        let size = head
            .get(8..16)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes);
        match head.get(..8) {
            Some(m) if m == flamerec_format::MAGIC => InputKind::Recording,
            Some(m) if m == PERF_DATA_MAGIC && size == Some(PERF_PIPE_HEADER) => {
                InputKind::PerfPipe
            }
            // Any other header size is file mode; its checks say if it is impossible.
            Some(m) if m == PERF_DATA_MAGIC => InputKind::PerfData,
            _ => InputKind::FoldedText,
        }
    }

    /// Whether fold reads it as a recording (`.frec` or perf.data).
    pub fn is_recording(self) -> bool {
        !matches!(self, InputKind::FoldedText)
    }

    /// Whether it is perf.data, in either mode.
    pub fn is_perf_data(self) -> bool {
        matches!(self, InputKind::PerfData | InputKind::PerfPipe)
    }

    /// Its name in `flamerec info` and in the `format` field of
    /// `flamerec-info/1`.
    pub fn name(self) -> &'static str {
        match self {
            InputKind::Recording => "frec",
            InputKind::PerfData => "perf.data",
            InputKind::PerfPipe => "perf.data-pipe",
            InputKind::FoldedText => "folded",
        }
    }
}

/// What a unit of sample weight is: the recording's own unit, and
/// `samples` when it names none (folded text, older recordings).
pub fn weight_unit(meta: &Metadata) -> &str {
    match meta.weight_unit.as_str() {
        "" => "samples",
        unit => unit,
    }
}

/// Whether `path` stands for standard input (`-`).
pub fn is_stdin(path: &Path) -> bool {
    path == Path::new(STDIN)
}

/// How `path` is named in messages: `(standard input)` for `-`.
pub fn label(path: &Path) -> PathBuf {
    if is_stdin(path) {
        PathBuf::from(STDIN_NAME)
    } else {
        path.to_path_buf()
    }
}

/// An opened input whose first bytes have been read and judged.
pub struct Input {
    kind: InputKind,
    label: PathBuf,
    /// The bytes read to judge it, handed back in front of `rest`.
    head: Vec<u8>,
    rest: Rest,
}

enum Rest {
    File(File),
    Stdin(io::Stdin),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("kind", &self.kind)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Opens `path` (standard input for `-`) and reads its first bytes.
pub fn open(path: &Path) -> Result<Input, FoldError> {
    let label = label(path);
    let open_err = |source| FoldError::Open {
        path: label.clone(),
        source,
    };
    let mut rest = if is_stdin(path) {
        Rest::Stdin(io::stdin())
    } else {
        Rest::File(File::open(path).map_err(open_err)?)
    };
    let mut head = Vec::with_capacity(HEAD);
    let read = match &mut rest {
        Rest::File(f) => f.take(HEAD as u64).read_to_end(&mut head),
        Rest::Stdin(s) => s.lock().take(HEAD as u64).read_to_end(&mut head),
    };
    read.map_err(|source| FoldError::Read {
        path: label.clone(),
        source,
    })?;
    Ok(Input {
        kind: InputKind::of_bytes(&head),
        label,
        head,
        rest,
    })
}

impl Input {
    /// What the first bytes say it is.
    pub fn kind(&self) -> InputKind {
        self.kind
    }

    /// Its name in messages: the path, or `(standard input)`.
    pub fn label(&self) -> &Path {
        &self.label
    }

    /// Whether it holds no byte at all.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    /// Folded text's distinct stacks with their counts, sorted (the rules
    /// are [`folded`]'s); an empty input is [`FoldError::Empty`].
    pub fn into_folded(self) -> Result<Vec<(String, u64)>, FoldError> {
        if self.is_empty() {
            return Err(FoldError::Empty { path: self.label });
        }
        let label = self.label.clone();
        folded::parse(io::BufReader::new(self.into_reader()), &label)
    }

    /// All of it from the first byte, read once in order.
    pub fn into_reader(self) -> Box<dyn Read + Send> {
        let head = io::Cursor::new(self.head);
        match self.rest {
            Rest::File(f) => Box::new(head.chain(f)),
            Rest::Stdin(s) => Box::new(head.chain(s)),
        }
    }

    /// All of it as a file that can seek: the file itself when it can,
    /// else (a pipe) a copy in an unnamed temporary file.
    pub fn into_seekable(self) -> io::Result<File> {
        match self.rest {
            Rest::File(mut f) => {
                if f.seek(SeekFrom::Start(0)).is_ok() {
                    return Ok(f);
                }
                spool(&self.head, &mut f)
            }
            Rest::Stdin(s) => {
                // A redirected regular file can seek (from its start: the
                // bytes standard input buffered are still in it); a pipe
                // cannot, and what it buffered must come through it.
                let mut fd = File::from(s.as_fd().try_clone_to_owned()?);
                if fd.seek(SeekFrom::Start(0)).is_ok() {
                    return Ok(fd);
                }
                spool(&self.head, &mut s.lock())
            }
        }
    }
}

/// `head` and the rest of `stream` in an unnamed temporary file, rewound.
fn spool(head: &[u8], stream: &mut impl Read) -> io::Result<File> {
    let mut copy = tempfile::tempfile()?;
    copy.write_all(head)?;
    io::copy(stream, &mut copy)?;
    copy.seek(SeekFrom::Start(0))?;
    Ok(copy)
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
        let with_size = |size: u64| {
            let mut h = PERF_DATA_MAGIC.to_vec();
            h.extend(size.to_le_bytes());
            h
        };
        assert_eq!(InputKind::of_bytes(&with_size(104)), InputKind::PerfData);
        assert_eq!(InputKind::of_bytes(&with_size(16)), InputKind::PerfPipe);
        // A wrong size is still perf.data in file mode: its checks say why not.
        assert_eq!(InputKind::of_bytes(&with_size(17)), InputKind::PerfData);
        assert_eq!(InputKind::of_bytes(b"PERFILE2"), InputKind::PerfData);
        assert_eq!(InputKind::of_bytes(b"main;f 3\n"), InputKind::FoldedText);
        assert_eq!(InputKind::of_bytes(b"FLAME"), InputKind::FoldedText);
        assert_eq!(InputKind::of_bytes(b""), InputKind::FoldedText);
        // Big-endian perf.data (magic byte-swapped) is not read as perf.data.
        assert_eq!(InputKind::of_bytes(b"2ELIFREP"), InputKind::FoldedText);
    }

    #[test]
    fn an_empty_unit_means_samples() {
        let mut m = Metadata::default();
        assert_eq!(weight_unit(&m), "samples");
        m.weight_unit = "ns".into();
        assert_eq!(weight_unit(&m), "ns");
    }

    #[test]
    fn a_file_is_read_whole_after_its_head() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x");
        std::fs::write(&path, b"PERFILE2\x68\0\0\0\0\0\0\0rest of it").expect("write");
        let input = open(&path).expect("open");
        assert_eq!(input.kind(), InputKind::PerfData);
        let mut all = Vec::new();
        input.into_reader().read_to_end(&mut all).expect("read");
        assert_eq!(all, b"PERFILE2\x68\0\0\0\0\0\0\0rest of it");
        let mut file = open(&path).expect("open").into_seekable().expect("seek");
        let mut all = Vec::new();
        file.read_to_end(&mut all).expect("read");
        assert_eq!(all.len(), 26);
    }
}
