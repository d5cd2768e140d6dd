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
//!
//! The sorted lines stay ids in [`Stacks`] and are spelled as they are read:
//! a DWARF-rich program's folded text reaches 160 MB (lines of tens of
//! kilobytes), and holding it all cost a fold more in fresh pages than in
//! naming. Writing spells one line at a time into one buffer.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::sync::Arc;

use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

use crate::aggregate::NameId;
use flamerec_symbolize::names::UNKNOWN;
use flamerec_symbolize::FuncId;

/// Lines from which sorting is shared between threads.
const PARALLEL_SORT: usize = 20_000;

/// A folded line: its root name and its functions, root first.
pub(crate) type Line = (NameId, Arc<[FuncId]>);

/// The lines with their weights, sorted by their text, each text once;
/// `parallel`: big sorts may use the caller's thread pool.
pub(crate) fn sorted(
    lines: HashMap<Line, u64>,
    roots: Vec<String>,
    names: Vec<String>,
    parallel: bool,
) -> Stacks {
    let spell = Spelling::new(&roots, &names);
    let mut sorted: Vec<(Line, u64)> = lines.into_iter().collect();
    // Threads pay off for big sorts only.
    if !parallel || sorted.len() < PARALLEL_SORT {
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
    Stacks(Repr::Ids {
        lines: merged,
        roots: roots.into(),
        names: names.into(),
    })
}

/// Folded stacks: lines `root;frame;…;leaf` with their summed weight,
/// sorted by line, each line once.
///
/// Folded from a recording, the lines are kept as ids into the root and
/// function names and spelled as they are read ([`Stacks::iter`],
/// [`Stacks::write_folded`]); read from folded text, they are that text.
#[derive(Clone, Default)]
pub struct Stacks(Repr);

#[derive(Clone)]
enum Repr {
    Text(Vec<(String, u64)>),
    Ids {
        lines: Vec<(Line, u64)>,
        roots: Arc<[String]>,
        names: Arc<[String]>,
    },
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Text(Vec::new())
    }
}

impl Stacks {
    /// Distinct lines.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Text(t) => t.len(),
            Repr::Ids { lines, .. } => lines.len(),
        }
    }

    /// Whether there are no lines.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lines in order, with their weights.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Cow<'_, str>, u64)> + '_ {
        (0..self.len()).map(move |i| match &self.0 {
            Repr::Text(t) => (Cow::Borrowed(t[i].0.as_str()), t[i].1),
            Repr::Ids { lines, .. } => {
                let mut s = String::new();
                self.spell(&lines[i].0, &mut s);
                (Cow::Owned(s), lines[i].1)
            }
        })
    }

    /// Each line's root (its first name), in line order.
    pub fn roots(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(move |i| match &self.0 {
            Repr::Text(t) => t[i].0.split(';').next().unwrap_or(""),
            Repr::Ids { lines, roots, .. } => roots
                .get(lines[i].0 .0 as usize)
                .map_or(UNKNOWN, String::as_str),
        })
    }

    /// The lines as text.
    pub fn into_text(self) -> Vec<(String, u64)> {
        match self.0 {
            Repr::Text(t) => t,
            Repr::Ids { .. } => self.iter().map(|(l, w)| (l.into_owned(), w)).collect(),
        }
    }

    /// Writes `line COUNT` per line, each spelled into one reused buffer.
    pub fn write_folded<W: Write>(&self, out: &mut W) -> io::Result<()> {
        match &self.0 {
            Repr::Text(t) => {
                for (line, w) in t {
                    writeln!(out, "{line} {w}")?;
                }
            }
            Repr::Ids {
                lines,
                roots,
                names,
            } => {
                // Sorted lines share long beginnings (a deep stack's callers):
                // each line keeps the previous one's text up to the first
                // function they differ in, and spells only the rest.
                let name = |f: FuncId| names.get(f as usize).map_or("", String::as_str);
                let mut buf = String::new();
                // `ends[k]`: where the text of the root and k functions ends.
                let mut ends: Vec<usize> = Vec::new();
                let mut prev: Option<&Line> = None;
                for (line, w) in lines {
                    let (root, funcs) = line;
                    let kept = match prev {
                        Some((p_root, p_funcs)) if p_root == root => {
                            let n = p_funcs.len().min(funcs.len());
                            first_difference(p_funcs, funcs).unwrap_or(n)
                        }
                        _ => {
                            buf.clear();
                            buf.push_str(roots.get(*root as usize).map_or(UNKNOWN, String::as_str));
                            ends.clear();
                            ends.push(buf.len());
                            0
                        }
                    };
                    buf.truncate(ends[kept]);
                    ends.truncate(kept + 1);
                    for &f in &funcs[kept..] {
                        buf.push(';');
                        buf.push_str(name(f));
                        ends.push(buf.len());
                    }
                    let text = buf.len();
                    let _ = writeln!(buf, " {w}");
                    out.write_all(buf.as_bytes())?;
                    buf.truncate(text);
                    prev = Some(line);
                }
            }
        }
        Ok(())
    }

    fn spell(&self, line: &Line, s: &mut String) {
        if let Repr::Ids { roots, names, .. } = &self.0 {
            spell_into(roots, names, line, s);
        }
    }
}

