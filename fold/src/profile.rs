//! The folded profile: symbolized stacks with their weights, per-process and
//! per-function totals. Built from an [`Aggregate`] once symbols are known.
//!
//! This module owns what a "function total" means (each sample counts once
//! per function, however often the function stands in its stack) and the
//! deterministic ordering of everything it returns. It does no I/O.

use std::sync::Arc;

use rayon::prelude::*;
// Keys are our own strings and ids: a fast hash is safe here.
use rustc_hash::FxHashMap as HashMap;

use flamerec_format::{Damage, Metadata, StackId, Tables, Totals};

use crate::aggregate::{Aggregate, NameId, ROOT_FRAMES};
use crate::export::Timeline;
use crate::lines::{self, Line, Stacks};
use crate::progress::{FoldProgress, Phase};
use flamerec_symbolize::names::{sanitize_root, UNKNOWN};
use flamerec_symbolize::{self as symbolize, FuncId, NameOptions, Prefetch, Symbols};

/// A folded, symbolized recording.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// The recording's metadata.
    pub metadata: Metadata,
    /// The trailer, when the file is complete.
    pub totals: Option<Totals>,
    /// Why the recording stopped early, if it did; the caller shows it as a warning.
    pub damage: Option<Damage>,
    /// Other things the user should know (e.g. binaries missing since
    /// recording), one line each, without a `flamerec: warning:` prefix.
    pub warnings: Vec<String>,
    /// Folded stacks, `root;frame;...;leaf` with their summed weight, sorted
    /// by line. Lines are distinct.
    pub stacks: Stacks,
    /// Samples that passed the filters.
    pub samples: u64,
    /// Sum of their weights (what the counts add up to), in `metadata.weight_unit`.
    pub total_weight: u64,
    /// Samples the kernel dropped while recording.
    pub lost_samples: u64,
    /// Length of the recording (up to the last sample when truncated).
    pub duration_ns: u64,
    /// Per process, by weight descending, then pid.
    pub processes: Vec<ProcessStats>,
    /// Per function, by total weight descending, then self weight, name, module.
    pub functions: Vec<FunctionStats>,
    /// The samples themselves, for the exports; only with
    /// [`FoldOptions::keep_samples`](crate::FoldOptions::keep_samples).
    pub timeline: Option<Timeline>,
}

/// What one process contributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessStats {
    /// Process id.
    pub pid: u32,
    /// Its name at its last sample.
    pub comm: String,
    /// Samples kept.
    pub samples: u64,
    /// Their summed weight.
    pub weight: u64,
}

/// Where the time of one function went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionStats {
    /// Function name as in the folded text.
    pub name: String,
    /// Module basename.
    pub module: String,
    /// Weight of samples whose leaf is this function.
    pub self_weight: u64,
    /// Weight of samples with this function anywhere in the stack, counted
    /// once per sample.
    pub total_weight: u64,
}

impl FunctionStats {
    /// The order of [`Profile::functions`]: total weight descending, then
    /// self weight descending, name, module.
    pub fn order(a: &FunctionStats, b: &FunctionStats) -> std::cmp::Ordering {
        b.total_weight
            .cmp(&a.total_weight)
            .then(b.self_weight.cmp(&a.self_weight))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.module.cmp(&b.module))
    }
}

