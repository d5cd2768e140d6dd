//! Names travel with the recording: at the end, every distinct user frame
//! the recording holds (each one a sampled address) is looked up in the
//! binaries the recorder saw — with their separate debug files and the
//! symbol cache `fold` uses — and the names are appended after the trailer.
//!
//! Binaries that vanished, cannot be read or changed since they were mapped
//! (build id mismatch) are left out: `fold` looks their frames up itself
//! (and says so when it cannot), and one warning here gives the count.

use std::io::Write;
use std::time::Instant;

use flamerec_format::{write_names, FormatError, Frame, Module, Tables};
use flamerec_symbolize::{embed, NameOptions};

use crate::{EmbedOptions, NamesSummary};

/// Looks up the names of `frames` (all of a recording's frames, by id).
pub(crate) struct Lookup {
    names: Vec<(u32, Vec<String>)>,
    summary: NamesSummary,
    warnings: Vec<String>,
    started: Instant,
}

/// Looks up the names of the frames of `modules`; the work runs on the
/// calling thread (and rayon's pool).
pub(crate) fn lookup(opts: &EmbedOptions, modules: Vec<Module>, frames: Vec<Frame>) -> Lookup {
    let started = Instant::now();
    let mut tables = Tables::default();
    tables.modules = modules;
    tables.frames = frames;
    let used: Vec<u32> = (0..tables.frames.len() as u32).collect();
    let names = NameOptions {
        inline: true,
        cache_dir: opts.cache_dir.clone(),
        debug_dirs: opts.debug_dirs.clone(),
        ..Default::default()
    };
    let e = embed(&tables, &used, &names);
    let mut warnings = e.warnings;
    if e.unusable_modules > 0 {
        let s = if e.unusable_modules == 1 { "y" } else { "ies" };
        warnings.push(format!(
            "{} binar{s} missing, unreadable or changed since they were mapped: the names of their {} frames are not embedded (fold looks them up where the binaries are)",
            e.unusable_modules, e.unusable_frames
        ));
    }
    Lookup {
        summary: NamesSummary {
            frames: e.names.len() as u64,
            left_out: e.unusable_frames as u64,
            elapsed: Default::default(),
        },
        names: e.names,
        warnings,
        started,
    }
}

impl Lookup {
    /// Appends the names section to `out` (the finished recording).
    pub(crate) fn write<W: Write>(
        mut self,
        out: &mut W,
        warnings: &mut Vec<String>,
    ) -> Result<NamesSummary, FormatError> {
        let complete = self.summary.left_out == 0;
        write_names(out, &self.names, complete)?;
        warnings.append(&mut self.warnings);
        self.summary.elapsed = self.started.elapsed();
        Ok(self.summary)
    }
}
