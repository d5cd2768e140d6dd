//! The per-function comparison of two sides: shares, deltas, ordering,
//! filtering. It owns what a function's self and total weight are for folded
//! stacks (the same definition as `crate::profile` uses for recordings) and
//! does no I/O.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::FunctionStats;

use super::{Side, SideKind};

/// A function's shares of one side's total weight, in percent (0–100).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Shares {
    /// Weight of samples whose leaf is the function.
    pub self_pct: f64,
    /// Weight of samples with the function anywhere in the stack, each counted once.
    pub total_pct: f64,
}

/// How one function changed from BASE to NEW.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDiff {
    /// Function name as in folded text.
    pub name: String,
    /// Module basename, or empty when unknown (folded text).
    pub module: String,
    /// Shares in BASE.
    pub base: Shares,
    /// Shares in NEW.
    pub new: Shares,
    /// `new.self_pct - base.self_pct`, in percentage points.
    pub self_delta_pct: f64,
    /// `new.total_pct - base.total_pct`, in percentage points.
    pub total_delta_pct: f64,
}

impl FunctionDiff {
    /// In NEW but not in BASE.
    pub fn is_new(&self) -> bool {
        self.base.total_pct == 0.0 && self.new.total_pct > 0.0
    }

    /// In BASE but not in NEW.
    pub fn vanished(&self) -> bool {
        self.new.total_pct == 0.0 && self.base.total_pct > 0.0
    }
}

/// Two profiles compared function by function.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// Total weight of BASE (samples, or ns for off-CPU recordings).
    pub base_samples: u64,
    /// Total weight of NEW.
    pub new_samples: u64,
    /// Every function of either side, largest total change first (then
    /// largest self change, name, module).
    pub functions: Vec<FunctionDiff>,
}

/// Self and total weight of one function on one side.
#[derive(Debug, Clone, Copy, Default)]
struct Weights {
    self_w: u64,
    total_w: u64,
}

