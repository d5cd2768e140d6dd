//! Symbolization: turns the distinct frames a profile uses into function
//! names, in parallel.
//!
//! Frames are grouped by module so each binary is read and parsed once;
//! modules are symbolized concurrently and big modules are also split into
//! chunks of addresses (rayon, on whatever pool the caller installed). The
//! result maps every frame to a list of functions, outermost first: today one
//! per frame, but the shape leaves room for inlined frames from DWARF.
//!
//! This module never drops a frame: whatever cannot be named becomes
//! `module+0xOFFSET`. It must not know about samples, roots or output formats.

mod elf;
mod kernel;

use std::collections::HashMap;
use std::path::Path;

use flamerec_format::{FrameId, ModuleId, ModuleKind, Tables};
use rayon::prelude::*;

use crate::names::{basename, sanitize, unresolved};
use elf::{ElfSymbols, Unusable};
use kernel::KernelTable;

/// Addresses per parallel work item inside one module.
const CHUNK: usize = 4096;

/// Index into [`Symbols::functions`].
pub(crate) type FuncId = u32;

/// A function as the summary and the folded text name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Function {
    /// Display name, already safe for folded text (and suffixed `_[k]` when asked).
    pub name: String,
    /// Module basename (`libc.so.6`, `[kernel.kallsyms]`).
    pub module: String,
}

/// How to name things.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NameOptions {
    /// Append `_[k]` to kernel frames.
    pub kernel_suffix: bool,
}

/// Names of the frames a profile uses.
#[derive(Debug, Default)]
pub(crate) struct Symbols {
    /// Every function some frame expands to.
    pub functions: Vec<Function>,
    /// Per frame id, the functions it stands for, outermost first; empty for
    /// frames the profile does not use.
    pub frames: Vec<Vec<FuncId>>,
    /// Problems worth telling the user about, one line each.
    pub warnings: Vec<String>,
}

/// What one module's symbolization produced, with module-local function ids.
struct ModuleOutcome {
    functions: Vec<Function>,
    frames: Vec<(FrameId, Vec<u32>)>,
    unusable: Option<Unusable>,
}

/// Symbolizes `used` (distinct frame ids) against `tables`.
pub(crate) fn symbolize(tables: &Tables, used: &[FrameId], opts: NameOptions) -> Symbols {
    let mut by_module: HashMap<ModuleId, Vec<(FrameId, u64)>> = HashMap::new();
    for &id in used {
        if let Some(f) = tables.frames.get(id as usize) {
            by_module.entry(f.module).or_default().push((id, f.address));
        }
    }
    let mut groups: Vec<(ModuleId, Vec<(FrameId, u64)>)> = by_module.into_iter().collect();
    groups.sort_unstable_by_key(|(m, _)| *m);
    for (_, frames) in &mut groups {
        frames.sort_unstable_by_key(|&(id, addr)| (addr, id));
    }

    let ktable = KernelTable::new(&tables.kernel_symbols);
    let outcomes: Vec<ModuleOutcome> = groups
        .par_iter()
        .map(|(module, frames)| symbolize_module(tables, *module, frames, &ktable, opts))
        .collect();

    merge(tables, groups, outcomes)
}

/// Interns module-local results into one function table and writes the
/// one-line warning about unusable binaries.
fn merge(
    tables: &Tables,
    groups: Vec<(ModuleId, Vec<(FrameId, u64)>)>,
    outcomes: Vec<ModuleOutcome>,
) -> Symbols {
    let mut out = Symbols {
        frames: vec![Vec::new(); tables.frames.len()],
        ..Default::default()
    };
    let mut ids: HashMap<Function, FuncId> = HashMap::new();
    let (mut bad_modules, mut mismatched, mut bad_frames) = (0usize, 0usize, 0usize);
    for ((_, frames), outcome) in groups.iter().zip(outcomes) {
        if let Some(why) = outcome.unusable {
            bad_modules += 1;
            bad_frames += frames.len();
            if why == Unusable::BuildIdMismatch {
                mismatched += 1;
            }
        }
        let global: Vec<FuncId> = outcome
            .functions
            .into_iter()
            .map(|f| {
                *ids.entry(f).or_insert_with_key(|f| {
                    out.functions.push(f.clone());
                    (out.functions.len() - 1) as FuncId
                })
            })
            .collect();
        for (frame, locals) in outcome.frames {
            if let Some(slot) = out.frames.get_mut(frame as usize) {
                *slot = locals
                    .iter()
                    .filter_map(|&l| global.get(l as usize).copied())
                    .collect();
            }
        }
    }
    if bad_modules > 0 {
        let s = if bad_modules == 1 { "y" } else { "ies" };
        out.warnings.push(format!(
            "{bad_modules} binar{s} missing, unreadable or changed since recording \
             ({mismatched} with a build id mismatch); {bad_frames} frames shown as module+0xOFFSET"
        ));
    }
    out
}

