//! The differential flamegraph: NEW laid out by inferno, every frame
//! recolored by the change of its stack path's total share since BASE.
//!
//! inferno lays out and writes the SVG (with its search and zoom script); we
//! build the same tree of stack paths for both sides, reproduce inferno's
//! layout from the same sorted lines to know which path each frame is (by
//! depth and first sample), and rewrite each frame's `fill` and tooltip. This
//! module must not draw anything itself.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{Diff, Side};
use flamerec_symbolize::names::{sanitize, sanitize_root};

/// How the differential flamegraph is labelled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SvgOptions {
    /// Title at the top.
    pub title: String,
    /// Name of the BASE input in the subtitle (e.g. its path).
    pub base_label: String,
    /// Name of the NEW input in the subtitle.
    pub new_label: String,
}

impl Default for SvgOptions {
    fn default() -> Self {
        SvgOptions {
            title: "Differential flame graph".to_string(),
            base_label: "BASE".to_string(),
            new_label: "NEW".to_string(),
        }
    }
}

/// Vanished functions named in the subtitle; the rest are counted.
const LEGEND_NAMES: usize = 5;
/// Longest function name in the subtitle, in characters.
const LEGEND_NAME_CHARS: usize = 48;
/// Changes smaller than this many points still look pale when they are the largest.
const MIN_SCALE_PCT: f64 = 1.0;
/// Neutral fill (no change), as inferno's differential mode uses.
const NEUTRAL: (u8, u8, u8) = (250, 250, 250);

/// Writes NEW's flamegraph colored by each frame's change of total share
/// since BASE (red grew, blue shrank), with the functions that vanished
/// since BASE (as far as `diff` still lists them) named in the subtitle.
///
/// An empty NEW yields inferno's placeholder image, not an error.
pub fn write_diff_svg<W: Write>(
    base: &Side,
    new: &Side,
    diff: &Diff,
    opts: &SvgOptions,
    mut out: W,
) -> io::Result<()> {
    // Both sides spelled as drawn, so equal-looking frames are one node.
    let base_lines = drawn_lines(&base.stacks);
    let lines = drawn_lines(&new.stacks);
    let mut tree = Tree::default();
    for l in &base_lines {
        tree.add(l.stack(), l.count, 0);
    }
    for l in &lines {
        tree.add(l.stack(), l.count, 1);
    }
    let (base_total, new_total) = (base.total(), new.total());

    let frames = layout(&tree, &lines);
    let delta = |node: usize| -> f64 {
        let Some(n) = tree.nodes.get(node) else {
            return 0.0;
        };
        pct(n.weight[1], new_total) - pct(n.weight[0], base_total)
    };
    let scale = frames
        .values()
        .filter(|&&n| n != ROOT)
        .map(|&n| delta(n).abs())
        .fold(MIN_SCALE_PCT, f64::max);

    let mut iopts = inferno::flamegraph::Options::default();
    iopts.title = opts.title.clone();
    iopts.subtitle = Some(subtitle(diff, opts));
    iopts.count_name = new.weight_unit.clone();
    iopts.hash = true;
    iopts.deterministic = true;
    iopts.no_sort = true; // `lines` are in the order inferno checks.
    let mut svg: Vec<u8> = Vec::new();
    let drawn = inferno::flamegraph::from_lines(
        &mut iopts,
        lines.iter().map(|l| l.line.as_str()),
        &mut svg,
    );
    match drawn {
        Err(e) if lines.is_empty() && e.kind() == io::ErrorKind::InvalidData => {}
        other => other?,
    }
    let svg = String::from_utf8_lossy(&svg);
    let recolored = recolor(&svg, |depth, start| {
        let node = *frames.get(&(depth, start))?;
        let d = delta(node);
        let is_new = tree.nodes.get(node).is_some_and(|n| n.weight[0] == 0);
        Some(FrameChange {
            delta_pct: d,
            fill: fill(d, scale),
            is_new,
            root: node == ROOT,
        })
    });
    out.write_all(recolored.as_bytes())?;
    out.flush()
}

fn pct(w: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        w as f64 * 100.0 / total as f64
    }
}

/// Red for growth, blue for shrinkage, more saturated towards `scale` points.
fn fill(delta_pct: f64, scale: f64) -> (u8, u8, u8) {
    let t = (delta_pct.abs() / scale).clamp(0.0, 1.0);
    // 250 (pale) down to 100 (saturated), as inferno's differential colors.
    let c = (250.0 - 150.0 * t).round() as u8;
    if delta_pct > 0.0 {
        (255, c, c)
    } else if delta_pct < 0.0 {
        (c, c, 255)
    } else {
        NEUTRAL
    }
}

