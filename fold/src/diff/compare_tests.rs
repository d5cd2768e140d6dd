//! Tests of the per-function and per-path comparison: shares, totals,
//! gates, and the call path named for a shared leaf.

use std::path::Path;

use super::*;
use crate::diff::DispersionBasis;
use crate::FunctionStats;

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
    assert_eq!((d.base_weight, d.new_weight), (100, 200));
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
    assert_eq!(d.base_weight, 0);
    check(get(&d, "a"), (0.0, 0.0), (100.0, 100.0));
    let d = Diff::new(&side(""), &side(""));
    assert!(d.functions.is_empty());
}

#[test]
fn functions_are_matched_by_name_and_labelled_with_a_unique_module() {
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
    let new = rec(
        "p;main;work 10\n",
        vec![stat("main", "p", 10), stat("work", "libw.so", 10)],
    );
    let d = Diff::new(&side("x;main;work 1\n"), &new);
    assert_eq!(get(&d, "work").module, "libw.so");
    assert_eq!(get(&d, "main").module, "p");
    // `main` of two modules: one function, no label.
    let base = rec(
        "p;main 5\nq;main 5\n",
        vec![stat("main", "p", 5), stat("main", "q", 5)],
    );
    let d = Diff::new(&base, &side("x;main 1\n"));
    assert_eq!(d.functions.len(), 1);
    assert_eq!(get(&d, "main").module, "");
    check(get(&d, "main"), (100.0, 100.0), (100.0, 100.0));
}

fn runs(texts: &[&str]) -> Side {
    Side::merge(texts.iter().map(|t| side(t)).collect())
}

#[test]
fn several_runs_merge_their_stacks_and_count_as_runs() {
    let base = runs(&["p;a 30\np;b 70\n", "p;a 32\np;b 68\n", "p;a 29\np;b 71\n"]);
    assert_eq!(base.runs.len(), 3);
    assert_eq!(base.stacks, vec![("p;a".into(), 91), ("p;b".into(), 209)]);
    let d = Diff::new(&base, &runs(&["p;a 31\np;b 69\n"]));
    assert_eq!((d.base_runs, d.new_runs), (3, 1));
    assert_eq!(d.base_weight, 300);
    // Folded text: no time, shares only, and a note says so.
    assert!(d.time.is_none());
    assert!(get(&d, "a").time_change.is_none());
    assert!(
        d.notes.iter().any(|n| n.contains("no CPU time")),
        "{:?}",
        d.notes
    );
}

#[test]
fn interrupt_samples_are_left_out_and_never_top_the_regressions() {
    let base = side("p;main;work 1000\np;main;work;asm_sysvec_reschedule_ipi;schedule 5\n");
    let new = side("p;main;work 1000\np;main;work;asm_sysvec_reschedule_ipi;schedule 60\n");
    let gate = Gate {
        share_pts: Some(0.5),
        time_pct: None,
    };
    let opts = DiffOptions {
        gate,
        ..DiffOptions::default()
    };
    let d = Diff::compare(&base, &new, &opts);
    assert!(d.functions.iter().all(|f| f.name != "schedule"));
    assert!(d.tripped().is_empty(), "{:?}", d.tripped());
    assert!((d.new_interrupt_pct - 60.0 / 10.6).abs() < 1e-9);
    let kept = Diff::compare(
        &base,
        &new,
        &DiffOptions {
            keep_interrupts: true,
            ..opts
        },
    );
    // Kept, the interrupt path trips: the scheduler it entered (where
    // the samples end) first, then the IPI entry (the same samples).
    let names: Vec<&str> = kept.tripped().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["schedule", "asm_sysvec_reschedule_ipi"]);
}

#[test]
fn the_share_gate_trips_only_beyond_noise_and_above_the_threshold() {
    let gate = |pts| DiffOptions {
        gate: Gate {
            share_pts: Some(pts),
            time_pct: None,
        },
        ..DiffOptions::default()
    };
    // 10,000 samples a side, 30% → 33%: 3 points, 4.5 standard errors.
    let base = side("p;a 3000\np;b 7000\n");
    let new = side("p;a 3300\np;b 6700\n");
    let d = Diff::compare(&base, &new, &gate(1.0));
    let names: Vec<&str> = d.tripped().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["a"]);
    assert_eq!(get(&d, "a").verdict, Verdict::Grew);
    assert_eq!(get(&d, "b").verdict, Verdict::Shrank);
    assert!(Diff::compare(&base, &new, &gate(5.0)).tripped().is_empty());
    // The same 3 points on 100 samples a side: noise.
    let d = Diff::compare(
        &side("p;a 30\np;b 70\n"),
        &side("p;a 33\np;b 67\n"),
        &gate(1.0),
    );
    assert!(d.tripped().is_empty());
    assert_eq!(get(&d, "a").verdict, Verdict::Noise);
}

#[test]
fn the_function_a_change_happened_in_comes_before_its_callers() {
    let gate = DiffOptions {
        gate: Gate {
            share_pts: Some(1.0),
            time_pct: None,
        },
        ..DiffOptions::default()
    };
    // `run` grows by 10 points in total, 2 of them its own; `leaf`
    // grows by 8, all its own: the list starts where the time went.
    let base = side("p;main;run;leaf 2000\np;main;run 1000\np;main;rest 7000\n");
    let new = side("p;main;run;leaf 2800\np;main;run 1200\np;main;rest 6000\n");
    let d = Diff::compare(&base, &new, &gate);
    let names: Vec<&str> = d.tripped().iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["leaf", "run"]);
}

/// The program of issue 39: four callers share one leaf, `work`, and
/// `compute_hash` calls it 20% more in NEW. Three runs a side.
fn shared_leaf(hash: u64, jitter: &[i64]) -> Side {
    let texts: Vec<String> = jitter
        .iter()
        .map(|j| {
            format!(
                "p;main;parse_input;work {}\np;main;compute_hash;work {}\n\
                 p;main;render;work {}\np;main;log;work 200\n",
                4900 + j,
                hash as i64 - j,
                2000 + j
            )
        })
        .collect();
    Side::merge(texts.iter().map(|t| side(t)).collect())
}

#[test]
fn one_shared_leaf_is_named_by_the_caller_path_that_grew() {
    let gate = DiffOptions {
        gate: Gate {
            share_pts: Some(2.0),
            time_pct: None,
        },
        ..DiffOptions::default()
    };
    let base = shared_leaf(2900, &[0, 40, -40]);
    let new = shared_leaf(3480, &[20, -30, 10]);
    let d = Diff::compare(&base, &new, &gate);
    // One leaf: the runs' spread is measured over the callers' paths.
    assert_eq!(
        d.noise.basis,
        DispersionBasis::CallPaths(2),
        "{:?}",
        d.noise
    );
    assert!(d.noise.dispersion_df.is_some());
    let paths: Vec<String> = d.paths.iter().map(PathDiff::name).collect();
    assert_eq!(paths, ["compute_hash → work"]);
    let findings: Vec<Option<String>> = d
        .findings()
        .iter()
        .map(|f| f.path.map(PathDiff::name))
        .collect();
    assert_eq!(findings, [Some("compute_hash → work".to_string())]);
    // One run a side: nothing measures it, and the basis says why.
    let d = Diff::new(&shared_leaf(2900, &[0]), &shared_leaf(3480, &[0]));
    assert_eq!(d.noise.basis, DispersionBasis::OneRun);
}
