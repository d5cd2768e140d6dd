//! Differential profiles: compare a BASE and a NEW profile per function and
//! draw what changed (`flamerec diff`).
//!
//! This module owns loading either side ([`Side::load`]: any input `fold`
//! reads — a `.frec` recording, perf.data, or folded text, told apart by
//! `crate::input`), the per-function
//! comparison ([`Diff`]) with the call paths whose time grew ([`PathDiff`],
//! found in `paths`), and its three outputs: the `flamerec-diff/1` JSON
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
//! Read by the input layer's rules (`crate::input::folded` owns them): a
//! line that is not a stack and a count is an error naming the file and
//! line, since a CI gate must not pass on a half-read profile.
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
mod interrupts;
mod json;
mod markdown;
mod paths;
mod stats;
mod svg;
mod tally;

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::input::{self, folded};
use crate::{FoldError, FoldOptions, FunctionStats, Profile};

pub use compare::{
    group_name, same_samples_groups, Diff, DiffOptions, Finding, FunctionDiff, Gate, PathDiff,
    ProgramTime, Shares, Times, Trip, Verdict, DEFAULT_RUN_SPREAD,
};
pub use interrupts::is_interrupt_entry;
pub use json::{write_diff_json, DIFF_SCHEMA};
pub use markdown::{write_diff_markdown, MarkdownOptions};
pub use stats::{DispersionBasis, Interval, Noise, CONFIDENCE_PCT};
pub use svg::{write_diff_svg, SvgOptions};

/// Why a side of a diff could not be loaded or compared. Each renders as
/// one line.
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
    /// A side has no samples: a gate must not pass on nothing.
    #[error("{side} holds no samples ({inputs}): nothing to compare")]
    Empty {
        /// `BASE` or `NEW`.
        side: &'static str,
        /// Its inputs, comma-separated.
        inputs: String,
    },
    /// The inputs measured different things.
    #[error("{first} records {first_what} and {second} records {second_what}: {advice}")]
    Mismatch {
        /// One input.
        first: String,
        /// What it records.
        first_what: String,
        /// Another input.
        second: String,
        /// What that records.
        second_what: String,
        /// What to do.
        advice: &'static str,
    },
}

/// Where a side's numbers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideKind {
    /// `.frec` recordings: functions carry their module.
    Recording,
    /// Folded text (at least one input): functions are names only.
    Folded,
}

/// One input of a side: one run of the program.
#[derive(Debug, Clone)]
pub struct Run {
    /// The input's name (its path).
    pub label: String,
    /// Its distinct stacks with their weight, sorted by line.
    pub stacks: Vec<(String, u64)>,
    /// The recording's event (`cpu-clock`, `off-cpu`, …); `None` for folded text.
    pub event: Option<String>,
    /// Requested samples per second (0 when not sampled by frequency).
    pub frequency_hz: u64,
    /// CPU (or blocked) nanoseconds one unit of weight stands for: the
    /// period of a clock event sampled by frequency, 1 for `ns` weights;
    /// `None` when the input has no time (folded text, hardware events).
    pub ns_per_weight: Option<f64>,
    /// Samples (equal to the weight for folded text and counted events).
    pub samples: u64,
}

impl Run {
    /// Sum of the stack weights.
    pub fn weight(&self) -> u64 {
        self.stacks
            .iter()
            .fold(0u64, |acc, (_, w)| acc.saturating_add(*w))
    }
}

/// One side of a diff (BASE or NEW): one or more runs, and their stacks
/// merged (summed) for the outputs that draw one profile.
#[derive(Debug, Clone)]
pub struct Side {
    /// Folded text as soon as one input is.
    pub kind: SideKind,
    /// Distinct stacks `root;frame;...;leaf` with their weight summed over
    /// the runs, sorted by line; no zero weights.
    pub stacks: Vec<(String, u64)>,
    /// Per-function statistics of the recordings (`None` when an input is
    /// folded text); used to label functions with their module.
    pub functions: Option<Vec<FunctionStats>>,
    /// What a count means (`samples`, or `ns` for off-CPU recordings).
    pub weight_unit: String,
    /// Things the user should know (truncated recording, missing binaries),
    /// one line each without a prefix.
    pub warnings: Vec<String>,
    /// The runs, in the order given.
    pub runs: Vec<Run>,
}

impl Side {
    /// Loads `path`: a recording when it starts with the `FLAMEREC` magic (or
    /// is a perf.data file), folded text otherwise.
    pub fn load(path: &Path, opts: &FoldOptions) -> Result<Side, DiffError> {
        let input = input::open(path)?;
        let label = input.label().to_path_buf();
        let mut side = if input.kind().is_recording() {
            let profile = crate::fold_input(input, opts, &Default::default())?;
            Side::from_profile(profile)
        } else {
            Side::from_folded(BufReader::new(input.into_reader()), &label)?
        };
        for run in &mut side.runs {
            run.label = label.display().to_string();
        }
        Ok(side)
    }

    /// Loads every path as one run of the same side and merges them.
    pub fn load_runs(paths: &[PathBuf], opts: &FoldOptions) -> Result<Side, DiffError> {
        let mut sides = Vec::with_capacity(paths.len());
        for path in paths {
            let mut side = Side::load(path, opts)?;
            // Name the file in its warnings: several are merged.
            if paths.len() > 1 {
                for w in &mut side.warnings {
                    *w = format!("{}: {w}", path.display());
                }
            }
            sides.push(side);
        }
        Ok(Side::merge(sides))
    }

