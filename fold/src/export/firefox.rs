//! The Firefox Profiler's processed profile format, gzipped JSON, built
//! with `fxprof-processed-profile` (the crate samply writes it with), so
//! profiler.firefox.com's "Load a profile from file" opens it.
//!
//! One process per pid, one thread track per thread, samples at their
//! times. Frames are labels named as in the flamegraph, in a "Kernel" or
//! "User" category by the code they sample, so the profile is already
//! symbolicated and the viewer asks no symbol server.
//!
//! Weights: a clock sample weighs 1 and reports one period of CPU (the
//! activity graph); other events weigh their count. Off-CPU samples are
//! durations, which the processed format calls `tracing-ms`; the crate
//! takes whole numbers only, so their weights are written as fractional
//! milliseconds into the JSON it produces.

use std::io::{self, BufWriter, Write};

use flamerec_format::StackId;
use flate2::write::GzEncoder;
use flate2::Compression;
use fxprof_processed_profile as fx;
use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, FrameFlags, FrameInfo, ProcessHandle,
    ReferenceTimestamp, SamplingInterval, StackHandle, ThreadHandle, Timestamp,
};
use rustc_hash::FxHashMap as HashMap;

use super::{no_timeline, Measure, Timeline};
use crate::Profile;

/// Writes `profile` (folded with `keep_samples`) as a gzipped Firefox
/// Profiler profile.
pub fn write_firefox<W: Write>(profile: &Profile, out: W) -> io::Result<()> {
    let t = profile.timeline.as_ref().ok_or_else(no_timeline)?;
    let meta = &profile.metadata;
    let measure = Measure::of(meta);
    let interval = match (measure, meta.frequency_hz) {
        (Measure::Clock { period_ns }, _) => SamplingInterval::from_nanos(period_ns),
        (_, hz) if hz > 0 => SamplingInterval::from_nanos((1_000_000_000 / hz).max(1)),
        _ => SamplingInterval::from_millis(1),
    };
    let product = match meta.command.is_empty() {
        true => "flamerec".to_string(),
        false => meta.command.join(" "),
    };
    let start = ReferenceTimestamp::from_millis_since_unix_epoch(meta.start_unix_ns as f64 / 1e6);
    let mut p = fx::Profile::new(&product, start, interval);
    if !meta.kernel_release.is_empty() {
        p.set_os_name(&format!("Linux {}", meta.kernel_release));
    }
    p.set_symbolicated(true);
    let user: CategoryPairHandle = p.add_category("User", CategoryColor::Yellow).into();
    let kernel: CategoryPairHandle = p.add_category("Kernel", CategoryColor::Orange).into();

    let tracks = Tracks::new(&mut p, t);
    let mut stacks: HashMap<(u32, StackId), Option<StackHandle>> = HashMap::default();
    let (mut frames, mut infos) = (Vec::new(), Vec::new());
    let mut tracing_ms: Vec<Vec<f64>> = vec![Vec::new(); t.threads.len()];
    for s in &t.samples {
        let Some(Some(thread)) = tracks.threads.get(s.thread as usize).copied() else {
            continue;
        };
        let stack = *stacks.entry((s.thread, s.stack)).or_insert_with(|| {
            t.stack_frames(s.stack, &mut frames);
            infos.clear();
            for &f in &frames {
                let category_pair = if t.is_kernel(f) { kernel } else { user };
                for &func in t.frame_functions(f) {
                    let name = t.function(func).map_or("", |fu| fu.name.as_str());
                    infos.push(FrameInfo {
                        frame: fx::Frame::Label(p.intern_string(name)),
                        category_pair,
                        flags: FrameFlags::empty(),
                    });
                }
            }
            p.intern_stack_frames(thread, infos.drain(..))
        });
        let time = Timestamp::from_nanos_since_reference(s.time_ns);
        let (weight, cpu) = match measure {
            Measure::Clock { period_ns } => (
                s.weight,
                CpuDelta::from_nanos(s.weight.saturating_mul(period_ns)),
            ),
            Measure::OffCpu => {
                if let Some(w) = tracing_ms.get_mut(s.thread as usize) {
                    w.push(s.weight as f64 / 1e6);
                }
                (1, CpuDelta::ZERO)
            }
            Measure::Count => (s.weight, CpuDelta::ZERO),
        };
        let weight = i32::try_from(weight).unwrap_or(i32::MAX);
        p.add_sample(thread, time, stack, cpu, weight);
    }

    let mut gz = GzEncoder::new(BufWriter::new(out), Compression::default());
    if measure == Measure::OffCpu {
        let mut json = serde_json::to_value(&p).map_err(io::Error::other)?;
        set_tracing_ms(&mut json, &tracks.keys, &tracing_ms)?;
        serde_json::to_writer(&mut gz, &json)?;
    } else {
        serde_json::to_writer(&mut gz, &p)?;
    }
    gz.finish()?.flush()
}