fn subtitle(diff: &Diff, opts: &SvgOptions) -> String {
    let mut vanished: Vec<_> = diff.functions.iter().filter(|f| f.vanished()).collect();
    vanished.sort_by(|a, b| {
        b.base
            .total_pct
            .partial_cmp(&a.base.total_pct)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.name.cmp(&b.name))
    });
    let mut s = format!(
        "{} vs {}: red grew, blue shrank (change of share, points). ",
        opts.new_label, opts.base_label
    );
    if vanished.is_empty() {
        s.push_str("Nothing vanished.");
        return s;
    }
    s.push_str("Vanished: ");
    let names: Vec<String> = vanished
        .iter()
        .take(LEGEND_NAMES)
        .map(|f| {
            let name = match f.name.char_indices().nth(LEGEND_NAME_CHARS) {
                Some((end, _)) => format!("{}...", &f.name[..end]),
                None => f.name.clone(),
            };
            format!("{name} ({:+.2})", f.total_delta_pct)
        })
        .collect();
    s.push_str(&names.join(", "));
    if vanished.len() > LEGEND_NAMES {
        s.push_str(&format!(" and {} more", vanished.len() - LEGEND_NAMES));
    }
    s
}

/// Index of the tree's root, inferno's "all" frame.
const ROOT: usize = 0;

/// Stack paths of both sides: node 0 is the root above every first frame.
#[derive(Debug)]
struct Tree<'a> {
    /// Weight through each node: `[base, new]`.
    nodes: Vec<TreeNode>,
    children: HashMap<(usize, &'a str), usize>,
}

#[derive(Debug, Default, Clone, Copy)]
struct TreeNode {
    weight: [u64; 2],
}

impl Default for Tree<'_> {
    fn default() -> Self {
        Tree {
            nodes: vec![TreeNode::default()],
            children: HashMap::new(),
        }
    }
}

impl<'a> Tree<'a> {
    fn add(&mut self, stack: &'a str, weight: u64, side: usize) {
        let mut cur = ROOT;
        self.bump(cur, weight, side);
        for frame in stack.split(';') {
            let next_id = self.nodes.len();
            cur = *self.children.entry((cur, frame)).or_insert(next_id);
            if cur == next_id {
                self.nodes.push(TreeNode::default());
            }
            self.bump(cur, weight, side);
        }
    }

    fn bump(&mut self, node: usize, weight: u64, side: usize) {
        if let Some(w) = self
            .nodes
            .get_mut(node)
            .and_then(|n| n.weight.get_mut(side))
        {
            *w = w.saturating_add(weight);
        }
    }

    fn child(&self, node: usize, frame: &str) -> Option<usize> {
        self.children.get(&(node, frame)).copied()
    }
}

/// One stack as inferno reads it: every frame spelled as folded output
/// spells it (no control characters, no trailing count-like word, no `# ` at
/// the start), so inferno splits it exactly as we do.
struct Line {
    /// `stack COUNT`.
    line: String,
    /// Length of the stack at the start of `line`.
    stack_len: usize,
    count: u64,
}

impl Line {
    fn stack(&self) -> &str {
        self.line.get(..self.stack_len).unwrap_or("")
    }
}

/// A side's stacks as drawn, in the order inferno checks: by stack, count
/// left aside. (Sorting whole lines, count included, can disagree with that
/// check when a frame continues with a space, as `a 7x` after `a`.)
fn drawn_lines(stacks: &[(String, u64)]) -> Vec<Line> {
    let mut lines: Vec<Line> = stacks
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|(stack, count)| {
            let mut line = String::with_capacity(stack.len() + 12);
            for (i, frame) in stack.split(';').enumerate() {
                if i == 0 {
                    line.push_str(&sanitize_root(frame));
                } else {
                    line.push(';');
                    line.push_str(&sanitize(frame));
                }
            }
            // A root `#` alone would make the line `# COUNT`, a comment to inferno.
            if line == "#" {
                line.replace_range(0..1, "_");
            }
            let stack_len = line.len();
            line.push(' ');
            line.push_str(&count.to_string());
            Line {
                line,
                stack_len,
                count: *count,
            }
        })
        .collect();
    lines.sort_unstable_by(|a, b| a.stack().cmp(b.stack()));
    lines
}

