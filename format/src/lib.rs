//! The `.frec` recording format: types, a streaming [`Writer`] and a
//! streaming [`Reader`].
//!
//! This crate owns the bytes on disk and nothing else: no Linux calls, no
//! symbolization, no unsafe code.
//!
//! # Layout
//!
//! ```text
//! file   := header chunk*
//! header := "FLAMEREC" major:u16le minor:u16le reserved:u32le        (16 bytes)
//! chunk  := "FRCK" clen:u32le ulen:u32le crc:u32le payload[clen]
//!           crc = CRC-32 of (clen, ulen, payload); payload = one zstd frame
//!           that decompresses to ulen bytes of records
//! record := tag:u8 fields...      (integers are LEB128 varints, signed ones zigzag;
//!                                  bytes are varint length + data)
//! ```
//!
//! | tag | record | fields |
//! |---|---|---|
//! | 1 | metadata | JSON [`Metadata`]; the whole first chunk |
//! | 2 | strings | n, n lengths, then the n strings' bytes; ids count up from 0 |
//! | 3 | module | kind:u8, path string id, build id bytes; ids count up from 0 |
//! | 4 | frames | n, n module ids, n addresses (signed delta from the previous address of the same module in the block); ids count up from 0 |
//! | 6 | kernel symbols | n, then per symbol: start (signed delta from the previous), size, name string id, module string id |
//! | 5 | stack nodes (1.x) | n, n distances back to the parent (node id − parent id), n frame ids (signed delta from the previous); ids count up from 1, 0 is the empty stack |
//! | 14 | stack nodes (2.x) | as tag 5, but a frame is 0 for "the next frame no node referenced yet" (a frame's first use is by a new node, in frame id order), else its signed delta from the previous node's frame, plus one |
//! | 7 | comm | time, pid, tid, name string id, exec:u8 |
//! | 8 | fork | time, pid, ppid, tid, ptid |
//! | 9 | exit | time, pid, tid |
//! | 10 | mapping | time, pid, start, length, file offset, module id |
//! | 11 | samples (1.x) | n, first time in µs, then five columns of n values: time delta µs (signed), pid, tid − pid (signed), stack node id (signed, relative to the highest id so far in the block), weight |
//! | 15 | samples (2.x) | n, first time in µs, sampling period in µs (0: none), then columns: pid, tid − pid (signed), time, stack (as tag 11), weight. A time is 2·zigzag(t − t_prev_same_thread − period) when its thread has an earlier sample in the block and there is a period, else 2·zigzag(t − t_prev_sample) + 1: sampled threads come back after about one period, so mostly jitter is left |
//! | 12 | lost | time, count |
//! | 13 | totals | JSON [`Totals`]; last record before the names section |
//! | 64 | names | optional record: names of sampled user frames ([`write_names`]) |
//! | 65 | names end | optional record: JSON [`NamesEnd`]; last record of the file |
//! | 66 | identity | optional record (2.1): JSON [`Identity`], a process's cgroup, container and pid in its own namespace; before the trailer |
//! | 67 | own names | optional record (2.1): names of sampled frames as the recorder learns them (Python code, JIT code, binaries' functions), as a names record's payload; before the trailer |
//! | 68 | names through | optional record (2.1): frame count n — frames with lower ids were looked up (named by the names records before it, or left for `fold`); before the trailer |
//!
//! Tags from 64 on frame their record as `tag, length, payload`, so a reader
//! skips optional records it does not know. The names section (format 1.1)
//! follows the trailer in chunks of its own, which 1.0 readers never read;
//! damage there leaves the recording whole and only its names partial.
//!
//! Times are nanoseconds since the recording started (samples: microseconds).
//! Writers write format 2.1 (2.0 and the identity record); readers read 1.x and 2.x (1.x readers refuse
//! 2.0 files with the version message: tags 14 and 15 are new records they
//! could not skip).
//! Stacks are a prefix tree, root first: a sample names only its leaf node.
//! The definitions a chunk introduces (strings, modules, frames, kernel
//! symbols, stack nodes, in that order) stand at its head, one column-wise
//! block per kind, before the events and samples that use them, so any
//! prefix of whole chunks is self-contained. Columns of similar values
//! compress far better than interleaved rows. The writer cuts a chunk at least every second
//! (the recorder's call) and whenever 1 MiB is buffered. A file without the
//! totals record is truncated; the reader still yields every complete chunk
//! and reports a [`Damage`].
#![forbid(unsafe_code)]

mod chunk;
mod codec;
mod crc;
mod error;
mod layout;
mod names;
mod reader;
mod summary;
mod types;
mod writer;

pub use error::FormatError;
pub use layout::{MAGIC, MAX_CHUNK_BYTES, OLDEST_MAJOR, VERSION_MAJOR, VERSION_MINOR};
pub use names::{write_names, EmbeddedNames, NamesEnd, NamesState};
pub use reader::{Damage, Reader, Tables};
pub use summary::{ContainerSamples, Summary};
pub use types::{
    Event, Frame, FrameId, Identity, JitFrames, KernelSymbol, Mapping, Metadata, Module, ModuleId,
    ModuleKind, PythonRead, ReadGap, Sample, StackId, StringId, Totals, Window,
};
pub use writer::{Writer, DEFAULT_LEVEL};

use std::io::Read;

/// A whole recording in memory: for tests, `info` and small tools. Folding
/// streams with [`Reader`] instead.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Metadata from the first chunk.
    pub metadata: Metadata,
    /// Interned tables.
    pub tables: Tables,
    /// Every sample, in stream order.
    pub samples: Vec<Sample>,
    /// Every other event, in stream order (metadata and totals included).
    pub events: Vec<Event>,
    /// The trailer, when the file is complete.
    pub totals: Option<Totals>,
    /// Why reading stopped early, if it did.
    pub damage: Option<Damage>,
    /// Bytes of complete chunks read.
    pub bytes: u64,
    /// User-space names embedded after the trailer.
    pub names: EmbeddedNames,
}

impl Recording {
    /// Reads a whole recording.
    pub fn read<R: Read>(input: R) -> Result<Self, FormatError> {
        let mut reader = Reader::new(input)?;
        let mut samples = Vec::new();
        let mut events = Vec::new();
        while let Some(chunk) = reader.next_events()? {
            for e in chunk {
                match e {
                    Event::Samples(s) => samples.extend(s),
                    other => events.push(other),
                }
            }
        }
        Ok(Recording {
            metadata: reader.metadata().clone(),
            tables: reader.tables().clone(),
            samples,
            events,
            totals: reader.totals().cloned(),
            damage: reader.damage().cloned(),
            bytes: reader.offset(),
            names: reader.take_names(),
        })
    }

    /// Samples lost, from the trailer or, in a truncated file, the lost records.
    pub fn lost_samples(&self) -> u64 {
        match &self.totals {
            Some(t) => t.lost_samples,
            None => self
                .events
                .iter()
                .map(|e| match e {
                    Event::Lost { count, .. } => *count,
                    _ => 0,
                })
                .sum(),
        }
    }
}
