//! Call paths of the program's samples, for the comparison: the suffixes of
//! each stack (caller → … → the frame where the time went) with their
//! weight per run, the splits of the samples by call path that measure the
//! dispersion when leaf functions are too few, and the search for the
//! shortest paths that carry a growth. It knows nothing of statistics (the
//! caller judges a path) and does no I/O.
//!
//! A path of `d` frames holds the samples whose stack *ends* with those
//! frames, so the paths of one leaf and one length partition its samples,
//! and a path's callers (one frame longer) partition the path's samples
//! (less those whose whole stack it is).

use std::collections::HashMap;

use super::interrupts::is_interrupt_entry;

/// The longest path kept: a finding longer than this is no longer read as
/// one line, and each frame more multiplies the nodes.
pub(super) const MAX_PATH_FRAMES: usize = 6;

/// A path's callers isolate its change only when the callers that did not
/// grow hold at least this fraction of its weight: below it, naming one
/// more caller adds a frame and removes almost nothing.
const MIN_REST_FRACTION: f64 = 0.1;

/// One path: its outermost frame and the path one frame shorter.
struct Node {
    frame: u32,
    parent: Option<u32>,
    children: Vec<u32>,
    depth: usize,
}

/// Every path of up to [`MAX_PATH_FRAMES`] frames of a set of runs, with
/// its weight in each run.
pub(super) struct PathTree {
    names: Vec<String>,
    nodes: Vec<Node>,
    /// Runs in all (BASE's, then NEW's).
    runs: usize,
    /// `weight[node * runs + run]`: samples whose stack ends with the path.
    weight: Vec<u64>,
    /// The same, for the stacks that are exactly the path.
    whole: Vec<u64>,
}

impl PathTree {
    /// The paths of `runs` (each one run's folded stacks, the root frame
    /// not a function), samples in interrupt context left out unless
    /// `keep_interrupts` (as `tally` does).
    pub fn new(runs: &[&[(String, u64)]], keep_interrupts: bool) -> PathTree {
        let mut tree = PathTree {
            names: Vec::new(),
            nodes: Vec::new(),
            runs: runs.len(),
            weight: Vec::new(),
            whole: Vec::new(),
        };
        let mut interned: HashMap<String, u32> = HashMap::new();
        let mut index: HashMap<(Option<u32>, u32), u32> = HashMap::new();
        let mut frames: Vec<&str> = Vec::new();
        for (run, stacks) in runs.iter().enumerate() {
            for (line, w) in stacks.iter() {
                frames.clear();
                frames.extend(line.split(';').skip(1));
                if !keep_interrupts && frames.iter().any(|f| is_interrupt_entry(f)) {
                    continue;
                }
                let mut parent = None;
                for (d, frame) in frames.iter().rev().take(MAX_PATH_FRAMES).enumerate() {
                    let id = match interned.get(*frame) {
                        Some(&id) => id,
                        None => {
                            let id = tree.names.len() as u32;
                            tree.names.push((*frame).to_string());
                            interned.insert((*frame).to_string(), id);
                            id
                        }
                    };
                    let node = *index
                        .entry((parent, id))
                        .or_insert_with(|| tree.add(parent, id, d + 1));
                    let at = node as usize * tree.runs + run;
                    tree.weight[at] = tree.weight[at].saturating_add(*w);
                    if d + 1 == frames.len() {
                        tree.whole[at] = tree.whole[at].saturating_add(*w);
                    }
                    parent = Some(node);
                }
            }
        }
        tree
    }

