//! Reading one input — a `.frec` recording or perf.data (folded by
//! `flamerec-fold`), or folded text (read by fold's input layer, so `view`,
//! `fold` and `diff` accept the same inputs, `-` for standard input) — into
//! stacks plus what the viewer shows about their roots.
//!
//! This module owns input detection and splitting per-thread roots. It must
//! not know how the viewer lays stacks out; that is `tree`'s job.

use std::collections::HashMap;
use std::path::Path;

use flamerec_fold::input::{weight_unit, Input};
use flamerec_fold::{FoldOptions, Profile};

use crate::ViewerError;

/// What the viewer knows about a root frame (the first frame of a line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RootInfo {
    /// The thread's name, what `flamerec fold` puts first by default.
    pub name: String,
    /// `comm-PID` of its process (the root itself for folded text).
    pub process: String,
    /// Process id, when known.
    pub pid: Option<u32>,
    /// Thread id, when known.
    pub tid: Option<u32>,
}

/// One input, read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Source {
    /// Folded stacks `root;frame;...;leaf` with their weight.
    pub stacks: Vec<(String, u64)>,
    /// Per root frame of `stacks`; roots missing here stand for themselves.
    pub roots: HashMap<String, RootInfo>,
    /// What one unit of weight is (`samples`, `ns`).
    pub unit: String,
    /// (label, value) lines describing the input, for the page's info panel.
    pub info: Vec<(String, String)>,
    /// Things the user should know, one line each.
    pub warnings: Vec<String>,
}

/// Reads `path` (`-`: standard input) through fold's input layer: a
/// `.frec` recording or perf.data (folded by fold with `opts`, one root per
/// thread) or folded text, by its first bytes.
pub(crate) fn read(path: &Path, opts: &FoldOptions) -> Result<Source, ViewerError> {
    let input = flamerec_fold::input::open(path)?;
    if input.kind().is_recording() {
        return from_recording(input, opts);
    }
    // Folded text, read by the same rules as `flamerec diff` and `fold`.
    let label = input.label().to_path_buf();
    let stacks = input.into_folded()?;
    let total = stacks.iter().fold(0u64, |a, (_, w)| a.saturating_add(*w));
    Ok(Source {
        info: vec![
            ("input".into(), label.display().to_string()),
            ("samples".into(), total.to_string()),
            ("stacks".into(), stacks.len().to_string()),
        ],
        stacks,
        roots: HashMap::new(),
        unit: "samples".into(),
        warnings: Vec::new(),
    })
}

/// Reads several inputs as one profile: runs of the same program merged,
/// their stacks summed (a unit that differs from the first input's is an
/// error: samples and nanoseconds do not add up).
pub(crate) fn read_all(paths: &[&Path], opts: &FoldOptions) -> Result<Source, ViewerError> {
    let mut iter = paths.iter();
    let Some(first) = iter.next() else {
        return Ok(Source::default());
    };
    let mut out = read(first, opts)?;
    if paths.len() == 1 {
        return Ok(out);
    }
    let mut sum: HashMap<String, u64> = out.stacks.drain(..).collect();
    for path in iter {
        let next = read(path, opts)?;
        if next.unit != out.unit {
            return Err(ViewerError::Units {
                first: first.to_path_buf(),
                first_unit: out.unit,
                other: path.to_path_buf(),
                other_unit: next.unit,
            });
        }
        for (line, w) in next.stacks {
            let e = sum.entry(line).or_insert(0);
            *e = e.saturating_add(w);
        }
        for (root, info) in next.roots {
            out.roots.entry(root).or_insert(info);
        }
        out.warnings.extend(next.warnings);
    }
    let mut stacks: Vec<(String, u64)> = sum.into_iter().collect();
    stacks.sort_unstable();
    out.stacks = stacks;
    out.info = vec![
        ("inputs".into(), paths.len().to_string()),
        (
            "samples".into(),
            out.stacks.iter().map(|s| s.1).sum::<u64>().to_string(),
        ),
        ("stacks".into(), out.stacks.len().to_string()),
    ];
    Ok(out)
}

/// Folds a recording with one root per thread, so the page can filter and
/// group by thread, process or name.
fn from_recording(input: Input, opts: &FoldOptions) -> Result<Source, ViewerError> {
    let opts = FoldOptions {
        per_thread: true,
        ..opts.clone()
    };
    let path = input.label().to_path_buf();
    let path = path.as_path();
    let profile = flamerec_fold::fold_input(input, &opts, &Default::default())?;
    let mut warnings = Vec::new();
    if let Some(d) = &profile.damage {
        warnings.push(format!("{}: {d}", path.display()));
    }
    warnings.extend(profile.warnings.iter().cloned());
    let roots = thread_roots(&profile);
    let info = recording_info(path, &profile);
    let unit = weight_unit(&profile.metadata).to_string();
    Ok(Source {
        stacks: profile.stacks.into_text(),
        roots,
        unit,
        info,
        warnings,
    })
}

/// Splits fold's per-thread roots `comm-PID/TID` back into their parts.
fn thread_roots(profile: &Profile) -> HashMap<String, RootInfo> {
    let process_names: HashMap<u32, &str> = profile
        .processes
        .iter()
        .map(|p| (p.pid, p.comm.as_str()))
        .collect();
    let mut roots = HashMap::new();
    for root in profile.stacks.roots() {
        if roots.contains_key(root) {
            continue;
        }
        if let Some(info) = parse_thread_root(root, &process_names) {
            roots.insert(root.to_string(), info);
        }
    }
    roots
}

fn parse_thread_root(root: &str, process_names: &HashMap<u32, &str>) -> Option<RootInfo> {
    let (head, tid) = root.rsplit_once('/')?;
    let (name, pid) = head.rsplit_once('-')?;
    let pid: u32 = pid.parse().ok()?;
    let tid: u32 = tid.parse().ok()?;
    let pname = process_names.get(&pid).copied().unwrap_or(name);
    Some(RootInfo {
        name: name.to_string(),
        process: format!("{pname}-{pid}"),
        pid: Some(pid),
        tid: Some(tid),
    })
}

fn recording_info(path: &Path, p: &Profile) -> Vec<(String, String)> {
    let m = &p.metadata;
    let mut info = vec![("input".to_string(), path.display().to_string())];
    if !m.command.is_empty() {
        info.push(("command".into(), m.command.join(" ")));
    }
    info.push(("event".into(), m.event.clone()));
    if m.frequency_hz > 0 {
        info.push(("frequency".into(), format!("{} Hz", m.frequency_hz)));
    }
    info.push(("call graph".into(), m.call_graph.clone()));
    info.push((
        "duration".into(),
        format!("{:.2} s", p.duration_ns as f64 / 1e9),
    ));
    info.push(("samples".into(), p.samples.to_string()));
    info.push(("lost samples".into(), p.lost_samples.to_string()));
    info.push(("processes".into(), p.processes.len().to_string()));
    if !m.host.is_empty() {
        info.push(("host".into(), m.host.clone()));
    }
    info.push((
        "complete".into(),
        if p.damage.is_none() { "yes" } else { "no" }.into(),
    ));
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_roots_split_into_name_process_and_ids() {
        let names: HashMap<u32, &str> = [(7, "main-proc")].into_iter().collect();
        let r = parse_thread_root("my-worker-7/9", &names).expect("parses");
        assert_eq!(r.name, "my-worker");
        assert_eq!(r.process, "main-proc-7");
        assert_eq!((r.pid, r.tid), (Some(7), Some(9)));
        assert!(parse_thread_root("plain", &names).is_none());
        assert!(parse_thread_root("a-b/c", &names).is_none());
    }
}
