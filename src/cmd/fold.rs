//! `flamerec fold`: a recording → folded stacks, SVG, JSON summary.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `flamerec fold`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The recording (.frec).
    input: PathBuf,
}

pub fn run(_a: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("fold: not wired yet")
}

/// Folds `input` and writes an SVG flamegraph to `svg`.
pub fn write_svg_of(_input: &Path, _svg: &Path, _title: Option<&str>) -> anyhow::Result<()> {
    anyhow::bail!("fold: not wired yet")
}
