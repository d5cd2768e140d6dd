//! Several recordings folded into one profile: runs of the same benchmark,
//! or the same program on several hosts, as users used to merge by
//! concatenating folded text. It owns what adds up (stacks, functions,
//! samples, time) and what must agree (the event), and does no I/O.

use rustc_hash::FxHashMap as HashMap;

use crate::{input, FoldError, FunctionStats, Profile};

/// What a profile records, for a message: its event, or its unit for
/// folded text.
fn what(meta: &flamerec_format::Metadata) -> String {
    match meta.event.as_str() {
        "" => format!("folded {}", input::weight_unit(meta)),
        event => event.to_string(),
    }
}

/// Merges `profiles` (folded from the recordings `labels`, in that order)
/// into one: stacks, per-function and per-process weights add up; samples,
/// lost samples and durations add up; the first recording's metadata
/// stands for all; warnings and damage are kept, named by their file.
/// Recordings of different events cannot be added: that is an error.
pub fn merge_profiles(mut profiles: Vec<(String, Profile)>) -> Result<Profile, FoldError> {
    if profiles.len() <= 1 {
        return Ok(profiles.pop().map(|(_, p)| p).unwrap_or_default());
    }
    // Folded text names no event (its metadata's is empty): it adds to
    // recordings of any event counted in samples.
    let (first_label, first) = &profiles[0];
    for (label, p) in &profiles[1..] {
        let (a, b) = (&first.metadata, &p.metadata);
        let events_differ = !a.event.is_empty() && !b.event.is_empty() && a.event != b.event;
        if events_differ || input::weight_unit(a) != input::weight_unit(b) {
            return Err(FoldError::Mismatch {
                first: first_label.clone(),
                first_event: what(a),
                other: label.clone(),
                other_event: what(b),
            });
        }
    }
    // The first recording's metadata stands for all, folded text's only
    // when there is no recording.
    if let Some(i) = profiles
        .iter()
        .position(|(_, p)| !p.metadata.event.is_empty())
    {
        let meta = profiles[i].1.metadata.clone();
        profiles[0].1.metadata = meta;
    }
    let mut iter = profiles.into_iter();
    let (first_label, mut out) = iter.next().expect("two or more profiles");
    let several = |label: &str, w: &str| format!("{label}: {w}");
    out.warnings = out
        .warnings
        .iter()
        .map(|w| several(&first_label, w))
        .collect();
    if let Some(d) = out.damage.take() {
        out.warnings
            .insert(0, several(&first_label, &d.to_string()));
    }
    let mut stacks: HashMap<String, u64> = std::mem::take(&mut out.stacks)
        .into_text()
        .into_iter()
        .collect();
    let mut functions: HashMap<(String, String), (u64, u64)> = out
        .functions
        .drain(..)
        .map(|f| ((f.name, f.module), (f.self_weight, f.total_weight)))
        .collect();
    for (label, p) in iter {
        if let Some(d) = &p.damage {
            out.warnings.push(several(&label, &d.to_string()));
        }
        out.warnings
            .extend(p.warnings.iter().map(|w| several(&label, w)));
        for (line, w) in p.stacks.into_text() {
            let e = stacks.entry(line).or_insert(0);
            *e = e.saturating_add(w);
        }
        for f in p.functions {
            let e = functions.entry((f.name, f.module)).or_insert((0, 0));
            e.0 = e.0.saturating_add(f.self_weight);
            e.1 = e.1.saturating_add(f.total_weight);
        }
        out.samples = out.samples.saturating_add(p.samples);
        out.total_weight = out.total_weight.saturating_add(p.total_weight);
        out.lost_samples = out.lost_samples.saturating_add(p.lost_samples);
        out.duration_ns = out.duration_ns.saturating_add(p.duration_ns);
        out.processes.extend(p.processes);
        out.totals = match (out.totals.take(), p.totals) {
            (Some(mut a), Some(b)) => {
                a.samples = a.samples.saturating_add(b.samples);
                a.weight = a.weight.saturating_add(b.weight);
                a.lost_samples = a.lost_samples.saturating_add(b.lost_samples);
                a.duration_ns = a.duration_ns.saturating_add(b.duration_ns);
                a.processes = a.processes.saturating_add(b.processes);
                a.threads = a.threads.saturating_add(b.threads);
                Some(a)
            }
            _ => None,
        };
        out.timeline = match (out.timeline.take(), p.timeline) {
            (Some(mut a), Some(b)) => {
                a.append(b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
    let mut stacks: Vec<(String, u64)> = stacks.into_iter().collect();
    stacks.sort_unstable();
    out.stacks = stacks.into();
    let mut functions: Vec<FunctionStats> = functions
        .into_iter()
        .map(
            |((name, module), (self_weight, total_weight))| FunctionStats {
                name,
                module,
                self_weight,
                total_weight,
            },
        )
        .collect();
    functions.sort_by(FunctionStats::order);
    out.functions = functions;
    out.processes
        .sort_by(|a, b| b.weight.cmp(&a.weight).then(a.pid.cmp(&b.pid)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProcessStats;

    fn profile(event: &str, stacks: &[(&str, u64)], fs: &[(&str, u64, u64)]) -> Profile {
        let mut p = Profile::default();
        p.metadata.event = event.to_string();
        p.stacks = stacks
            .iter()
            .map(|(s, w)| (s.to_string(), *w))
            .collect::<Vec<_>>()
            .into();
        p.functions = fs
            .iter()
            .map(|&(name, s, t)| FunctionStats {
                name: name.to_string(),
                module: "m".to_string(),
                self_weight: s,
                total_weight: t,
            })
            .collect();
        p.samples = stacks.iter().map(|s| s.1).sum();
        p.total_weight = p.samples;
        p.processes = vec![ProcessStats {
            pid: 1,
            comm: "p".into(),
            samples: p.samples,
            weight: p.samples,
        }];
        p
    }

    #[test]
    fn stacks_functions_and_samples_add_up() {
        let a = profile(
            "cpu-clock",
            &[("p;a", 3), ("p;b", 1)],
            &[("a", 3, 3), ("b", 1, 1)],
        );
        let b = profile(
            "cpu-clock",
            &[("p;b", 2), ("p;c", 5)],
            &[("b", 2, 2), ("c", 5, 5)],
        );
        let m = merge_profiles(vec![("a.frec".into(), a), ("b.frec".into(), b)]).unwrap();
        assert_eq!(
            m.stacks.clone().into_text(),
            vec![("p;a".into(), 3), ("p;b".into(), 3), ("p;c".into(), 5)]
        );
        assert_eq!((m.samples, m.total_weight), (11, 11));
        let names: Vec<(&str, u64)> = m
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.total_weight))
            .collect();
        assert_eq!(names, [("c", 5), ("a", 3), ("b", 3)]);
        assert_eq!(m.processes.len(), 2);
    }

    #[test]
    fn different_events_are_an_error_naming_both_files() {
        let a = profile("cpu-clock", &[("p;a", 1)], &[]);
        let b = profile("off-cpu", &[("p;a", 1)], &[]);
        let e = merge_profiles(vec![("a.frec".into(), a), ("b.frec".into(), b)]).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("a.frec") && e.contains("b.frec") && e.contains("off-cpu"),
            "{e}"
        );
    }
}