    fn add(&mut self, parent: Option<u32>, frame: u32, depth: usize) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            frame,
            parent,
            children: Vec::new(),
            depth,
        });
        if let Some(p) = parent {
            self.nodes[p as usize].children.push(id);
        }
        self.weight.resize(self.weight.len() + self.runs, 0);
        self.whole.resize(self.whole.len() + self.runs, 0);
        id
    }

    /// A path's weight in each of `runs` (indices into the runs given to
    /// [`PathTree::new`]).
    pub fn weights(&self, node: u32, runs: std::ops::Range<usize>) -> Vec<u64> {
        let at = node as usize * self.runs;
        self.weight[at + runs.start..at + runs.end].to_vec()
    }

    /// The path's frames, outermost caller first, the frame where the time
    /// went last.
    pub fn frames(&self, node: u32) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = Some(node);
        while let Some(n) = at {
            let node = &self.nodes[n as usize];
            out.push(self.names[node.frame as usize].clone());
            at = node.parent;
        }
        out
    }

    /// The samples of `runs` split by their last `depth` frames (a stack
    /// shorter than that is its own category), per category and run: the
    /// leaf functions for depth 1.
    pub fn partition(&self, depth: usize, runs: std::ops::Range<usize>) -> Vec<Vec<u64>> {
        let mut out = Vec::new();
        for (id, node) in self.nodes.iter().enumerate() {
            let at = id * self.runs;
            let source = if node.depth == depth {
                &self.weight
            } else if node.depth < depth {
                &self.whole
            } else {
                continue;
            };
            let w = &source[at + runs.start..at + runs.end];
            if w.iter().any(|&x| x > 0) {
                out.push(w.to_vec());
            }
        }
        out
    }

    /// The shortest paths that carry a growth, as found from each leaf
    /// function up through its callers: at a path, the callers `grew`
    /// judges grown carry its change when the rest of its samples did not
    /// grow and are at least [`MIN_REST_FRACTION`] of them, and the search
    /// goes on in each grown caller; otherwise the path itself is the
    /// finding when it grew. `grew(base, new)` judges per-run weights of
    /// BASE (runs `base`) and NEW (runs `new`). Single frames (a function's
    /// self time) are never findings: the function tables hold them.
    pub fn grown(
        &self,
        base: std::ops::Range<usize>,
        new: std::ops::Range<usize>,
        grew: &dyn Fn(&[u64], &[u64]) -> bool,
    ) -> Vec<u32> {
        let mut found = Vec::new();
        let mut todo: Vec<u32> = (0..self.nodes.len() as u32)
            .filter(|&n| self.nodes[n as usize].depth == 1)
            .collect();
        while let Some(n) = todo.pop() {
            let node = &self.nodes[n as usize];
            let (nb, nn) = (self.weights(n, base.clone()), self.weights(n, new.clone()));
            let grown: Vec<u32> = node
                .children
                .iter()
                .copied()
                .filter(|&c| {
                    grew(
                        &self.weights(c, base.clone()),
                        &self.weights(c, new.clone()),
                    )
                })
                .collect();
            if !grown.is_empty() {
                let rest = |all: &[u64], runs: &std::ops::Range<usize>| -> Vec<u64> {
                    let mut r = all.to_vec();
                    for &c in &grown {
                        for (x, y) in r.iter_mut().zip(self.weights(c, runs.clone())) {
                            *x = x.saturating_sub(y);
                        }
                    }
                    r
                };
                let (rb, rn) = (rest(&nb, &base), rest(&nn, &new));
                let fraction = |r: &[u64], all: &[u64]| {
                    let all: u64 = all.iter().sum();
                    if all == 0 {
                        0.0
                    } else {
                        r.iter().sum::<u64>() as f64 / all as f64
                    }
                };
                let sizable = fraction(&rb, &nb).max(fraction(&rn, &nn)) >= MIN_REST_FRACTION;
                if sizable && !grew(&rb, &rn) {
                    todo.extend(grown);
                    continue;
                }
            }
            if node.depth >= 2 && grew(&nb, &nn) {
                found.push(n);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::folded::test_stacks as stacks;

    #[test]
    fn paths_end_in_the_leaf_and_partition_its_samples() {
        let run = stacks("p;main;a;work 5\np;main;b;work 3\np;main;b 2\np;main;b;asm_sysvec_x;s 9");
        let tree = PathTree::new(&[&run], false);
        let leaves = tree.partition(1, 0..1);
        let mut leaves: Vec<u64> = leaves.iter().map(|r| r[0]).collect();
        leaves.sort();
        assert_eq!(leaves, [2, 8]);
        let mut two: Vec<u64> = tree.partition(2, 0..1).iter().map(|r| r[0]).collect();
        two.sort();
        assert_eq!(two, [2, 3, 5]);
        // `p;main;b` is two frames: its whole stack at depth 3.
        let three: u64 = tree.partition(3, 0..1).iter().map(|r| r[0]).sum();
        assert_eq!(three, 10);
    }

    #[test]
    fn the_search_climbs_to_the_caller_that_grew_and_no_further() {
        let base = stacks("p;main;a;work 50\np;main;b;work 30\np;main;c;work 20");
        let new = stacks("p;main;a;work 50\np;main;b;work 60\np;main;c;work 20");
        let tree = PathTree::new(&[&base, &new], false);
        // "Grew": more than 10% more weight.
        let grew = |b: &[u64], n: &[u64]| n[0] as f64 > b[0] as f64 * 1.1;
        let found = tree.grown(0..1, 1..2, &grew);
        let names: Vec<Vec<String>> = found.iter().map(|&n| tree.frames(n)).collect();
        assert_eq!(names, [["b", "work"]]);
        // Every caller grew alike: the leaf itself carries it, no path.
        let new = stacks("p;main;a;work 100\np;main;b;work 60\np;main;c;work 40");
        let tree = PathTree::new(&[&base, &new], false);
        assert!(tree.grown(0..1, 1..2, &grew).is_empty());
    }
}
