//! Recording begins: the command started is named, or what already runs
//! (attached, system-wide, a cgroup) is described from /proc, before and
//! after the events are enabled.

use std::collections::HashSet;
use std::io;
use std::path::Path;

use flamerec_perf::procfs;
use flamerec_symbolize::live::exec_maps;

use crate::rings::Event;
use crate::state::State;
use crate::sys;
use crate::{RecordError, Target};

/// Recording begins: the command started is named, or what runs already
/// is described and the events enabled (then described again: what started
/// meanwhile left no record); the command's pid.
pub(super) fn begin<W: io::Write>(
    st: &mut State<W>,
    events: &[Event],
    target: &Target,
    started_child: Option<(i32, &Path)>,
) -> Result<Option<i32>, RecordError> {
    if let Some((pid, program)) = started_child {
        let comm = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        st.command_started(pid as u32, &truncate_comm(&comm));
        return Ok(Some(pid));
    }
    let described = describe_running(st, target, &HashSet::new());
    for e in events {
        sys::enable(&e.fd).map_err(|e| RecordError::sys("enabling perf events", e))?;
    }
    // Processes started between the first look and the events' enabling (a
    // child forked and exec'd meanwhile) left no record: they are
    // described now, from /proc.
    describe_running(st, target, &described);
    Ok(None)
}

/// Attached, system-wide or a cgroup: the names and executable mappings of
/// what runs now, from /proc, but the processes `done` (described before);
/// returns every process described so far. With `--pid`, the processes
/// given and, once `done` is not empty, their descendants (started while
/// the events were set up, before they recorded anything of them).
fn describe_running<W: io::Write>(
    st: &mut State<W>,
    target: &Target,
    done: &HashSet<u32>,
) -> HashSet<u32> {
    let pids = match target {
        Target::Pids(p) if done.is_empty() => p.clone(),
        Target::Pids(p) => procfs::descendants(p),
        Target::Cgroup(name) => procfs::view::cgroup_dir(name)
            .map(|dir| procfs::view::processes_in(&dir))
            .unwrap_or_default(),
        _ => procfs::all_pids().unwrap_or_default(),
    };
    let own = sys::getpid();
    if matches!(target, Target::System) && done.is_empty() {
        st.synth_comm(0, 0, "swapper");
    }
    let mut described = done.clone();
    for p in pids {
        if p == own && !matches!(target, Target::Pids(_)) || !described.insert(p) {
            continue;
        }
        for t in procfs::threads_of(p).unwrap_or_default() {
            if let Ok(name) = procfs::comm_of(p, t) {
                st.synth_comm(p, t, &name);
            }
        }
        for m in exec_maps(p) {
            st.synth_mapping(p, m.start, m.end, m.pgoff, &m.path);
        }
    }
    described
}

/// The kernel keeps 15 bytes of a task name.
fn truncate_comm(s: &str) -> String {
    let mut end = s.len().min(15);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}