impl Diff {
    /// Compares `new` against `base`.
    pub fn new(base: &Side, new: &Side) -> Diff {
        let base_total = base.total();
        let new_total = new.total();
        let (base_w, new_w) = match (&base.functions, &new.functions) {
            (Some(b), Some(n)) => (by_module(b), by_module(n)),
            _ => {
                let labels = module_labels([base, new]);
                let label = |m: HashMap<String, Weights>| {
                    m.into_iter()
                        .map(|(name, w)| {
                            let module = labels.get(name.as_str()).cloned().unwrap_or_default();
                            ((name, module), w)
                        })
                        .collect::<HashMap<_, _>>()
                };
                (label(by_name(&base.stacks)), label(by_name(&new.stacks)))
            }
        };

        let mut keys: Vec<&(String, String)> = base_w.keys().chain(new_w.keys()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut functions: Vec<FunctionDiff> = keys
            .into_iter()
            .map(|key| {
                let b = shares(base_w.get(key), base_total);
                let n = shares(new_w.get(key), new_total);
                FunctionDiff {
                    name: key.0.clone(),
                    module: key.1.clone(),
                    base: b,
                    new: n,
                    self_delta_pct: n.self_pct - b.self_pct,
                    total_delta_pct: n.total_pct - b.total_pct,
                }
            })
            .collect();
        functions.sort_by(|a, b| {
            desc(a.total_delta_pct.abs(), b.total_delta_pct.abs())
                .then_with(|| desc(a.self_delta_pct.abs(), b.self_delta_pct.abs()))
                .then_with(|| a.name.cmp(&b.name))
                .then_with(|| a.module.cmp(&b.module))
        });
        Diff {
            base_samples: base_total,
            new_samples: new_total,
            functions,
        }
    }

    /// Leaves out functions whose total share is below `pct` on both sides.
    pub fn retain_min_share(&mut self, pct: f64) {
        self.functions
            .retain(|f| f.base.total_pct >= pct || f.new.total_pct >= pct);
    }

    /// Functions whose total share grew by more than `pct` points, largest first.
    pub fn grew_more_than(&self, pct: f64) -> Vec<&FunctionDiff> {
        let mut grew: Vec<&FunctionDiff> = self
            .functions
            .iter()
            .filter(|f| f.total_delta_pct > pct)
            .collect();
        grew.sort_by(|a, b| desc(a.total_delta_pct, b.total_delta_pct));
        grew
    }
}

/// Descending order of two finite numbers.
fn desc(a: f64, b: f64) -> Ordering {
    b.partial_cmp(&a).unwrap_or(Ordering::Equal)
}

fn shares(w: Option<&Weights>, total: u64) -> Shares {
    let pct = |x: u64| {
        if total == 0 {
            0.0
        } else {
            x as f64 * 100.0 / total as f64
        }
    };
    let w = w.copied().unwrap_or_default();
    Shares {
        self_pct: pct(w.self_w),
        total_pct: pct(w.total_w),
    }
}

/// A recording's statistics keyed by (name, module). Two symbols can share
/// both (local functions of the same name); their weights add up, the total
/// capped at what the stacks allow.
fn by_module(functions: &[FunctionStats]) -> HashMap<(String, String), Weights> {
    let mut out: HashMap<(String, String), Weights> = HashMap::with_capacity(functions.len());
    for f in functions {
        let w = out.entry((f.name.clone(), f.module.clone())).or_default();
        w.self_w = w.self_w.saturating_add(f.self_weight);
        w.total_w = w.total_w.saturating_add(f.total_weight);
    }
    out
}

/// Per function name: self weight (leaf frame) and total weight (anywhere
/// below the root, once per stack however often it recurs).
fn by_name(stacks: &[(String, u64)]) -> HashMap<String, Weights> {
    let mut out: HashMap<String, Weights> = HashMap::new();
    let mut frames: Vec<&str> = Vec::new();
    for (line, weight) in stacks {
        frames.clear();
        // The first frame is the root (process or thread), not a function.
        frames.extend(line.split(';').skip(1));
        let Some(&leaf) = frames.last() else {
            continue;
        };
        let e = out.entry(leaf.to_string()).or_default();
        e.self_w = e.self_w.saturating_add(*weight);
        frames.sort_unstable();
        frames.dedup();
        for f in &frames {
            let e = match out.get_mut(*f) {
                Some(e) => e,
                None => out.entry((*f).to_string()).or_default(),
            };
            e.total_w = e.total_w.saturating_add(*weight);
        }
    }
    out
}

/// For names that recordings among `sides` place in exactly one module, that module.
fn module_labels(sides: [&Side; 2]) -> HashMap<&str, String> {
    let mut modules: HashMap<&str, Option<&str>> = HashMap::new();
    for side in sides {
        if side.kind != SideKind::Recording {
            continue;
        }
        for f in side.functions.iter().flatten() {
            modules
                .entry(f.name.as_str())
                .and_modify(|m| {
                    if *m != Some(f.module.as_str()) {
                        *m = None;
                    }
                })
                .or_insert(Some(f.module.as_str()));
        }
    }
    modules
        .into_iter()
        .filter_map(|(name, m)| m.map(|m| (name, m.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn side(text: &str) -> Side {
        Side::from_folded(text.as_bytes(), Path::new("t")).unwrap()
    }

    fn get<'a>(d: &'a Diff, name: &str) -> &'a FunctionDiff {
        d.functions
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("{name} missing from {:?}", d.functions))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[track_caller]
    fn check(f: &FunctionDiff, base: (f64, f64), new: (f64, f64)) {
        let ok = close(f.base.self_pct, base.0)
            && close(f.base.total_pct, base.1)
            && close(f.new.self_pct, new.0)
            && close(f.new.total_pct, new.1)
            && close(f.self_delta_pct, new.0 - base.0)
            && close(f.total_delta_pct, new.1 - base.1);
        assert!(
            ok,
            "{} is {f:?}, expected base {base:?} new {new:?}",
            f.name
        );
    }

    #[test]
    fn inner_frames_get_the_total_of_everything_below_them() {
        // BASE: 100 samples; NEW: 200 samples (normalized, so twice the count is no change).
        let base = side("p;main;run;a 50\np;main;run;b 30\np;main;run 10\np;main;c 10\n");
        let new = side("p;main;run;a 60\np;main;run;b 60\np;main;run 40\np;main;c 40\n");
        let d = Diff::new(&base, &new);
        assert_eq!((d.base_samples, d.new_samples), (100, 200));
        check(get(&d, "main"), (0.0, 100.0), (0.0, 100.0));
        check(get(&d, "run"), (10.0, 90.0), (20.0, 80.0));
        check(get(&d, "a"), (50.0, 50.0), (30.0, 30.0));
        check(get(&d, "b"), (30.0, 30.0), (30.0, 30.0));
        check(get(&d, "c"), (10.0, 10.0), (20.0, 20.0));
        // The root frame is the process, not a function.
        assert!(d.functions.iter().all(|f| f.name != "p"));
        // Largest total change first: a (-20), then c and run (±10, by name), then b and main.
        let order: Vec<&str> = d.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(order, ["a", "c", "run", "b", "main"]);
    }

    #[test]
    fn recursion_counts_each_sample_once() {
        let base = side("p;f;f;f;g 4\np;f 4\np;h 2\n");
        let new = side("p;f;f;f;f;f;g 1\np;g;f;g 1\np;h 8\n");
        let d = Diff::new(&base, &new);
        check(get(&d, "f"), (40.0, 80.0), (0.0, 20.0));
        check(get(&d, "g"), (40.0, 40.0), (20.0, 20.0));
        check(get(&d, "h"), (20.0, 20.0), (80.0, 80.0));
        assert!(d.functions.iter().all(|f| f.base.total_pct <= 100.0));
    }

    #[test]
    fn vanished_and_new_functions_are_reported_with_zero_on_their_missing_side() {
        let base = side("p;main;old 25\np;main;kept 75\n");
        let new = side("p;main;fresh 10\np;main;kept 30\n");
        let d = Diff::new(&base, &new);
        let old = get(&d, "old");
        check(old, (25.0, 25.0), (0.0, 0.0));
        assert!(old.vanished() && !old.is_new());
        let fresh = get(&d, "fresh");
        check(fresh, (0.0, 0.0), (25.0, 25.0));
        assert!(fresh.is_new() && !fresh.vanished());
        check(get(&d, "kept"), (75.0, 75.0), (75.0, 75.0));
        assert!(!get(&d, "kept").is_new() && !get(&d, "kept").vanished());
        // Equal size of change: ordered by name.
        assert_eq!(d.functions[0].name, "fresh");
        assert_eq!(d.functions[1].name, "old");
    }

    #[test]
    fn gate_and_noise_filter() {
        let base = side("p;a 90\np;b 9\np;tiny 1\n");
        let new = side("p;a 80\np;b 19\np;tiny 0\np;speck 1\n");
        let mut d = Diff::new(&base, &new);
        let grew: Vec<&str> = d
            .grew_more_than(5.0)
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(grew, ["b"]);
        assert!(d.grew_more_than(10.0).is_empty());
        let grew: Vec<&str> = d
            .grew_more_than(0.5)
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(grew, ["b", "speck"]);
        d.retain_min_share(2.0);
        let names: Vec<&str> = d.functions.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn empty_sides_give_zero_shares_not_nan() {
        let d = Diff::new(&side(""), &side("p;a 3\n"));
        assert_eq!(d.base_samples, 0);
        check(get(&d, "a"), (0.0, 0.0), (100.0, 100.0));
        let d = Diff::new(&side(""), &side(""));
        assert!(d.functions.is_empty());
    }

    #[test]
    fn recordings_keep_modules_apart_and_label_folded_names() {
        let rec = |stacks: &str, functions: Vec<FunctionStats>| {
            let mut s = side(stacks);
            s.kind = SideKind::Recording;
            s.functions = Some(functions);
            s
        };
        let stat = |name: &str, module: &str, w: u64| FunctionStats {
            name: name.to_string(),
            module: module.to_string(),
            self_weight: w,
            total_weight: w,
        };
        let base = rec(
            "p;main 5\nq;main 5\n",
            vec![stat("main", "p", 5), stat("main", "q", 5)],
        );
        let new = rec("p;main 10\n", vec![stat("main", "p", 10)]);
        let d = Diff::new(&base, &new);
        assert_eq!(d.functions.len(), 2);
        let q = d.functions.iter().find(|f| f.module == "q").unwrap();
        check(q, (50.0, 50.0), (0.0, 0.0));
        let p = d.functions.iter().find(|f| f.module == "p").unwrap();
        check(p, (50.0, 50.0), (100.0, 100.0));

        // Against folded text: matched by name, labelled with the recording's module.
        let new = rec(
            "p;main;work 10\n",
            vec![stat("main", "p", 10), stat("work", "libw.so", 10)],
        );
        let d = Diff::new(&side("x;main;work 1\n"), &new);
        assert_eq!(get(&d, "work").module, "libw.so");
        assert_eq!(get(&d, "main").module, "p");
        // `main` has two modules in `base`, so no label.
        let d = Diff::new(&base, &side("x;main 1\n"));
        assert_eq!(d.functions.len(), 1);
        assert_eq!(get(&d, "main").module, "");
    }
}