/// Symbolizes what `agg` references and assembles the profile (without the
/// recording-level fields, which the caller fills in).
///
/// `used` is [`used_frames`] of `agg`. With `parallel`, the work is shared
/// between the threads of the caller's pool; without, it all runs on the
/// calling thread and no pool is asked for, so the names must all come from
/// the recording ([`symbolize::reads_binaries`] is false).
pub(crate) fn build(
    tables: &Tables,
    mut agg: Aggregate,
    used: &[u32],
    naming: Naming<'_>,
    parallel: bool,
    progress: &FoldProgress,
) -> Profile {
    let Naming {
        opts,
        prefetch,
        embedded,
    } = naming;
    progress.naming(used.len() as u64);
    progress.enter(Phase::Symbolizing);
    let symbols = symbolize::symbolize(tables, used, opts, prefetch, embedded);
    progress.enter(Phase::Folding);
    let timeline = agg
        .kept
        .take()
        .map(|kept| Timeline::new(kept, &agg.names, tables, &symbols, opts.inline));

    let mut entries: Vec<((NameId, StackId), u64)> = agg.counts.into_iter().collect();
    // Same stack next to each other, so its frames are expanded once.
    entries.sort_unstable_by_key(|&((root, stack), _)| (stack, root));

    let root_names: Vec<String> = agg
        .names
        .iter()
        .map(|n| {
            let frames: Vec<String> = n.split(ROOT_FRAMES).map(sanitize_root).collect();
            frames.join(";")
        })
        .collect();
    // Chunks of stacks fold in parallel; their lines and weights add up.
    let Folded {
        lines,
        self_w,
        total_w,
    } = if parallel {
        let chunk = entries
            .len()
            .div_ceil(rayon::current_num_threads() * 4)
            .max(1024);
        entries
            .par_chunks(chunk)
            .map(|part| fold_entries(tables, &symbols, part))
            .reduce_with(Folded::add)
            .unwrap_or_else(|| Folded::new(symbols.functions.len(), 0))
    } else {
        fold_entries(tables, &symbols, &entries)
    };

    let names = symbols.functions.iter().map(|f| f.name.clone()).collect();
    let stacks = lines::sorted(lines, root_names, names, parallel);

    let mut functions: Vec<FunctionStats> = symbols
        .functions
        .into_iter()
        .zip(self_w.iter().zip(&total_w))
        .filter(|(_, (_, &t))| t > 0)
        .map(|(f, (&s, &t))| FunctionStats {
            name: f.name,
            module: f.module,
            self_weight: s,
            total_weight: t,
        })
        .collect();
    functions.sort_unstable_by(FunctionStats::order);

    let mut processes: Vec<ProcessStats> = agg
        .processes
        .iter()
        .map(|(&pid, p)| ProcessStats {
            pid,
            comm: agg
                .names
                .get(p.comm as usize)
                .cloned()
                .unwrap_or_else(|| UNKNOWN.to_string()),
            samples: p.samples,
            weight: p.weight,
        })
        .collect();
    processes.sort_unstable_by(|a, b| b.weight.cmp(&a.weight).then(a.pid.cmp(&b.pid)));

    Profile {
        warnings: symbols.warnings,
        stacks,
        samples: agg.samples,
        total_weight: agg.weight,
        lost_samples: agg.lost,
        duration_ns: agg.last_time_ns,
        processes,
        functions,
        timeline,
        ..Default::default()
    }
}

/// Where [`build`] takes names from.
pub(crate) struct Naming<'a> {
    pub(crate) opts: &'a NameOptions,
    /// Debug info inflated ahead.
    pub(crate) prefetch: &'a Prefetch,
    /// Names the recording embeds, used before the binaries.
    pub(crate) embedded: Option<&'a symbolize::Embedded>,
}

/// Folded lines and per-function weights of some stacks.
struct Folded {
    lines: HashMap<Line, u64>,
    /// Per function: weight of the samples it is the leaf of.
    self_w: Vec<u64>,
    /// Per function: weight of the samples it is in (once per sample).
    total_w: Vec<u64>,
}

impl Folded {
    fn new(functions: usize, lines: usize) -> Self {
        Folded {
            lines: HashMap::with_capacity_and_hasher(lines, Default::default()),
            self_w: vec![0; functions],
            total_w: vec![0; functions],
        }
    }

    /// Both parts' lines and weights, summed.
    fn add(mut self, mut other: Folded) -> Folded {
        if other.lines.len() > self.lines.len() {
            std::mem::swap(&mut self, &mut other);
        }
        for (line, w) in other.lines {
            let c = self.lines.entry(line).or_insert(0);
            *c = c.saturating_add(w);
        }
        for (a, b) in self.self_w.iter_mut().zip(&other.self_w) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in self.total_w.iter_mut().zip(&other.total_w) {
            *a = a.saturating_add(*b);
        }
        self
    }
}

