//! Folded lines keyed by ids while samples are summed, and turned into
//! sorted, distinct text once at the end.
//!
//! A line is its root name and the functions of its stack. Summing samples
//! per id sequence costs a hash of a few hundred integers where text costs
//! tens of kilobytes per line (Rust's generic names reach a kilobyte each,
//! and stacks of a rayon program hundreds of frames). The text is made once
//! per distinct line. Its order is the text's byte order, found without the
//! text: leading ids two lines share are equal text and skipped, and the rest
//! is compared name by name, exactly as the joined bytes would compare.
//! Distinct ids may spell the same text (two roots sanitized alike, one name
//! in two modules): such lines sort next to each other and are merged.

use std::cmp::Ordering;
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use crate::aggregate::NameId;
use flamerec_symbolize::names::UNKNOWN;
use flamerec_symbolize::{FuncId, Function};

/// Lines from which sorting is shared between threads.
const PARALLEL_SORT: usize = 20_000;

/// A folded line: its root name and its functions, root first.
pub(crate) type Line = (NameId, Arc<[FuncId]>);

/// The lines as text with their weights, sorted by text, each text once.
pub(crate) fn sorted_text(
    lines: HashMap<Line, u64>,
    roots: &[String],
    functions: &[Function],
) -> Vec<(String, u64)> {
    let spell = Spelling { roots, functions };
    let mut sorted: Vec<(Line, u64)> = lines.into_iter().collect();
    // Threads pay off for big sorts only.
    if sorted.len() < PARALLEL_SORT {
        sorted.sort_unstable_by(|a, b| spell.compare(&a.0, &b.0));
    } else {
        sorted.par_sort_unstable_by(|a, b| spell.compare(&a.0, &b.0));
    }
    let mut merged: Vec<(Line, u64)> = Vec::with_capacity(sorted.len());
    for (line, w) in sorted {
        match merged.last_mut() {
            Some((prev, sum)) if spell.compare(prev, &line) == Ordering::Equal => {
                *sum = sum.saturating_add(w);
            }
            _ => merged.push((line, w)),
        }
    }
    merged
        .par_iter()
        .map(|(line, w)| (spell.text(line), *w))
        .collect()
}

/// How ids are spelled.
struct Spelling<'a> {
    roots: &'a [String],
    functions: &'a [Function],
}

impl Spelling<'_> {
    fn root(&self, r: NameId) -> &str {
        self.roots.get(r as usize).map_or(UNKNOWN, String::as_str)
    }

    fn name(&self, f: FuncId) -> &str {
        self.functions
            .get(f as usize)
            .map_or("", |f| f.name.as_str())
    }

    /// `root;name;name…`.
    fn text(&self, (root, funcs): &Line) -> String {
        let root = self.root(*root);
        let len = root.len() + funcs.iter().map(|&f| 1 + self.name(f).len()).sum::<usize>();
        let mut s = String::with_capacity(len);
        s.push_str(root);
        for &f in funcs.iter() {
            s.push(';');
            s.push_str(self.name(f));
        }
        s
    }

    /// The byte order of the two lines' text.
    fn compare(&self, (ra, fa): &Line, (rb, fb): &Line) -> Ordering {
        if ra == rb {
            let same = fa.iter().zip(fb.iter()).take_while(|(x, y)| x == y).count();
            return compare_joined(
                tail_segments(self, &fa[same..]),
                tail_segments(self, &fb[same..]),
            );
        }
        compare_joined(
            std::iter::once(self.root(*ra).as_bytes()).chain(tail_segments(self, fa)),
            std::iter::once(self.root(*rb).as_bytes()).chain(tail_segments(self, fb)),
        )
    }
}

/// `;name` for each function, as byte segments.
fn tail_segments<'a>(
    spell: &'a Spelling<'_>,
    funcs: &'a [FuncId],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    funcs
        .iter()
        .flat_map(move |&f| [&b";"[..], spell.name(f).as_bytes()])
}

/// Compares the concatenations of two sequences of byte segments.
fn compare_joined<'a>(
    mut a: impl Iterator<Item = &'a [u8]>,
    mut b: impl Iterator<Item = &'a [u8]>,
) -> Ordering {
    let (mut x, mut y): (&[u8], &[u8]) = (&[], &[]);
    loop {
        while x.is_empty() {
            match a.next() {
                Some(s) => x = s,
                None => break,
            }
        }
        while y.is_empty() {
            match b.next() {
                Some(s) => y = s,
                None => break,
            }
        }
        match (x.is_empty(), y.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            (false, false) => {}
        }
        let n = x.len().min(y.len());
        match x[..n].cmp(&y[..n]) {
            Ordering::Equal => {
                x = &x[n..];
                y = &y[n..];
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str) -> Function {
        Function {
            name: name.to_string(),
            module: "m".to_string(),
        }
    }

    #[test]
    fn order_and_merging_are_those_of_the_text() {
        // Names chosen so that id order, name order and text order differ:
        // "a" is a prefix of "a1" and of "a;"-joined lines, '1' sorts
        // before ';', and two ids spell "b".
        let names = ["a", "a1", "b", "b", "a b", ""];
        let functions: Vec<Function> = names.iter().map(|n| function(n)).collect();
        let roots = vec!["r".to_string(), "r".to_string(), "q".to_string()];
        let lines: Vec<Line> = vec![
            (0, Arc::from(&[0, 2][..])),
            (0, Arc::from(&[1][..])),
            (1, Arc::from(&[0, 3][..])),
            (0, Arc::from(&[0][..])),
            (2, Arc::from(&[4, 5][..])),
            (0, Arc::from(&[][..])),
            (0, Arc::from(&[4][..])),
            (0, Arc::from(&[0, 2, 5][..])),
        ];
        let map: HashMap<Line, u64> = lines
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, l)| (l, 1 << i))
            .collect();
        let got = sorted_text(map, &roots, &functions);

        let spell = Spelling {
            roots: &roots,
            functions: &functions,
        };
        let mut want: Vec<(String, u64)> = Vec::new();
        let mut texts: Vec<(String, u64)> = lines
            .iter()
            .enumerate()
            .map(|(i, l)| (spell.text(l), 1 << i))
            .collect();
        texts.sort();
        for (t, w) in texts {
            match want.last_mut() {
                Some((p, s)) if *p == t => *s += w,
                _ => want.push((t, w)),
            }
        }
        assert_eq!(got, want);
        assert!(got.iter().any(|(t, w)| t == "r;a;b" && *w == 1 + 4));
    }
}
