//! speedscope's file format (`$schema`
//! <https://www.speedscope.app/file-format-schema.json>): one `sampled`
//! profile per thread, its samples in time order with their weights, so
//! the "Time Order" view shows what each thread did when.
//!
//! Frames are shared between profiles: one per function, named as in the
//! flamegraph, with the binary as its `file`. Weights are nanoseconds
//! for clock events (a sample is one period) and off-CPU time, plain
//! counts (`unit: none`) otherwise. The profile shown first is the thread
//! with the most weight.

use std::collections::hash_map::Entry;
use std::io::{self, BufWriter, Write};

use flamerec_format::StackId;
use flamerec_symbolize::FuncId;
use rustc_hash::FxHashMap as HashMap;
use serde::{Serialize, Serializer};

use super::{no_timeline, Measure};
use crate::Profile;

/// The `$schema` every speedscope file names.
pub const SPEEDSCOPE_SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

/// Writes `profile` (folded with `keep_samples`) in speedscope's format.
pub fn write_speedscope<W: Write>(profile: &Profile, out: W) -> io::Result<()> {
    let t = profile.timeline.as_ref().ok_or_else(no_timeline)?;
    let (unit, scale) = match Measure::of(&profile.metadata) {
        Measure::Clock { period_ns } => ("nanoseconds", period_ns),
        Measure::OffCpu => ("nanoseconds", 1),
        Measure::Count => ("none", 1),
    };

    // Each distinct stack expands once, to shared frame indices.
    let mut frame_of: HashMap<FuncId, usize> = HashMap::default();
    let mut shared: Vec<FrameJson<'_>> = Vec::new();
    let mut stacks: HashMap<StackId, Vec<usize>> = HashMap::default();
    let mut per_thread: Vec<Vec<(StackId, u64)>> = vec![Vec::new(); t.threads.len()];
    let (mut frames, mut funcs) = (Vec::new(), Vec::new());
    for s in &t.samples {
        if let Entry::Vacant(slot) = stacks.entry(s.stack) {
            t.stack_functions(s.stack, &mut frames, &mut funcs);
            slot.insert(
                funcs
                    .iter()
                    .map(|&f| {
                        *frame_of.entry(f).or_insert_with(|| {
                            let (name, file) = t
                                .function(f)
                                .map_or(("", ""), |fu| (fu.name.as_str(), fu.module.as_str()));
                            shared.push(FrameJson { name, file });
                            shared.len() - 1
                        })
                    })
                    .collect(),
            );
        }
        if let Some(list) = per_thread.get_mut(s.thread as usize) {
            list.push((s.stack, s.weight.saturating_mul(scale)));
        }
    }

    let mut order: Vec<usize> = (0..t.threads.len()).collect();
    order.sort_by_key(|&i| t.threads.get(i).map(|th| (th.pid, th.tid)));
    let profiles: Vec<SampledProfile<'_>> = order
        .iter()
        .filter_map(|&i| {
            let th = t.threads.get(i)?;
            let samples = per_thread.get(i)?;
            let total = samples.iter().fold(0u64, |a, (_, w)| a.saturating_add(*w));
            Some(SampledProfile {
                kind: "sampled",
                name: format!("{} (pid {}, tid {})", th.name, th.pid, th.tid),
                unit,
                start_value: 0,
                end_value: total,
                samples: StackList {
                    samples,
                    stacks: &stacks,
                },
                weights: Weights(samples),
            })
        })
        .collect();
    let active = profiles
        .iter()
        .enumerate()
        .max_by_key(|(i, p)| (p.end_value, std::cmp::Reverse(*i)))
        .map_or(0, |(i, _)| i);
    let file = SpeedscopeFile {
        schema: SPEEDSCOPE_SCHEMA,
        exporter: format!("flamerec {}", env!("CARGO_PKG_VERSION")),
        name: match profile.metadata.command.is_empty() {
            true => "flamerec".to_string(),
            false => profile.metadata.command.join(" "),
        },
        active_profile_index: active,
        shared: Shared { frames: shared },
        profiles,
    };
    let mut out = BufWriter::new(out);
    serde_json::to_writer(&mut out, &file)?;
    out.write_all(b"\n")?;
    out.flush()
}

#[derive(Serialize)]
struct SpeedscopeFile<'a> {
    #[serde(rename = "$schema")]
    schema: &'static str,
    exporter: String,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    shared: Shared<'a>,
    profiles: Vec<SampledProfile<'a>>,
}

#[derive(Serialize)]
struct Shared<'a> {
    frames: Vec<FrameJson<'a>>,
}

#[derive(Serialize)]
struct FrameJson<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    file: &'a str,
}

#[derive(Serialize)]
struct SampledProfile<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: StackList<'a>,
    weights: Weights<'a>,
}

/// A thread's samples as lists of frame indices, root first, written
/// without building them all in memory.
struct StackList<'a> {
    samples: &'a [(StackId, u64)],
    stacks: &'a HashMap<StackId, Vec<usize>>,
}

impl Serialize for StackList<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        const EMPTY: &[usize] = &[];
        s.collect_seq(
            self.samples
                .iter()
                .map(|(stack, _)| self.stacks.get(stack).map_or(EMPTY, Vec::as_slice)),
        )
    }
}

struct Weights<'a>(&'a [(StackId, u64)]);

impl Serialize for Weights<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|(_, w)| w))
    }
}
