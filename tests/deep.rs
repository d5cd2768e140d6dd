//! Whole stacks at any depth: the `deep-stack` sample's stacks (over 200 KiB
//! deep, on two threads, built without frame pointers) are completed from
//! the live threads past the slice each sample copies, exactly as
//! constructed; where the stack changes before it can be shown still the
//! sample's, they stay cut — never stitched to the wrong callers.
//!
//! Tests that record need perf_event_open. Where it is denied they fail
//! naming the cause, unless FLAMEREC_SKIP_PERF_TESTS=1 is set.

use crate::common::*;
use flamerec_samples::{FramePointers, Sample};

/// Frames a whole stack starts with, below the process name: the main
/// thread's entry, or a thread's.
const ENTRIES: [&str; 4] = ["_start", "__clone3", "clone3", "start_thread"];
/// The recursion's depth below its first call, in frames.
const DESCENDS: usize = 101;

/// What one folded stack of deep-stack is.
#[derive(Debug, PartialEq)]
enum Shape {
    /// Reaches an entry; the work part is one chain, exactly as constructed.
    Whole,
    /// Stops short of an entry; its descend frames are all of one chain.
    Cut,
    /// Not in the recursion's work (start-up, thread creation, exit).
    Other,
    /// Frames of both chains, or the wrong number of them: stitched wrong.
    Wrong,
}

fn shape(stack: &[String]) -> Shape {
    let Some(leaf) = stack.iter().rposition(|f| f == "deep_stack_leaf") else {
        return Shape::Other;
    };
    let a = stack
        .iter()
        .filter(|f| *f == "deep_stack_descend_a")
        .count();
    let b = stack
        .iter()
        .filter(|f| *f == "deep_stack_descend_b")
        .count();
    if a > 0 && b > 0 {
        return Shape::Wrong;
    }
    let whole = stack.get(1).is_some_and(|f| ENTRIES.contains(&f.as_str()));
    if !whole {
        return Shape::Cut;
    }
    // Below deep_stack_run: the descend frames, then the leaf.
    let Some(run) = stack.iter().position(|f| f == "deep_stack_run") else {
        return Shape::Wrong;
    };
    let chain = &stack[run + 1..leaf];
    let one_chain = chain.len() == DESCENDS
        && (chain.iter().all(|f| f == "deep_stack_descend_a")
            || chain.iter().all(|f| f == "deep_stack_descend_b"));
    if one_chain {
        Shape::Whole
    } else {
        Shape::Wrong
    }
}

/// Folded stacks: frames root first, and the count.
type Stacks = Vec<(Vec<String>, u64)>;

/// Records deep-stack with `args`; the folded stacks (inlined frames left
/// out) and the count of each shape (whole, cut, other, wrong), or `None`
/// when perf tests are skipped.
fn record_deep(args: &[&str]) -> Option<(Stacks, [u64; 4])> {
    let bin = sample_bin(Sample::DeepStack, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("deep.frec");
    let mut cmd = vec![bin.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let o = record(&out, &[], &cmd)?;
    assert!(o.status.success(), "{}", stderr(&o));
    let stacks = fold(&out, &["--no-inline"]);
    let mut counts = [0u64; 4];
    for (s, n) in &stacks {
        let i = match shape(s) {
            Shape::Whole => 0,
            Shape::Cut => 1,
            Shape::Other => 2,
            Shape::Wrong => 3,
        };
        counts[i] += n;
    }
    Some((stacks, counts))
}

#[test]
fn stacks_deeper_than_their_copy_are_whole_and_exact_on_both_threads() {
    // ≈ 2 s of work split over the two threads.
    let Some((stacks, [whole, cut, _, wrong])) = record_deep(&["--units", "570000"]) else {
        return;
    };
    let wrong_stacks: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| shape(s) == Shape::Wrong)
        .collect();
    assert_eq!(wrong, 0, "stitched wrong: {wrong_stacks:?}");
    let work = whole + cut;
    let pct = whole as f64 * 100.0 / work.max(1) as f64;
    assert!(
        work >= 1000 && pct >= 99.5,
        "{pct:.2}% of {work} samples in the recursion are whole and exact (≥ 99.5% wanted)"
    );
    // Both threads, each from its own entry.
    for root in ["_start", "__clone3"] {
        let n: u64 = stacks
            .iter()
            .filter(|(s, _)| shape(s) == Shape::Whole && s.get(1).is_some_and(|f| f == root))
            .map(|(_, n)| n)
            .sum();
        assert!(
            n * 4 >= work,
            "only {n} of {work} whole stacks start at {root}"
        );
    }
}

#[test]
fn stacks_that_change_before_they_can_be_shown_stay_cut_never_stitched_wrong() {
    // Rounds of ≈ 3.5 ms alternating between two chains of identical shape:
    // by the time a sample's thread is read, its frames have often been
    // replaced by the other chain's.
    let Some((stacks, [whole, cut, _, wrong])) =
        record_deep(&["--units", "570000", "--alternate", "--round-units", "1000"])
    else {
        return;
    };
    let wrong_stacks: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| shape(s) == Shape::Wrong)
        .collect();
    assert_eq!(wrong, 0, "stitched wrong: {wrong_stacks:?}");
    // The case happened (some were cut), and was not everything.
    assert!(cut > 0 && whole > 0, "{whole} whole, {cut} cut");
}

#[test]
fn info_reports_stacks_completed_from_the_live_thread() {
    let bin = sample_bin(Sample::DeepStack, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("deep.frec");
    // Long rounds (≈ 0.35 s between returns): what is asserted here is what
    // info reports, not how fast frames may change (the tests above).
    let args = [
        bin.to_str().unwrap(),
        "--units",
        "300000",
        "--round-units",
        "100000",
    ];
    let Some(o) = record(&out, &[], &args) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let info = info_json(&out);
    let samples = info["samples"].as_u64().unwrap_or(0);
    let completed = info["completed_stacks"].as_u64().unwrap_or(0);
    let cut = info["truncated_stacks"].as_u64().unwrap_or(u64::MAX);
    assert!(
        completed * 10 >= samples * 9,
        "{completed} of {samples} completed ({cut} cut, {} lost): {}",
        info["lost_samples"],
        stderr(&o)
    );
    assert!(cut * 100 <= samples * 2, "{cut} of {samples} cut");
}

#[test]
fn short_lived_dynamically_linked_programs_are_not_counted_cut() {
    // Start-up in the dynamic loader and stripped binaries' entry points
    // are whole stacks: ≤ 1% cut over many short runs.
    let dir = tmp();
    let out = dir.path().join("short.frec");
    let script = "for i in $(seq 300); do ls -l /usr/bin > /dev/null; date > /dev/null; done";
    let Some(o) = record(&out, &[], &["sh", "-c", script]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let info = info_json(&out);
    let samples = info["samples"].as_u64().unwrap_or(0);
    let cut = info["truncated_stacks"].as_u64().unwrap_or(u64::MAX);
    assert!(samples >= 200, "only {samples} samples");
    assert!(
        cut * 100 <= samples,
        "{cut} of {samples} stacks cut short: {}",
        stderr(&o)
    );
}
