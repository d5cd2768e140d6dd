//! node's interpreted JavaScript: without `--interpreted-frames-native-stack`
//! every interpreted function runs under V8's one interpreter entry
//! (`Builtins_InterpreterEntryTrampoline` in node's binary), which no perf
//! map or jitdump names per function; with it, each function gets a copy of
//! that entry named in the map. Samples of a process through that entry
//! are counted, so the flag can be advised with their share.

use std::ops::Range;

use flamerec_format::{Frame, Module, ModuleId, ModuleKind};

use super::JitNames;

/// V8's interpreter entry, as node's binary names it.
const INTERPRETER_ENTRY: &str = "Builtins_InterpreterEntryTrampoline";

/// Whether `m` is a node binary (`node`, Debian's `nodejs`), whose
/// interpreter entry is looked for.
fn is_node_binary(m: &Module) -> bool {
    m.kind == ModuleKind::File
        && m.path
            .rsplit('/')
            .next()
            .is_some_and(|base| base == "node" || base == "nodejs")
}

impl JitNames {
    /// A new module of the recording: a node binary's interpreter entry is
    /// found, as file offsets (read once per binary, from its symbols).
    pub(super) fn learn_interpreter_entry(&mut self, id: ModuleId, m: &Module) {
        if is_node_binary(m) {
            let entry = flamerec_symbolize::function_file_range(
                std::path::Path::new(&m.path),
                INTERPRETER_ENTRY,
            );
            if let Some(range) = entry {
                self.interpreter_entries.push((id, range));
            }
        }
    }

    /// A sample of `pid` with user `frames`: counted when one of them is
    /// in (or returns into) V8's interpreter entry.
    pub(super) fn count_interpreted(&mut self, pid: u32, frames: &[Frame]) {
        if self.interpreter_entries.is_empty() {
            return;
        }
        let inside = |f: &Frame, (id, r): &(ModuleId, Range<u64>)| {
            f.module == *id && r.start <= f.address && f.address <= r.end
        };
        let interpreted = frames
            .iter()
            .any(|f| self.interpreter_entries.iter().any(|e| inside(f, e)));
        if interpreted {
            *self.interpreted.entry(pid).or_default() += 1;
            self.comms.entry(pid).or_insert_with(|| super::comm_of(pid));
        }
    }
}