    /// One side made of the runs of `sides`, their stacks summed.
    pub fn merge(sides: Vec<Side>) -> Side {
        let mut kind = SideKind::Recording;
        let mut weight_unit = String::new();
        let mut functions: Option<Vec<FunctionStats>> = Some(Vec::new());
        let mut warnings = Vec::new();
        let mut runs = Vec::new();
        for side in sides {
            if side.kind == SideKind::Folded {
                kind = SideKind::Folded;
            }
            if weight_unit.is_empty() {
                weight_unit = side.weight_unit;
            }
            functions = match (functions, side.functions) {
                (Some(mut all), Some(f)) => {
                    all.extend(f);
                    Some(all)
                }
                _ => None,
            };
            warnings.extend(side.warnings);
            runs.extend(side.runs);
        }
        if runs.is_empty() {
            kind = SideKind::Folded;
        }
        if weight_unit.is_empty() {
            weight_unit = "samples".to_string();
        }
        let stacks = if runs.len() == 1 {
            runs[0].stacks.clone()
        } else {
            let mut sum: HashMap<&str, u64> = HashMap::new();
            for run in &runs {
                for (line, w) in &run.stacks {
                    let e = sum.entry(line.as_str()).or_insert(0);
                    *e = e.saturating_add(*w);
                }
            }
            let mut stacks: Vec<(String, u64)> =
                sum.into_iter().map(|(l, w)| (l.to_string(), w)).collect();
            stacks.sort_unstable();
            stacks
        };
        Side {
            kind,
            stacks,
            functions: if kind == SideKind::Recording {
                functions
            } else {
                None
            },
            weight_unit,
            warnings,
            runs,
        }
    }

    /// Parses folded text; `path` only names the input in errors.
    pub fn from_folded<R: io::BufRead>(input: R, path: &Path) -> Result<Side, DiffError> {
        let stacks = folded::parse(input, path)?;
        let run = Run {
            label: path.display().to_string(),
            samples: stacks
                .iter()
                .fold(0u64, |acc, (_, w)| acc.saturating_add(*w)),
            stacks: stacks.clone(),
            event: None,
            frequency_hz: 0,
            ns_per_weight: None,
        };
        Ok(Side {
            kind: SideKind::Folded,
            stacks,
            functions: None,
            weight_unit: "samples".to_string(),
            warnings: Vec::new(),
            runs: vec![run],
        })
    }

    /// Takes a folded recording; its damage and warnings become [`Side::warnings`].
    pub fn from_profile(profile: Profile) -> Side {
        let mut warnings = Vec::new();
        if let Some(d) = &profile.damage {
            warnings.push(d.to_string());
        }
        warnings.extend(profile.warnings);
        let mut stacks = profile.stacks.into_text();
        stacks.retain(|(_, w)| *w > 0);
        let meta = &profile.metadata;
        let weight_unit = input::weight_unit(meta).to_string();
        let run = Run {
            label: String::new(),
            stacks: stacks.clone(),
            event: Some(meta.event.clone()),
            frequency_hz: meta.frequency_hz,
            ns_per_weight: ns_per_weight(&meta.event, meta.frequency_hz, &weight_unit),
            samples: profile.samples,
        };
        Side {
            kind: SideKind::Recording,
            stacks,
            functions: Some(profile.functions),
            weight_unit,
            warnings,
            runs: vec![run],
        }
    }

    /// Sum of the stack weights: what this side's shares are relative to.
    pub fn total(&self) -> u64 {
        self.stacks
            .iter()
            .fold(0u64, |acc, (_, w)| acc.saturating_add(*w))
    }

    /// The inputs, comma-separated, for messages.
    pub fn labels(&self) -> String {
        let labels: Vec<&str> = self.runs.iter().map(|r| r.label.as_str()).collect();
        labels.join(", ")
    }
}

/// The time one unit of weight stands for: a clock event sampled by
/// frequency fires once per `1/frequency` seconds of CPU time (the kernel
/// turns a clock event's frequency into that fixed period), and off-CPU
/// weights are nanoseconds already. Other events have no time.
fn ns_per_weight(event: &str, frequency_hz: u64, weight_unit: &str) -> Option<f64> {
    if weight_unit == "ns" {
        return Some(1.0);
    }
    let clock = ["cpu-clock", "task-clock"]
        .iter()
        .any(|c| event == *c || event.starts_with(&format!("{c}:")));
    (clock && frequency_hz > 0).then(|| 1e9 / frequency_hz as f64)
}

/// Checks that `base` and `new` can be compared: neither is empty, and all
/// their recordings measured the same event in the same unit.
pub fn check_comparable(base: &Side, new: &Side) -> Result<(), DiffError> {
    for (name, side) in [("BASE", base), ("NEW", new)] {
        if side.runs.is_empty() || side.total() == 0 {
            return Err(DiffError::Empty {
                side: name,
                inputs: side.labels(),
            });
        }
    }
    let recordings: Vec<&Run> = base
        .runs
        .iter()
        .chain(&new.runs)
        .filter(|r| r.event.is_some())
        .collect();
    if let Some(first) = recordings.first() {
        for r in &recordings[1..] {
            if r.event != first.event {
                return Err(DiffError::Mismatch {
                    first: first.label.clone(),
                    first_what: first.event.clone().unwrap_or_default(),
                    second: r.label.clone(),
                    second_what: r.event.clone().unwrap_or_default(),
                    advice: "record every run with the same -e",
                });
            }
        }
    }
    Ok(())
}
