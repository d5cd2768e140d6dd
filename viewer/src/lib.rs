//! The interactive viewer behind `flamerec view`: a profile (a `.frec`
//! recording or folded text, or two of them for a diff) turned into compact
//! JSON ([`ViewData`]) and shown by a plain-JS client, either from a local
//! HTTP [`Server`] on 127.0.0.1 or as one self-contained page
//! ([`write_html`]).
//!
//! Modules: `input` (reading inputs), `tree` (the JSON the page reads),
//! `html` (the page and how data is embedded in it), `server` (HTTP). The
//! client lives in `assets/`: `index.html` and the scripts under `js/`,
//! compiled into the binary. This crate never records and never serves
//! anything from the file system.
#![forbid(unsafe_code)]

mod error;
mod html;
mod input;
mod server;
mod tree;

use std::path::Path;

pub use error::ViewerError;
pub use html::{escape_script_json, write_html};
pub use server::{route, Route, Server};
pub use tree::VIEW_SCHEMA;

/// A profile ready to show: the page's JSON and what the user should know.
#[derive(Debug, Clone)]
pub struct ViewData {
    json: String,
    warnings: Vec<String>,
    nodes: usize,
    stacks: usize,
}

impl ViewData {
    /// Reads `base` (and `new`, for a diff from `base` to `new`).
    /// Each is a `.frec` recording or folded text.
    pub fn load(base: &Path, new: Option<&Path>) -> Result<ViewData, ViewerError> {
        let new = new.map(|n| [n]);
        let opts = flamerec_fold::FoldOptions::default();
        Self::load_runs(&[base], new.as_ref().map(|n| &n[..]), &opts)
    }

    /// Like [`ViewData::load`] with several runs per side, each side's runs
    /// merged into one profile (stacks summed).
    /// Recordings are folded with `opts` (its cache, threads and kernel
    /// symbols; one root per thread whatever it says).
    pub fn load_runs(
        base: &[&Path],
        new: Option<&[&Path]>,
        opts: &flamerec_fold::FoldOptions,
    ) -> Result<ViewData, ViewerError> {
        let first = input::read_all(base, opts)?;
        let second = new.map(|n| input::read_all(n, opts)).transpose()?;
        let name = |paths: &[&Path]| match paths {
            [one] => file_name(one),
            [first, rest @ ..] => format!("{} (+{} more)", file_name(first), rest.len()),
            [] => String::new(),
        };
        let title = match new {
            Some(n) => format!("{} → {}", name(base), name(n)),
            None => name(base),
        };
        let mut sides = vec![&first];
        sides.extend(second.as_ref());
        Self::encode(&title, &sides)
    }

    /// Builds the data from folded stacks (`root;...;leaf`, weight) already
    /// in memory; `new` makes it a diff from `base` to `new`.
    pub fn from_stacks(
        title: &str,
        base: Vec<(String, u64)>,
        new: Option<Vec<(String, u64)>>,
    ) -> Result<ViewData, ViewerError> {
        let side = |stacks: Vec<(String, u64)>| input::Source {
            info: vec![("stacks".into(), stacks.len().to_string())],
            stacks,
            unit: "samples".into(),
            ..Default::default()
        };
        let first = side(base);
        let second = new.map(side);
        let mut sides = vec![&first];
        sides.extend(second.as_ref());
        Self::encode(title, &sides)
    }

    fn encode(title: &str, sides: &[&input::Source]) -> Result<ViewData, ViewerError> {
        let (json, shape) = tree::encode(title, sides).map_err(ViewerError::Encode)?;
        Ok(ViewData {
            json,
            warnings: sides.iter().flat_map(|s| s.warnings.clone()).collect(),
            nodes: shape.nodes,
            stacks: shape.stacks,
        })
    }

    /// The JSON the page reads (schema [`VIEW_SCHEMA`]).
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Warnings about the inputs (truncated recording, skipped lines), one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Nodes in the merged call tree.
    pub fn node_count(&self) -> usize {
        self.nodes
    }

    /// Distinct stacks over all inputs.
    pub fn stack_count(&self) -> usize {
        self.stacks
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
