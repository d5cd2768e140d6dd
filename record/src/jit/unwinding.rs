//! JIT code made known to the unwinder: loads with their own unwind
//! tables, and CPython's perf trampolines (by their length, or found by
//! their bytes in a CPython's executable arenas).

use std::ops::Range;

use flamerec_unwind::{Bytes, JitTables, StackUnwinder, TrampolineShape};

use super::Sources;
use crate::pynames::PY_PREFIX;

/// Tells the unwinder about the code `s` learned since the last time:
/// loads with their own tables, and CPython's trampolines by their length.
pub(super) fn register(pid: u32, s: &mut Sources, u: &mut StackUnwinder) {
    for (d, done) in &mut s.dumps {
        for l in d.loads().get(*done..).unwrap_or_default() {
            if let Some(t) = &l.unwind {
                let span = |at: u64, b: &std::sync::Arc<Vec<u8>>| {
                    (at..at.saturating_add(b.len() as u64), Bytes(b.clone()))
                };
                let tables = JitTables {
                    eh_frame: span(t.eh_frame_addr, &t.eh_frame),
                    eh_frame_hdr: t
                        .eh_frame_hdr
                        .as_ref()
                        .map(|h| span(t.eh_frame_hdr_addr, h)),
                };
                u.add_jit_code(pid, l.start..l.end, tables);
            } else if l.name.starts_with(PY_PREFIX) {
                if let Some(shape) = TrampolineShape::from_len(l.end - l.start) {
                    u.add_trampoline(pid, l.start, shape);
                }
            }
        }
        *done = d.loads().len();
    }
    let entries = s.map.entries();
    for e in entries.get(s.map_done..).unwrap_or_default() {
        if e.name.starts_with(PY_PREFIX) {
            if let Some(shape) = TrampolineShape::from_len(e.end - e.start) {
                u.add_trampoline(pid, e.start, shape);
            }
        }
    }
    s.map_done = entries.len();
}

/// The most bytes of one executable mapping searched for trampolines:
/// CPython's arenas are 16 pages.
const MAX_ARENA: u64 = 4 << 20;

/// Registers the CPython perf trampolines in `range`, anonymous executable
/// memory of CPython process `pid`, read from the process: CPython fills
/// each arena with copies of its trampoline, 16-byte aligned, before it
/// makes the arena executable, and never writes it again. Found by their
/// bytes, they are stepped from the first sample, before the perf map line
/// or jitdump load naming them is read (3.13's `-X perf_jit` buffers its
/// dump: its loads come after the samples that ran them). Bytes that are a
/// trampoline's instructions unwind as those instructions, whoever wrote
/// them.
pub(super) fn find_trampolines(pid: u32, range: Range<u64>, u: &mut StackUnwinder) {
    let len = (range.end.saturating_sub(range.start)).min(MAX_ARENA) as usize;
    let mut code = vec![0; len];
    let Ok(n) = flamerec_perf::sys::read_remote(pid, range.start, &mut code) else {
        return;
    };
    code.truncate(n);
    for at in (0..code.len()).step_by(16) {
        if let Some(shape) = TrampolineShape::starting(&code[at..]) {
            u.add_trampoline(pid, range.start + at as u64, shape);
        }
    }
}