/// Which tree node each drawn frame is, keyed by (depth, first sample) as
/// inferno places them: frames open where a line's frames first differ from
/// the previous line's, and stay open while lines share them.
fn layout(tree: &Tree<'_>, lines: &[Line]) -> HashMap<(usize, u64), usize> {
    let mut frames = HashMap::new();
    frames.insert((0, 0), ROOT);
    let mut prev: Vec<&str> = Vec::new();
    let mut path: Vec<usize> = vec![ROOT];
    let mut time = 0u64;
    for l in lines {
        let drawn: Vec<&str> = l.stack().split(';').collect();
        let shared = drawn.iter().zip(&prev).take_while(|(a, b)| a == b).count();
        path.truncate(shared + 1);
        for (i, frame) in drawn.iter().enumerate().skip(shared) {
            let parent = path.last().copied().unwrap_or(ROOT);
            let Some(node) = tree.child(parent, frame) else {
                break;
            };
            path.push(node);
            frames.insert((i + 1, time), node);
        }
        prev = drawn;
        time = time.saturating_add(l.count);
    }
    frames
}

/// What to change on one drawn frame.
struct FrameChange {
    delta_pct: f64,
    fill: (u8, u8, u8),
    /// The path is not in BASE.
    is_new: bool,
    /// inferno's "all" frame: no change to note.
    root: bool,
}

/// Rewrites the fill and tooltip of every frame of an inferno SVG; `change`
/// gets (depth, first sample). Frames it does not know keep inferno's look
/// and get a neutral fill.
fn recolor(svg: &str, change: impl Fn(usize, u64) -> Option<FrameChange>) -> String {
    const CLOSE: &str = "</title><rect ";
    let spots: Vec<Spot> = svg
        .match_indices(CLOSE)
        .filter_map(|(i, _)| Spot::find(svg, i, i + CLOSE.len() - "<rect ".len()))
        .collect();
    // Straight graphs grow upwards: the lowest row (largest y) is depth 0.
    let mut ys: Vec<u64> = spots.iter().map(|s| s.y).collect();
    ys.sort_unstable_by(|a, b| b.cmp(a));
    ys.dedup();
    let depth_of: HashMap<u64, usize> = ys.iter().enumerate().map(|(d, &y)| (y, d)).collect();

    let mut out = String::with_capacity(svg.len() + spots.len() * 24);
    let mut copied = 0;
    for s in &spots {
        // Spots come in document order; one that does not is left alone
        // rather than sliced backwards.
        if s.fill.0 < copied || s.title_paren.is_some_and(|p| p < copied) {
            continue;
        }
        let depth = depth_of.get(&s.y).copied().unwrap_or(0);
        let c = change(depth, s.fg_x);
        let (title_note, fill) = match &c {
            Some(c) if c.root => (None, c.fill),
            Some(c) => {
                let note = if c.is_new {
                    format!("; {:+.2} pts, new", c.delta_pct)
                } else {
                    format!("; {:+.2} pts", c.delta_pct)
                };
                (Some(note), c.fill)
            }
            None => (None, NEUTRAL),
        };
        if let (Some(note), Some(at)) = (title_note, s.title_paren) {
            out.push_str(&svg[copied..at]);
            out.push_str(&note);
            copied = at;
        }
        out.push_str(&svg[copied..s.fill.0]);
        out.push_str(&format!("rgb({},{},{})", fill.0, fill.1, fill.2));
        copied = s.fill.1;
    }
    out.push_str(&svg[copied..]);
    out
}

/// Where one frame's tooltip and rectangle attributes are in the SVG text.
#[derive(Debug)]
struct Spot {
    /// Byte offset of the `)` closing the tooltip's figures, if any.
    title_paren: Option<usize>,
    /// Byte range of the `fill` attribute's value.
    fill: (usize, usize),
    y: u64,
    fg_x: u64,
}

impl Spot {
    /// `title_end` is where `</title>` starts, `rect` where `<rect ` starts.
    fn find(svg: &str, title_end: usize, rect: usize) -> Option<Spot> {
        let rect_end = rect + svg.get(rect..)?.find("/>")?;
        let attrs = svg.get(rect..rect_end)?;
        let value = |name: &str| -> Option<(usize, usize)> {
            let key = format!(" {name}=\"");
            let start = attrs.find(&key)? + key.len();
            let len = attrs.get(start..)?.find('"')?;
            Some((rect + start, rect + start + len))
        };
        let number = |name: &str| -> Option<u64> {
            let (a, b) = value(name)?;
            svg.get(a..b)?.parse().ok()
        };
        let title_start = svg.get(..title_end)?.rfind("<title>")?;
        let title_paren = svg
            .get(title_start..title_end)?
            .rfind(')')
            .map(|p| title_start + p);
        Some(Spot {
            title_paren,
            fill: value("fill")?,
            y: number("y")?,
            fg_x: number("fg:x")?,
        })
    }
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