fn symbolize_module(
    tables: &Tables,
    module: ModuleId,
    frames: &[(FrameId, u64)],
    ktable: &KernelTable<'_>,
    opts: NameOptions,
) -> ModuleOutcome {
    let Some(m) = tables.modules.get(module as usize) else {
        return ModuleOutcome {
            functions: Vec::new(),
            frames: Vec::new(),
            unusable: None,
        };
    };
    let base = basename(&m.path);
    match m.kind {
        ModuleKind::File => {
            let named = elf::read_elf(Path::new(&m.path)).and_then(|data| {
                ElfSymbols::parse(&data, &m.build_id).map(|elf| file_frames(&elf, base, frames))
            });
            named.unwrap_or_else(|why| unresolved_frames(base, frames, Some(why)))
        }
        ModuleKind::Kernel => kernel_frames(ktable, base, frames, opts),
        // The vDSO image and anonymous (JIT) code are not on disk.
        _ => unresolved_frames(base, frames, None),
    }
}

/// Collects names so each distinct one gets one module-local id.
#[derive(Default)]
struct LocalNames {
    functions: Vec<Function>,
    ids: HashMap<String, u32>,
}

impl LocalNames {
    fn id(&mut self, name: String, module: &str) -> u32 {
        if let Some(&id) = self.ids.get(&name) {
            return id;
        }
        let id = self.functions.len() as u32;
        self.functions.push(Function {
            name: name.clone(),
            module: module.to_string(),
        });
        self.ids.insert(name, id);
        id
    }
}

fn file_frames(elf: &ElfSymbols<'_>, base: &str, frames: &[(FrameId, u64)]) -> ModuleOutcome {
    let hits: Vec<Option<usize>> = frames
        .par_chunks(CHUNK)
        .flat_map_iter(|c| c.iter().map(|&(_, addr)| elf.lookup(addr)))
        .collect();
    let mut wanted: Vec<usize> = hits.iter().flatten().copied().collect();
    wanted.sort_unstable();
    wanted.dedup();
    // Demangling is the costly part; each symbol once, in parallel.
    let demangled: Vec<Option<String>> = wanted
        .par_iter()
        .map(|&idx| elf.name(idx).map(|n| sanitize(&n)))
        .collect();
    let by_symbol: HashMap<usize, usize> =
        wanted.iter().enumerate().map(|(i, &s)| (s, i)).collect();

    let mut names = LocalNames::default();
    let mut out = Vec::with_capacity(frames.len());
    for (&(frame, addr), hit) in frames.iter().zip(hits) {
        let name = hit
            .and_then(|s| by_symbol.get(&s))
            .and_then(|&i| demangled.get(i).cloned().flatten())
            .unwrap_or_else(|| sanitize(&unresolved(base, addr)));
        out.push((frame, vec![names.id(name, base)]));
    }
    ModuleOutcome {
        functions: names.functions,
        frames: out,
        unusable: None,
    }
}

fn kernel_frames(
    ktable: &KernelTable<'_>,
    base: &str,
    frames: &[(FrameId, u64)],
    opts: NameOptions,
) -> ModuleOutcome {
    let mut functions: Vec<Function> = Vec::new();
    let mut ids: HashMap<(String, String), u32> = HashMap::new();
    let mut out = Vec::with_capacity(frames.len());
    for &(frame, addr) in frames {
        let (name, module) = match ktable.lookup(addr) {
            Some(sym) => (sanitize(&sym.name), kernel::module_name(sym)),
            None => (sanitize(&unresolved(base, addr)), base.to_string()),
        };
        let name = suffixed(name, opts);
        let id = *ids.entry((name, module)).or_insert_with_key(|(n, m)| {
            functions.push(Function {
                name: n.clone(),
                module: m.clone(),
            });
            (functions.len() - 1) as u32
        });
        out.push((frame, vec![id]));
    }
    ModuleOutcome {
        functions,
        frames: out,
        unusable: None,
    }
}

fn unresolved_frames(
    base: &str,
    frames: &[(FrameId, u64)],
    unusable: Option<Unusable>,
) -> ModuleOutcome {
    let mut names = LocalNames::default();
    let out = frames
        .iter()
        .map(|&(frame, addr)| {
            let name = sanitize(&unresolved(base, addr));
            (frame, vec![names.id(name, base)])
        })
        .collect();
    ModuleOutcome {
        functions: names.functions,
        frames: out,
        unusable,
    }
}

fn suffixed(mut name: String, opts: NameOptions) -> String {
    if opts.kernel_suffix {
        name.push_str("_[k]");
    }
    name
}
