//! Differential profiles: compare a BASE and a NEW profile per function and
//! draw what changed (`flamerec diff`).
//!
//! This module owns loading either side ([`Side::load`]: a `.frec` recording,
//! detected by its `FLAMEREC` magic at byte 0, or folded text), the per-function
//! comparison ([`Diff`]), and its three outputs: the `flamerec-diff/1` JSON
//! object, a Markdown report for CI job summaries, and a differential SVG
//! flamegraph. It decides nothing about exit statuses or where outputs go;
//! the CLI does.
//!
//! # Numbers
//!
//! Each side is normalized by its own total weight, so a faster NEW run with
//! fewer samples compares fairly. A function's *self* share is the weight of
//! samples whose leaf it is; its *total* share is the weight of samples with
//! it anywhere in the stack, each sample counted once however often the
//! function recurs. Deltas are NEW minus BASE, in percentage points. The first
//! frame of a stack is its root (the process or thread name, as `flamerec
//! fold`, `stackcollapse-perf` and `inferno-collapse-perf` write it) and is not
//! a function, exactly as in `fold --json`.
//!
//! Functions are told apart by name and module when both sides are
//! recordings. Folded text carries no modules, so as soon as one side is
//! folded text, functions are matched by name alone and the module column
//! shows the recording's module for that name when it has exactly one.
//!
//! # Folded text input
//!
//! One stack per line, `frame;frame;...;leaf COUNT`: the count is the last
//! whitespace-separated token and a whole number; frames may contain spaces.
//! Blank lines and lines starting with `# ` (inferno's comment syntax) are
//! skipped; repeated stacks add up. Any other line — no count, a count that
//! is not a whole number, no frames, bytes that are not UTF-8 — is an error
//! naming the file and line number: a CI gate must not pass on a
//! half-read profile, so nothing is skipped silently.
//!
//! # The differential flamegraph
//!
//! `--svg` draws NEW (frame widths are NEW's samples) with inferno, and
//! colors every frame — inner frames included — by the change of its stack
//! path's total share since BASE: red grew, blue shrank, near-white
//! unchanged, saturation relative to the largest change in the graph (at
//! least one point, so noise stays pale). The tooltip of each frame adds its
//! change in points. inferno's own differential mode cannot do this: it
//! colors a frame by the count difference of the one line that opened it, so
//! inner frames come out white and leaves are compared in raw counts, not
//! shares. So we lay the graph out with inferno and recolor each frame by its
//! position (depth and first sample), which our own tree reproduces from the
//! same sorted lines. What vanished since BASE cannot have a width in a
//! graph of NEW, so the subtitle lists the functions that vanished (largest
//! BASE share first), and the Markdown report lists them among the
//! improvements, marked *vanished*; new functions are marked *new*.

mod compare;
mod folded;
mod report;
mod svg;

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::{FoldError, FoldOptions, FunctionStats, Profile};

pub use compare::{Diff, FunctionDiff, Shares};
pub use report::{write_diff_json, write_diff_markdown, MarkdownOptions, DIFF_SCHEMA};
pub use svg::{write_diff_svg, SvgOptions};

/// Why a side of a diff could not be loaded. Each renders as one line.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DiffError {
    /// The input file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The input path.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// The input is a recording that could not be folded.
    #[error(transparent)]
    Fold(#[from] FoldError),
    /// A line of folded text is not `frame;...;leaf COUNT`.
    #[error("{}:{line}: {reason}", path.display())]
    Folded {
        /// The input path.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        reason: String,
    },
}

/// Where a side's numbers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideKind {
    /// A `.frec` recording: functions carry their module.
    Recording,
    /// Folded text: functions are names only.
    Folded,
}

/// One side of a diff (BASE or NEW): folded stacks and, for recordings,
/// per-function statistics with modules.
#[derive(Debug, Clone)]
pub struct Side {
    /// Whether this came from a recording or from folded text.
    pub kind: SideKind,
    /// Distinct stacks `root;frame;...;leaf` with their weight, sorted by line;
    /// no zero weights.
    pub stacks: Vec<(String, u64)>,
    /// Per-function statistics from the recording (`None` for folded text).
    pub functions: Option<Vec<FunctionStats>>,
    /// What a count means (`samples`, or `ns` for off-CPU recordings).
    pub weight_unit: String,
    /// Things the user should know (truncated recording, missing binaries),
    /// one line each without a prefix.
    pub warnings: Vec<String>,
}

impl Side {
    /// Loads `path`: a recording when it starts with the `FLAMEREC` magic (or
    /// is a perf.data file, which folding refuses with its own message),
    /// folded text otherwise.
    pub fn load(path: &Path, opts: &FoldOptions) -> Result<Side, DiffError> {
        let read_err = |source| DiffError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(read_err)?;
        let mut magic = Vec::with_capacity(8);
        (&mut file)
            .take(8)
            .read_to_end(&mut magic)
            .map_err(read_err)?;
        if magic == flamerec_format::MAGIC || magic == b"PERFILE2" {
            drop(file);
            let profile = crate::fold_recording(path, opts)?;
            return Ok(Side::from_profile(profile));
        }
        // Read the whole file again from the start, through one reader.
        let file = File::open(path).map_err(read_err)?;
        Side::from_folded(BufReader::new(file), path)
    }

    /// Parses folded text; `path` only names the input in errors.
    pub fn from_folded<R: io::BufRead>(input: R, path: &Path) -> Result<Side, DiffError> {
        let stacks = folded::parse(input, path)?;
        Ok(Side {
            kind: SideKind::Folded,
            stacks,
            functions: None,
            weight_unit: "samples".to_string(),
            warnings: Vec::new(),
        })
    }

    /// Takes a folded recording; its damage and warnings become [`Side::warnings`].
    pub fn from_profile(profile: Profile) -> Side {
        let mut warnings = Vec::new();
        if let Some(d) = &profile.damage {
            warnings.push(d.to_string());
        }
        warnings.extend(profile.warnings);
        let mut stacks = profile.stacks;
        stacks.retain(|(_, w)| *w > 0);
        let weight_unit = match profile.metadata.weight_unit.as_str() {
            "" => "samples".to_string(),
            unit => unit.to_string(),
        };
        Side {
            kind: SideKind::Recording,
            stacks,
            functions: Some(profile.functions),
            weight_unit,
            warnings,
        }
    }

    /// Sum of the stack weights: what this side's shares are relative to.
    pub fn total(&self) -> u64 {
        self.stacks
            .iter()
            .fold(0u64, |acc, (_, w)| acc.saturating_add(*w))
    }
}
