//! Constants of the on-disk layout (documented in the crate root).

/// First eight bytes of every `.frec` file.
pub const MAGIC: [u8; 8] = *b"FLAMEREC";
/// The major version written. Readers refuse files of a major version they
/// do not know; this one reads 1 and 2.
///
/// 2.0 (flamerec 0.2): the names section after the trailer; stack nodes
/// whose frame is new say so in one byte; sample times relative to the
/// sampling period. A reader of 1.x refuses 2.0 files with the version
/// message rather than mistaking the new records for damage.
pub const VERSION_MAJOR: u16 = 2;
/// Minor versions change only what readers of the same major can ignore:
/// new JSON fields, optional records, sections after the trailer.
pub const VERSION_MINOR: u16 = 1;
/// The oldest major version readers still read.
pub const OLDEST_MAJOR: u16 = 1;
/// First four bytes of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"FRCK";
/// No chunk, compressed or not, is larger than this; readers refuse bigger ones.
pub const MAX_CHUNK_BYTES: usize = 64 << 20;

/// Record tags inside a chunk payload.
pub(crate) mod tag {
    pub const META: u8 = 1;
    pub const STRINGS: u8 = 2;
    pub const MODULES: u8 = 3;
    pub const FRAMES: u8 = 4;
    pub const NODES: u8 = 5;
    pub const KSYMS: u8 = 6;
    pub const COMM: u8 = 7;
    pub const FORK: u8 = 8;
    pub const EXIT: u8 = 9;
    pub const MAPPING: u8 = 10;
    pub const SAMPLES: u8 = 11;
    pub const LOST: u8 = 12;
    pub const TOTALS: u8 = 13;
    /// Stack nodes whose frame column says "the next new frame" in one byte (2.0).
    pub const NODES_V2: u8 = 14;
    /// Samples whose times are relative to the sampling period per thread (2.0).
    pub const SAMPLES_V2: u8 = 15;
    /// From here on, records are `tag, length, payload`: a reader skips the
    /// ones it does not know.
    pub const FIRST_OPTIONAL: u8 = 64;
    pub const NAMES: u8 = 64;
    pub const NAMES_END: u8 = 65;
    /// A process's identity: its cgroup, container and pid in its own
    /// pid namespace (2.1).
    pub const IDENTITY: u8 = 66;
    /// Names the recorder made itself (Python code), as it learned them:
    /// the names record's payload, before the trailer (2.1).
    pub const OWN_NAMES: u8 = 67;
    /// How far the recorder's lookup of names has come: frames with lower
    /// ids are named (or left for fold) by the names records before it (2.1).
    pub const NAMES_THROUGH: u8 = 68;
}
