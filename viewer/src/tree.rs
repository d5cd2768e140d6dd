//! The page's data: stacks of one or two inputs merged into one prefix tree,
//! sent as compact JSON (schema `flamerec-view/1`).
//!
//! Layout, so the client can rebuild the tree without objects per node:
//! `strings` is the name table, sorted, so a node's children, which come in
//! name-id order, are alphabetical as flamegraph.pl draws them; `nodes` is
//! the tree in preorder, flattened to `name, child_count, self` per node, or
//! `name, child_count, self_base, self_new` for a diff. The top-level nodes
//! are the root frames (threads, processes or whatever folded text started
//! with); `threads` describes each of them for the page's filter. Totals
//! are left to the client, which sums them bottom-up in one pass.
//!
//! This module must not read files or know about HTTP.

use std::collections::HashMap;

use serde::Serialize;

use crate::input::Source;

/// Schema name of the page's JSON.
pub const VIEW_SCHEMA: &str = "flamerec-view/1";

/// A root frame: (label, thread name, process label) as string ids, pid, tid.
type ThreadJson = (u32, u32, u32, Option<u32>, Option<u32>);

#[derive(Serialize)]
struct Json<'a> {
    schema: &'static str,
    title: &'a str,
    unit: &'a str,
    diff: bool,
    /// Per input, (label, value) lines.
    info: Vec<&'a [(String, String)]>,
    /// Per input, the sum of all weights.
    totals: Vec<u64>,
    strings: Vec<&'a str>,
    threads: Vec<ThreadJson>,
    nodes: Vec<u64>,
    warnings: Vec<&'a str>,
}

/// One stack of one side, as a range of `Build::frames`.
struct Path {
    start: usize,
    end: usize,
    side: usize,
    count: u64,
}

/// Sizes of what [`encode`] produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Tree nodes sent.
    pub nodes: usize,
    /// Distinct stacks over all inputs.
    pub stacks: usize,
}

/// Stacks as runs of name ids (alphabetical ids) and the sorted name table.
struct Interned<'a> {
    strings: Vec<&'a str>,
    frames: Vec<u32>,
    paths: Vec<Path>,
}

/// Splits every stack into frames and numbers the names alphabetically.
fn intern<'a>(sides: &[&'a Source]) -> Interned<'a> {
    // Provisional ids in first-seen order, then renumbered by name.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut names: Vec<&str> = Vec::new();
    let mut frames: Vec<u32> = Vec::new();
    let mut paths: Vec<Path> = Vec::new();
    for (side, src) in sides.iter().enumerate() {
        for (line, count) in &src.stacks {
            let start = frames.len();
            for frame in line.split(';') {
                let id = *ids.entry(frame).or_insert_with(|| {
                    names.push(frame);
                    (names.len() - 1) as u32
                });
                frames.push(id);
            }
            paths.push(Path {
                start,
                end: frames.len(),
                side,
                count: *count,
            });
        }
    }
    let mut by_name: Vec<u32> = (0..names.len() as u32).collect();
    by_name.sort_unstable_by_key(|&i| names.get(i as usize).copied().unwrap_or(""));
    let mut rank = vec![0u32; names.len()];
    for (r, &i) in by_name.iter().enumerate() {
        if let Some(slot) = rank.get_mut(i as usize) {
            *slot = r as u32;
        }
    }
    for f in &mut frames {
        *f = rank.get(*f as usize).copied().unwrap_or(0);
    }
    let strings = by_name
        .iter()
        .map(|&i| names.get(i as usize).copied().unwrap_or(""))
        .collect();
    Interned {
        strings,
        frames,
        paths,
    }
}

/// The flattened preorder tree, its top-level names and the distinct stack count.
struct Tree {
    nodes: Vec<u64>,
    top_level: Vec<u32>,
    distinct: usize,
}