/// The processes and threads of a timeline, added to a profile.
struct Tracks {
    /// Per timeline thread (`None` for one without samples, which the
    /// aggregation never makes).
    threads: Vec<Option<ThreadHandle>>,
    /// Per timeline thread, the `(pid, tid)` strings the crate writes for it.
    keys: Vec<(String, String)>,
}

impl Tracks {
    fn new(p: &mut fx::Profile, t: &Timeline) -> Tracks {
        // First and last sample time per thread (samples are in time order).
        let mut span: Vec<Option<(u64, u64)>> = vec![None; t.threads.len()];
        for s in &t.samples {
            if let Some(sp) = span.get_mut(s.thread as usize) {
                *sp = Some(sp.map_or((s.time_ns, s.time_ns), |(a, _)| (a, s.time_ns)));
            }
        }
        let mut order: Vec<usize> = (0..t.threads.len()).collect();
        order.sort_by_key(|&i| t.threads.get(i).map(|th| (th.pid, th.tid)));
        let mut processes: HashMap<u32, ProcessHandle> = HashMap::default();
        // The crate tells reused tids apart by a suffix: `1234`, `1234.1`.
        let mut tid_uses: HashMap<u32, u32> = HashMap::default();
        let mut threads = vec![None; t.threads.len()];
        let mut keys = vec![(String::new(), String::new()); t.threads.len()];
        let ts = Timestamp::from_nanos_since_reference;
        for i in order {
            let (Some(th), Some(Some((first, last)))) = (t.threads.get(i), span.get(i).copied())
            else {
                continue;
            };
            let process = *processes.entry(th.pid).or_insert_with(|| {
                let first_of_process = t
                    .threads
                    .iter()
                    .zip(&span)
                    .filter(|(o, _)| o.pid == th.pid)
                    .filter_map(|(_, sp)| sp.map(|(a, _)| a))
                    .min()
                    .unwrap_or(first);
                p.add_process(&th.process, th.pid, ts(first_of_process))
            });
            let handle = p.add_thread(process, th.tid, ts(first), th.tid == th.pid);
            p.set_thread_name(handle, &th.name);
            p.set_thread_end_time(handle, ts(last));
            let uses = tid_uses.entry(th.tid).or_insert(0);
            let tid = match *uses {
                0 => th.tid.to_string(),
                n => format!("{}.{n}", th.tid),
            };
            *uses += 1;
            if let (Some(slot), Some(key)) = (threads.get_mut(i), keys.get_mut(i)) {
                *slot = Some(handle);
                *key = (th.pid.to_string(), tid);
            }
        }
        if let Some(heaviest) = heaviest_thread(t) {
            if let Some(Some(h)) = threads.get(heaviest) {
                p.add_initial_selected_thread(*h);
            }
        }
        Tracks { threads, keys }
    }
}

/// The timeline thread with the most weight (the first of equals).
fn heaviest_thread(t: &Timeline) -> Option<usize> {
    let mut weight = vec![0u64; t.threads.len()];
    for s in &t.samples {
        if let Some(w) = weight.get_mut(s.thread as usize) {
            *w = w.saturating_add(s.weight);
        }
    }
    let max = weight.iter().copied().max()?;
    weight.iter().position(|&w| w == max)
}

/// Makes the samples of every thread in the profile JSON `tracing-ms`
/// with the given fractional weights, found by the thread's pid and tid.
fn set_tracing_ms(
    json: &mut serde_json::Value,
    keys: &[(String, String)],
    weights: &[Vec<f64>],
) -> io::Result<()> {
    let by_key: HashMap<(&str, &str), &Vec<f64>> = keys
        .iter()
        .map(|(pid, tid)| (pid.as_str(), tid.as_str()))
        .zip(weights)
        .collect();
    let threads = json
        .get_mut("threads")
        .and_then(|t| t.as_array_mut())
        .ok_or_else(|| io::Error::other("the Firefox profile has no thread list"))?;
    for thread in threads {
        let key = |k: &str| thread.get(k).and_then(|v| v.as_str()).unwrap_or_default();
        let (pid, tid) = (key("pid").to_string(), key("tid").to_string());
        let w = by_key.get(&(pid.as_str(), tid.as_str())).ok_or_else(|| {
            io::Error::other(format!(
                "no weights for thread {pid}/{tid} of the Firefox profile"
            ))
        })?;
        let samples = thread
            .get_mut("samples")
            .and_then(|s| s.as_object_mut())
            .ok_or_else(|| io::Error::other(format!("thread {pid}/{tid} has no samples")))?;
        let len = samples.get("length").and_then(|l| l.as_u64());
        if len != Some(w.len() as u64) {
            return Err(io::Error::other(format!(
                "thread {pid}/{tid} has {len:?} samples in the Firefox profile, {} weights",
                w.len()
            )));
        }
        samples.insert("weightType".into(), "tracing-ms".into());
        samples.insert("weight".into(), serde_json::json!(w));
    }
    Ok(())
}
