//! Errors of reading and writing `.frec` files.

use thiserror::Error;

/// Why a `.frec` stream could not be written or read at all.
///
/// Damage after a valid header is not an error: the reader stops at the last
/// complete chunk and reports a [`crate::Damage`].
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Reading or writing the underlying file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The input is empty.
    #[error("the file is empty")]
    Empty,
    /// The input does not start with the `.frec` magic.
    #[error("not a flamerec recording (no FLAMEREC header)")]
    NotFrec,
    /// Written by an incompatible flamerec.
    #[error("recording format version {major}.{minor} is not supported (this flamerec reads 1.x to {supported}.x)")]
    UnsupportedVersion {
        /// Major version in the file.
        major: u16,
        /// Minor version in the file.
        minor: u16,
        /// Major version this reader understands.
        supported: u16,
    },
    /// The file holds a header but not even the metadata chunk could be read.
    #[error("the recording holds no readable data: {0}")]
    NoData(String),
    /// Metadata or totals could not be encoded.
    #[error("cannot encode: {0}")]
    Encode(String),
}