/// Sorts the paths and walks them once, opening a node wherever a path
/// leaves the previous one: sorted paths make that a preorder.
fn build(mut it: Interned<'_>, stride: usize) -> (Tree, Vec<&str>) {
    let frames = &it.frames;
    it.paths.sort_unstable_by(|a, b| {
        let fa = frames.get(a.start..a.end).unwrap_or(&[]);
        let fb = frames.get(b.start..b.end).unwrap_or(&[]);
        fa.cmp(fb).then(a.side.cmp(&b.side))
    });
    let mut t = Tree {
        nodes: Vec::new(),
        top_level: Vec::new(),
        distinct: 0,
    };
    let mut open: Vec<usize> = Vec::new(); // node offsets of the current path
    let mut prev: &[u32] = &[];
    for p in &it.paths {
        let cur = frames.get(p.start..p.end).unwrap_or(&[]);
        let common = prev.iter().zip(cur).take_while(|(a, b)| a == b).count();
        if t.distinct == 0 || cur != prev {
            t.distinct += 1;
        }
        open.truncate(common);
        for &name in cur.get(common..).unwrap_or(&[]) {
            match open.last() {
                Some(&parent) => {
                    if let Some(c) = t.nodes.get_mut(parent + 1) {
                        *c += 1;
                    }
                }
                None => t.top_level.push(name),
            }
            open.push(t.nodes.len());
            t.nodes.push(u64::from(name));
            t.nodes.resize(t.nodes.len() + stride - 1, 0);
        }
        if let Some(&leaf) = open.last() {
            if let Some(s) = t.nodes.get_mut(leaf + 2 + p.side) {
                *s = s.saturating_add(p.count);
            }
        }
        prev = cur;
    }
    (t, it.strings)
}

/// One entry per top-level node; thread and process names the frames do
/// not already provide are appended to `strings`.
fn thread_table<'a>(
    sides: &[&'a Source],
    top_level: &[u32],
    strings: &mut Vec<&'a str>,
) -> Vec<ThreadJson> {
    let mut string_ids: HashMap<&str, u32> = strings
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, i as u32))
        .collect();
    let mut threads = Vec::with_capacity(top_level.len());
    for &label in top_level {
        let text = strings.get(label as usize).copied().unwrap_or("");
        let info = sides.iter().find_map(|s| s.roots.get(text));
        let (name, process) = info.map_or((text, text), |i| (i.name.as_str(), i.process.as_str()));
        let mut ids = [0u32; 2];
        for (slot, s) in ids.iter_mut().zip([name, process]) {
            *slot = *string_ids.entry(s).or_insert_with(|| {
                strings.push(s);
                (strings.len() - 1) as u32
            });
        }
        threads.push((
            label,
            ids[0],
            ids[1],
            info.and_then(|i| i.pid),
            info.and_then(|i| i.tid),
        ));
    }
    threads
}

/// Merges the inputs (one, or base and new) into the page's JSON.
pub(crate) fn encode(title: &str, sides: &[&Source]) -> Result<(String, Shape), serde_json::Error> {
    let stride = 2 + sides.len().max(1);
    let (tree, mut strings) = build(intern(sides), stride);
    let threads = thread_table(sides, &tree.top_level, &mut strings);
    let totals = sides
        .iter()
        .map(|s| s.stacks.iter().fold(0u64, |a, x| a.saturating_add(x.1)))
        .collect();
    let unit = sides.first().map_or("samples", |s| s.unit.as_str());
    let shape = Shape {
        nodes: tree.nodes.len() / stride,
        stacks: tree.distinct,
    };
    let json = Json {
        schema: VIEW_SCHEMA,
        title,
        unit,
        diff: sides.len() > 1,
        info: sides.iter().map(|s| s.info.as_slice()).collect(),
        totals,
        strings,
        threads,
        nodes: tree.nodes,
        warnings: sides
            .iter()
            .flat_map(|s| s.warnings.iter().map(String::as_str))
            .collect(),
    };
    Ok((serde_json::to_string(&json)?, shape))
}
