//! Why the viewer could not start. Each error renders as one line that names
//! the file or address involved.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// What went wrong while loading a profile or starting the server.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ViewerError {
    /// The input file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The input path.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// Folding a `.frec` recording failed (its message names the file).
    #[error(transparent)]
    Fold(#[from] flamerec_fold::FoldError),
    /// Folded text that does not read (its message names the file and line).
    #[error(transparent)]
    Folded(#[from] flamerec_fold::diff::DiffError),
    /// Inputs merged into one side weigh samples in different units.
    #[error("{} weighs samples in {first_unit} and {} in {other_unit}: they do not add up", first.display(), other.display())]
    Units {
        /// The first input.
        first: PathBuf,
        /// Its unit.
        first_unit: String,
        /// The input that differs.
        other: PathBuf,
        /// Its unit.
        other_unit: String,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for (0: any free port).
        port: u16,
        /// What the OS said.
        source: io::Error,
    },
    /// The HTTP server could not start on the socket.
    #[error("cannot start the HTTP server: {reason}")]
    Server {
        /// What tiny_http said.
        reason: String,
    },
    /// The page's JSON could not be encoded.
    #[error("cannot encode the profile as JSON: {0}")]
    Encode(serde_json::Error),
}