/// Appends `root;name;name…` to `s`.
fn spell_into(roots: &[String], names: &[String], (root, funcs): &Line, s: &mut String) {
    let root = roots.get(*root as usize).map_or(UNKNOWN, String::as_str);
    let names = |f: FuncId| names.get(f as usize).map_or("", String::as_str);
    s.reserve(root.len() + funcs.iter().map(|&f| 1 + names(f).len()).sum::<usize>());
    s.push_str(root);
    for &f in funcs.iter() {
        s.push(';');
        s.push_str(names(f));
    }
}

impl From<Vec<(String, u64)>> for Stacks {
    /// Lines already sorted and distinct, as text.
    fn from(text: Vec<(String, u64)>) -> Self {
        Stacks(Repr::Text(text))
    }
}

impl PartialEq for Stacks {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Stacks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// How ids are spelled.
struct Spelling<'a> {
    roots: &'a [String],
    names: &'a [String],
    root_order: Order,
    function_order: Order,
}

/// The byte order of a set of names, as ranks: comparing two ranks is
/// comparing the names, where that decides the order of the lines too.
struct Order {
    /// Per id, its name's place among the distinct names.
    rank: Vec<u32>,
    /// Per rank, whether its name is a proper prefix of the next name
    /// (then the lines' order depends on what follows the shorter name).
    extended: Vec<bool>,
}

impl Order {
    fn new<'n>(names: impl ExactSizeIterator<Item = &'n str>) -> Self {
        let names: Vec<&str> = names.collect();
        let mut ids: Vec<u32> = (0..names.len() as u32).collect();
        ids.sort_unstable_by_key(|&i| names[i as usize]);
        let mut rank = vec![0; names.len()];
        let mut extended = Vec::new();
        let mut prev: Option<&str> = None;
        for &i in &ids {
            let name = names[i as usize];
            if prev != Some(name) {
                if let Some(p) = prev {
                    extended.push(name.starts_with(p));
                }
                prev = Some(name);
            }
            rank[i as usize] = extended.len() as u32;
        }
        extended.push(false);
        Order { rank, extended }
    }

    /// How names `a` and `b`, followed by the rest of their lines, compare:
    /// `Some(Equal)` when they are spelled alike, `None` when one is a
    /// prefix of the other (the rest decides), or an id is unknown.
    fn compare(&self, a: u32, b: u32) -> Option<Ordering> {
        let (ra, rb) = (*self.rank.get(a as usize)?, *self.rank.get(b as usize)?);
        if ra == rb {
            return Some(Ordering::Equal);
        }
        // Only a name that extends the lower one could start with it.
        let lower = ra.min(rb);
        match self.extended.get(lower as usize) {
            Some(false) => Some(ra.cmp(&rb)),
            _ => None,
        }
    }
}

impl<'a> Spelling<'a> {
    fn new(roots: &'a [String], names: &'a [String]) -> Self {
        Spelling {
            roots,
            names,
            root_order: Order::new(roots.iter().map(String::as_str)),
            function_order: Order::new(names.iter().map(String::as_str)),
        }
    }

    fn root(&self, r: NameId) -> &str {
        self.roots.get(r as usize).map_or(UNKNOWN, String::as_str)
    }

    fn name(&self, f: FuncId) -> &str {
        self.names.get(f as usize).map_or("", String::as_str)
    }

    /// `root;name;name…`.
    #[cfg(test)]
    fn text(&self, line: &Line) -> String {
        let mut s = String::new();
        spell_into(self.roots, self.names, line, &mut s);
        s
    }

    /// The byte order of the two lines' text: name by name by rank, and
    /// from the first name that is a prefix of the other byte by byte.
    fn compare(&self, a: &Line, b: &Line) -> Ordering {
        let ((ra, fa), (rb, fb)) = (a, b);
        if ra != rb {
            match self.root_order.compare(*ra, *rb) {
                Some(Ordering::Equal) => {}
                Some(other) => return other,
                None => return self.compare_bytes(a, b),
            }
        }
        let mut i = 0;
        while let Some(at) = first_difference(&fa[i..], &fb[i..]) {
            i += at;
            let (x, y) = (&fa[i], &fb[i]);
            match self.function_order.compare(*x, *y) {
                Some(Ordering::Equal) => {}
                Some(other) => return other,
                // All before is spelled alike.
                None => {
                    return compare_joined(
                        tail_segments(self, &fa[i..]),
                        tail_segments(self, &fb[i..]),
                    )
                }
            }
            i += 1;
        }
        // One line's text is the start of the other's.
        fa.len().cmp(&fb.len())
    }

