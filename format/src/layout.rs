//! Constants of the on-disk layout (documented in the crate root).

/// First eight bytes of every `.frec` file.
pub const MAGIC: [u8; 8] = *b"FLAMEREC";
/// Readers refuse files whose major version differs.
pub const VERSION_MAJOR: u16 = 1;
/// Minor versions change only what readers of the same major can ignore:
/// new JSON fields, optional records, sections after the trailer.
/// 1.1: the names section after the trailer.
pub const VERSION_MINOR: u16 = 1;
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
    /// From here on, records are `tag, length, payload`: a reader skips the
    /// ones it does not know.
    pub const FIRST_OPTIONAL: u8 = 64;
    pub const NAMES: u8 = 64;
    pub const NAMES_END: u8 = 65;
}