/// Folds `entries` (sorted by stack): each stack is expanded once and its
/// line made for each root.
fn fold_entries(
    tables: &Tables,
    symbols: &Symbols,
    entries: &[((NameId, StackId), u64)],
) -> Folded {
    let mut out = Folded::new(symbols.functions.len(), entries.len());
    // `stamp[f] == generation` marks functions already counted for this entry.
    let mut stamp = vec![usize::MAX; symbols.functions.len()];
    let mut funcs: Vec<FuncId> = Vec::new();
    let mut tail: Arc<[FuncId]> = Arc::new([]);
    let mut current: Option<StackId> = None;
    for (generation, &((root, stack), weight)) in entries.iter().enumerate() {
        if current != Some(stack) {
            current = Some(stack);
            expand(tables, symbols, stack, &mut funcs);
            tail = Arc::from(&funcs[..]);
        }
        // Lines are keyed by ids, not text: a stack's text is made once
        // per distinct line, at the end (lines::sorted).
        let c = out.lines.entry((root, Arc::clone(&tail))).or_insert(0);
        *c = c.saturating_add(weight);

        if let Some(&leaf) = funcs.last() {
            if let Some(s) = out.self_w.get_mut(leaf as usize) {
                *s = s.saturating_add(weight);
            }
        }
        for &f in &funcs {
            let i = f as usize;
            if let (Some(st), Some(t)) = (stamp.get_mut(i), out.total_w.get_mut(i)) {
                if *st != generation {
                    *st = generation;
                    *t = t.saturating_add(weight);
                }
            }
        }
    }
    out
}

/// The distinct frames under the given leaves, each stack node visited once.
/// The profile of folded text: its distinct stacks (sorted, as
/// [`crate::input::folded::parse`] returns them) with per-function totals
/// counted as for a recording, the root not a function. Folded text has no
/// modules, processes, times or event: those stay empty.
pub(crate) fn from_folded(stacks: Vec<(String, u64)>) -> Profile {
    let mut functions: HashMap<&str, (u64, u64)> = HashMap::default();
    let mut seen: Vec<&str> = Vec::new();
    for (line, w) in &stacks {
        seen.clear();
        let frames = line.split(';').skip(1);
        for f in frames {
            if !seen.contains(&f) {
                seen.push(f);
            }
        }
        for f in &seen {
            let e = functions.entry(f).or_default();
            e.1 = e.1.saturating_add(*w);
        }
        if let (Some(leaf), true) = (line.rsplit(';').next(), line.contains(';')) {
            let e = functions.entry(leaf).or_default();
            e.0 = e.0.saturating_add(*w);
        }
    }
    let mut functions: Vec<FunctionStats> = functions
        .into_iter()
        .map(|(name, (self_weight, total_weight))| FunctionStats {
            name: name.to_string(),
            module: String::new(),
            self_weight,
            total_weight,
        })
        .collect();
    functions.sort_by(FunctionStats::order);
    let total = stacks.iter().fold(0u64, |a, (_, w)| a.saturating_add(*w));
    Profile {
        metadata: Metadata {
            target: "folded text".into(),
            weight_unit: "samples".into(),
            ..Metadata::default()
        },
        stacks: stacks.into(),
        samples: total,
        total_weight: total,
        functions,
        ..Profile::default()
    }
}

pub(crate) fn used_frames(tables: &Tables, leaves: impl Iterator<Item = StackId>) -> Vec<u32> {
    let mut seen_node = vec![false; tables.node_count()];
    let mut seen_frame = vec![false; tables.frames.len()];
    for leaf in leaves {
        let mut cur = leaf;
        while let Some((parent, frame)) = tables.node(cur) {
            match seen_node.get_mut(cur as usize) {
                Some(seen) if !*seen => *seen = true,
                _ => break,
            }
            if let Some(f) = seen_frame.get_mut(frame as usize) {
                *f = true;
            }
            cur = parent;
        }
    }
    seen_frame
        .iter()
        .enumerate()
        .filter(|(_, &s)| s)
        .map(|(i, _)| i as u32)
        .collect()
}

/// The functions of a stack, root first, inlined frames expanded.
fn expand(tables: &Tables, symbols: &Symbols, stack: StackId, out: &mut Vec<FuncId>) {
    out.clear();
    let mut cur = stack;
    // Leaf first; each frame's functions are outermost first, so push them
    // reversed and flip the whole list at the end.
    while let Some((parent, frame)) = tables.node(cur) {
        if let Some(fs) = symbols.frames.get(frame as usize) {
            out.extend(fs.iter().rev());
        }
        cur = parent;
    }
    out.reverse();
}