    /// The byte order of the two lines' text, read byte by byte.
    fn compare_bytes(&self, (ra, fa): &Line, (rb, fb): &Line) -> Ordering {
        compare_joined(
            std::iter::once(self.root(*ra).as_bytes()).chain(tail_segments(self, fa)),
            std::iter::once(self.root(*rb).as_bytes()).chain(tail_segments(self, fb)),
        )
    }
}

/// Where the two id sequences first differ, up to the shorter one's end.
///
/// Lines of deep stacks share most of their frames, and comparing two
/// lines is mostly this walk: equal blocks of ids are skipped a block at
/// a time, several times faster than id by id.
fn first_difference(a: &[FuncId], b: &[FuncId]) -> Option<usize> {
    const BLOCK: usize = 16;
    let n = a.len().min(b.len());
    let mut i = 0;
    // XOR-folded blocks compile to vector instructions, no call.
    let same =
        |x: &[FuncId], y: &[FuncId]| x.iter().zip(y).fold(0, |acc, (p, q)| acc | (p ^ q)) == 0;
    while i + BLOCK <= n && same(&a[i..i + BLOCK], &b[i..i + BLOCK]) {
        i += BLOCK;
    }
    a[i..n]
        .iter()
        .zip(&b[i..n])
        .position(|(x, y)| x != y)
        .map(|at| i + at)
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

    #[test]
    fn order_and_merging_are_those_of_the_text() {
        // Names chosen so that id order, name order and text order differ:
        // "a" is a prefix of "a1" and of "a;"-joined lines, '1' sorts
        // before ';', and two ids spell "b".
        let names = ["a", "a1", "b", "b", "a b", ""];
        let functions: Vec<String> = names.iter().map(|n| n.to_string()).collect();
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
        let stacks = sorted(map, roots.clone(), functions.clone(), false);
        let mut written = Vec::new();
        stacks.write_folded(&mut written).unwrap();
        let got = stacks.into_text();

        let spell = Spelling::new(&roots, &functions);
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
        let lines: String = want.iter().map(|(t, w)| format!("{t} {w}\n")).collect();
        assert_eq!(String::from_utf8(written).unwrap(), lines);
    }

    /// Lines of names that are prefixes of each other, sort below and
    /// above `;`, and repeat under other ids, sorted both ways.
    #[test]
    fn ranks_order_lines_as_their_bytes() {
        let names = [
            "a", "a1", "a:", "a;", "a<", "a b", "ab", "b", "a", "", "b", "a1x", "::", ":",
        ];
        let functions: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let roots: Vec<String> = ["r", "r1", "r", "", "r;x"]
            .iter()
            .map(|r| r.to_string())
            .collect();
        let spell = Spelling::new(&roots, &functions);
        let mut x: u64 = 7;
        let mut next = |n: usize| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as usize) % n
        };
        // Short random lines, and long ones that share a random part of one
        // deep stack before they differ (the walk that skips equal blocks).
        let deep: Vec<FuncId> = (0..70).map(|_| next(names.len()) as FuncId).collect();
        let lines: Vec<Line> = (0..500)
            .map(|i| {
                let mut funcs: Vec<FuncId> = if i % 2 == 0 {
                    Vec::new()
                } else {
                    deep[..next(deep.len() + 1)].to_vec()
                };
                let len = next(4);
                funcs.extend((0..len).map(|_| next(names.len()) as FuncId));
                (next(roots.len()) as NameId, Arc::from(funcs))
            })
            .collect();
        for a in &lines {
            for b in &lines {
                let want = spell.text(a).cmp(&spell.text(b));
                assert_eq!(
                    spell.compare(a, b),
                    want,
                    "{} vs {}",
                    spell.text(a),
                    spell.text(b)
                );
            }
        }
        // The writer, which keeps each line's shared beginning from the
        // line before, writes what spelling every line whole gives.
        let map: HashMap<Line, u64> = lines.iter().cloned().map(|l| (l, 1)).collect();
        let stacks = sorted(map, roots.clone(), functions.clone(), false);
        let mut written = Vec::new();
        stacks.write_folded(&mut written).unwrap();
        let whole: String = stacks.iter().map(|(l, w)| format!("{l} {w}\n")).collect();
        assert_eq!(String::from_utf8(written).unwrap(), whole);
    }
}
