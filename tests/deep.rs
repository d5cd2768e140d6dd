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

/// Records deep-stack with `args` (with both its threads on one CPU when
/// `pinned`, see [`on_one_cpu`]); the folded stacks (inlined frames left
/// out) and the count of each shape (whole, cut, other, wrong), or `None`
/// when perf tests are skipped.
fn record_deep(args: &[&str], pinned: bool, extra: &[&str]) -> Option<(Stacks, [u64; 4])> {
    let bin = sample_bin(Sample::DeepStack, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("deep.frec");
    let mut cmd = vec![bin.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let cmd = if pinned {
        on_one_cpu(&cmd)
    } else {
        cmd.iter().map(|a| a.to_string()).collect()
    };
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let o = record(&out, extra, &cmd)?;
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

/// Asserts that `wrong` (the count of stitched-wrong samples) is 0, naming
/// the wrong stacks and `what` was recorded otherwise.
fn assert_none_wrong(stacks: &Stacks, wrong: u64, what: &str) {
    let wrong_stacks: Vec<_> = stacks
        .iter()
        .filter(|(s, _)| shape(s) == Shape::Wrong)
        .collect();
    assert_eq!(wrong, 0, "{what} stitched wrong: {wrong_stacks:?}");
}

/// Margins. A sample deeper than its copy stays cut only when the frames its
/// copy ended in change before the recorder has shown them still active: a
/// snapshot read after the sample and a later sample of the same thread,
/// within 3 drain rounds. So cuts come at the moments a thread's frames
/// change — it starts, returns from the recursion to go down again, ends —
/// and how many samples each such moment cuts depends on how late the
/// recorder and the thread get a CPU, which a busy machine decides. With the
/// sample's default rounds (≈ 35 ms, ≈ 57 changes in the run) that gave
/// 0.06–0.3% cut on a quiet machine and 0.51% under load (bound 0.5%).
///
/// So the workload is made to change rarely: rounds of 142,500 units
/// (≈ 0.5 s of CPU), two per thread — one return and descent each, which
/// still checks that stacks are completed again after their frames
/// changed — and both threads on one CPU, where they take turns in slices
/// of a few ms: neither can go unsampled for the ≈ 16 samples (2 drain
/// rounds of 8) the other would need to run meanwhile to leave a waiting
/// sample unproven. What is left to cut is a drain round's waiting samples
/// (≈ 8) at a change where the recorder was kept from its CPU longer than
/// the round that followed (≈ 0.5 s): ≈ 0 expected, against ≤ 0.5% of
/// ≈ 2,000 (10) allowed. Counts follow CPU time (570,000 units ≈ 2 s at
/// 999 Hz), not the wall clock; ≥ 1,000 allows a CPU twice as fast as the
/// calibration's.
#[test]
fn stacks_deeper_than_their_copy_are_whole_and_exact_on_both_threads() {
    // Measures shares, losses or cut stacks: no other workload beside it.
    let _alone = alone();
    // ≈ 2 s of work split over the two threads, in two rounds each.
    let args = ["--units", "570000", "--round-units", "142500"];
    let Some((stacks, [whole, cut, _, wrong])) = record_deep(&args, true, &[]) else {
        return;
    };
    assert_none_wrong(&stacks, wrong, "");
    let work = whole + cut;
    let pct = whole as f64 * 100.0 / work.max(1) as f64;
    assert!(
        work >= 1000 && pct >= 99.5,
        "{pct:.2}% of {work} samples in the recursion are whole and exact (≥ 99.5% wanted)"
    );
    // Both threads, each from its own entry. They do equal halves of the
    // units, so each holds ≈ 50% of the work's samples (a share of the
    // process's own CPU time, whatever else runs): 25% is 25 points and
    // more than 20 binomial standard deviations (1.1 points at 2,000) away.
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

/// Margins: a stitch to the wrong chain is never allowed (0, whatever the
/// load). `cut > 0 && whole > 0` only says both outcomes happened: ≈ 570
/// rounds of ≈ 3.5 ms of CPU against drain rounds every ≈ 8 samples (8 ms)
/// leave most rounds over before the recorder reads the thread (cut), and
/// the rounds a snapshot falls in show their later samples (whole). A busy
/// machine delays the recorder, which moves samples from whole to cut, but
/// cannot take either to none over hundreds of rounds on two threads. Not
/// pinned: the threads run in parallel as programs do.
#[test]
fn stacks_that_change_before_they_can_be_shown_stay_cut_never_stitched_wrong() {
    // Measures shares, losses or cut stacks: no other workload beside it.
    let _alone = alone();
    // Rounds of ≈ 3.5 ms alternating between two chains of identical shape:
    // by the time a sample's thread is read, its frames have often been
    // replaced by the other chain's.
    let args = ["--units", "570000", "--alternate", "--round-units", "1000"];
    // Read in place by the loop, and copied out by ring readers (which the
    // loop starts when it falls behind): the same proof either way.
    for extra in [&[][..], &["--ring-readers", "2"][..]] {
        let Some((stacks, [whole, cut, _, wrong])) = record_deep(&args, false, extra) else {
            return;
        };
        assert_none_wrong(&stacks, wrong, &format!("{extra:?}"));
        // The case happened (some were cut), and was not everything.
        assert!(cut > 0 && whole > 0, "{extra:?}: {whole} whole, {cut} cut");
    }
}

/// Margins. What is asserted is what info reports, not how fast frames may
/// change (the tests above), so the frames never change while sampled: each
/// thread runs its 150,000 units (≈ 0.5 s of CPU) in one round, and both
/// share one CPU (see the first test). The only samples left waiting are a
/// thread's first ones, before its first snapshot, and those the recorder
/// reads while it takes one; they are shown by the thread's next sample, a
/// few ms later on a CPU it shares with its sibling. (It failed once under
/// load unpinned, with a return and descent ≈ 0.35 s into each thread.)
///
/// Expected: completed ≈ every sample but start-up, thread creation and
/// exit (a few ms of ≈ 1,050 samples, 300,000 units at 999 Hz: ≥ 99%),
/// bound 90%; cut ≈ 0, bound 2% (21). Both are of the process's own samples,
/// which follow its CPU time, not the wall clock.
#[test]
fn info_reports_stacks_completed_from_the_live_thread() {
    // Measures shares, losses or cut stacks: no other workload beside it.
    let _alone = alone();
    let bin = sample_bin(Sample::DeepStack, FramePointers::No);
    let dir = tmp();
    let out = dir.path().join("deep.frec");
    let args = on_one_cpu(&[
        bin.to_str().unwrap(),
        "--units",
        "300000",
        "--round-units",
        "150000",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
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

/// Start-up in the dynamic loader and stripped binaries' entry points are
/// whole stacks.
///
/// Margins. Such a loop keeps about 1% of its stacks cut for other causes
/// (lazy binding, the moments of exec and exit; docs/design-notes.md):
/// measured at 4999 Hz, 0.82–1.20% on a quiet machine and 0.89–1.31%
/// beside two busy loops (8 runs each), and 2.0% once inside the whole
/// suite beside two busy loops, 0.8 points of it threads that exited before
/// the live read (the earlier margin assumed 0.6–0.7% and a bound of 1.8%,
/// which that run crossed). The dynamic loader's start-up is ≈ 2% of the
/// loop's CPU time (`LD_DEBUG=statistics`: ≈ 0.3 M cycles per iteration of
/// ≈ 4–5 ms), so losing the loader's entry would cut ≈ 2.7% more. On this
/// machine in November 2026 the loop cuts 2.0–2.5% on an idle machine, at
/// the commit before this bound and after alike (12,000–12,800 samples, 3
/// runs each; 2.65–2.7% in 2 of 7 runs of the suite's own, which the bound
/// of 2.6% then failed): losing the loader's entry would give ≥ 4.7%. The
/// bound of 3.5% sits ≈ 8 binomial standard deviations (0.13 points at
/// 12,000 samples) above 2.5% and below 4.7%; counts follow CPU time, not
/// the wall clock (≥ 3,000 samples asserted).
#[test]
fn short_lived_dynamically_linked_programs_are_not_counted_cut() {
    // Measures shares, losses or cut stacks: no other workload beside it.
    let _alone = alone();
    let dir = tmp();
    let out = dir.path().join("short.frec");
    let script = "for i in $(seq 300); do ls -l /usr/bin > /dev/null; date > /dev/null; done";
    let Some(o) = record(&out, &["-F", "4999"], &["sh", "-c", script]) else {
        return;
    };
    assert!(o.status.success(), "{}", stderr(&o));
    let info = info_json(&out);
    let samples = info["samples"].as_u64().unwrap_or(0);
    let cut = info["truncated_stacks"].as_u64().unwrap_or(u64::MAX);
    assert!(samples >= 3000, "only {samples} samples");
    assert!(
        cut * 1000 <= samples * 35,
        "{cut} of {samples} stacks cut short (≤ 3.5% wanted): {}",
        stderr(&o)
    );
}
