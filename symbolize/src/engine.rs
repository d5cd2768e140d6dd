//! The engine behind [`symbolize`](crate::symbolize): groups frames by module, runs each module's
//! resolver in parallel (biggest binaries first), and interns the
//! module-local names into one function table. File modules are `files`';
//! kernel, JIT and unnamed frames are resolved here.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use flamerec_format::{FrameId, ModuleId, ModuleKind, Tables};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::cache::SymbolCache;
use crate::context::Context;
use crate::dwarf::Prefetch;
use crate::elf::debugfile;
use crate::files;
use crate::jit::JitMaps;
use crate::kernel::{self, KernelTable};
use crate::names::{basename, sanitize, sanitize_owned, unresolved};
use crate::outcome::{LocalNames, ModuleOutcome};
use crate::types::Unusable;
use crate::{Embedded, FuncId, Function, NameOptions, Symbols};

/// Symbolizes `used` (distinct frame ids) against `tables`, taking the names
/// of frames in `embedded` from there instead of from the binaries.
pub fn symbolize(
    tables: &Tables,
    used: &[FrameId],
    opts: &NameOptions,
    prefetch: &Prefetch,
    embedded: Option<&Embedded>,
) -> Symbols {
    let (outcomes, warnings) = per_module(tables, used, opts, prefetch, embedded, |m, f, c| {
        symbolize_module(tables, m, f, c)
    });
    let mut out = merge(tables, outcomes);
    out.warnings.extend(warnings);
    out
}

/// Whether naming `used` reads any binary: some frame of a file module has
/// no name in `embedded`. Without, [`symbolize`] runs on the calling thread
/// and never touches a thread pool.
pub fn reads_binaries(tables: &Tables, used: &[FrameId], embedded: Option<&Embedded>) -> bool {
    used.iter().any(|&id| {
        tables.frames.get(id as usize).is_some_and(|f| {
            is_file(tables, f.module) && !embedded.is_some_and(|e| e.contains_key(&id))
        })
    })
}

/// Runs `each` on every module's sorted frames, in parallel (biggest
/// binaries first), and returns the results in module order with the
/// warnings of reading perf maps and the first symbol cache error, if any. When no module reads a binary, they run in
/// turn on the calling thread.
fn per_module<T: Send>(
    tables: &Tables,
    used: &[FrameId],
    opts: &NameOptions,
    prefetch: &Prefetch,
    embedded: Option<&Embedded>,
    each: impl Fn(ModuleId, &[(FrameId, u64)], &Context<'_>) -> T + Sync,
) -> (Vec<T>, Vec<String>) {
    let mut by_module: FxHashMap<ModuleId, Vec<(FrameId, u64)>> = FxHashMap::default();
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

    let mut ctx = Context {
        ktable: KernelTable::new(&tables.kernel_symbols),
        jit: match &opts.perf_map_dir {
            Some(dir) if has_anonymous(tables, &groups) => JitMaps::load(dir, &opts.pids),
            _ => JitMaps::default(),
        },
        cache: opts.cache_dir.clone().map(SymbolCache::new),
        cache_error: Mutex::new(None),
        opts,
        prefetch,
        embedded: embedded.map(|e| by_frame(e, tables.frames.len())),
    };
    let embedded = ctx.embedded.as_deref();
    let needs: Vec<bool> = groups
        .iter()
        .map(|(m, frames)| needs_binary(tables, *m, embedded, frames))
        .collect();
    let mut done: Vec<(usize, T)> = if !needs.contains(&true) {
        // Names from the recording and the kernel table cost microseconds
        // per module: threads would cost more than they save, and a caller
        // outside any pool must not start rayon's global one.
        groups
            .iter()
            .enumerate()
            .map(|(i, (module, frames))| (i, each(*module, frames, &ctx)))
            .collect()
    } else {
        // Biggest binaries first, each worker taking the next one when done:
        // a huge debug file started last would otherwise be the whole wait.
        // A module the recording names entirely reads no file.
        let mut order: Vec<(u64, usize)> = groups
            .par_iter()
            .zip(&needs)
            .enumerate()
            .map(|(i, ((m, _), &needs))| {
                let cost = if needs {
                    estimated_cost(tables, *m, &opts.debug_dirs)
                } else {
                    0
                };
                (cost, i)
            })
            .collect();
        order.sort_unstable_by(|a, b| b.cmp(a));
        let next = AtomicUsize::new(0);
        (0..rayon::current_num_threads())
            .into_par_iter()
            .flat_map_iter(|_| {
                let mut mine = Vec::new();
                while let Some(&(_, i)) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if let Some((module, frames)) = groups.get(i) {
                        mine.push((i, each(*module, frames, &ctx)));
                    }
                }
                mine
            })
            .collect()
    };
    done.sort_unstable_by_key(|(i, _)| *i);
    let outcomes = done.into_iter().map(|(_, o)| o).collect();
    let mut warnings = std::mem::take(&mut ctx.jit.warnings);
    warnings.extend(ctx.cache_error.into_inner().ok().flatten());
    (outcomes, warnings)
}

/// The embedded names as a table indexed by frame id: one pass over the
/// map, where every lookup in it would hash.
fn by_frame(embedded: &Embedded, frames: usize) -> Vec<Option<&[Arc<str>]>> {
    let mut out = vec![None; frames];
    for (&frame, names) in embedded {
        if let Some(slot) = out.get_mut(frame as usize) {
            *slot = Some(names.as_slice());
        }
    }
    out
}

/// Bytes a module's symbolization may read: its file and build-id debug file.
fn estimated_cost(tables: &Tables, module: ModuleId, debug_dirs: &[PathBuf]) -> u64 {
    let Some(m) = tables.modules.get(module as usize) else {
        return 0;
    };
    if m.kind != ModuleKind::File {
        return 0;
    }
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |md| md.len());
    let debug: u64 = debug_dirs
        .iter()
        .filter_map(|d| debugfile::build_id_path(d, &m.build_id))
        .map(|p| size(&p))
        .sum();
    size(std::path::Path::new(&m.path)).saturating_add(debug)
}

/// Whether every frame has names in the recording.
fn all_named(embedded: Option<&[Option<&[Arc<str>]>]>, frames: &[(FrameId, u64)]) -> bool {
    embedded.is_some_and(|e| {
        frames
            .iter()
            .all(|&(id, _)| e.get(id as usize).is_some_and(Option::is_some))
    })
}

/// Whether module `m`'s frames need its binary: it is a file and some
/// frame has no names in the recording (the rule of [`reads_binaries`]).
fn needs_binary(
    tables: &Tables,
    m: ModuleId,
    embedded: Option<&[Option<&[Arc<str>]>]>,
    frames: &[(FrameId, u64)],
) -> bool {
    is_file(tables, m) && !all_named(embedded, frames)
}

/// Whether module `m` is a file on disk (not the kernel, JIT code or vDSO).
fn is_file(tables: &Tables, m: ModuleId) -> bool {
    tables
        .modules
        .get(m as usize)
        .is_some_and(|m| m.kind == ModuleKind::File)
}

fn has_anonymous(tables: &Tables, groups: &[(ModuleId, Vec<(FrameId, u64)>)]) -> bool {
    groups.iter().any(|(m, _)| {
        tables
            .modules
            .get(*m as usize)
            .is_some_and(|m| m.kind == ModuleKind::Anonymous)
    })
}

/// Interns module-local results into one function table and writes the
/// one-line warning about unusable binaries.
fn merge(tables: &Tables, outcomes: Vec<ModuleOutcome>) -> Symbols {
    let mut out = Symbols {
        frames: vec![Vec::new(); tables.frames.len()],
        ..Default::default()
    };
    let all: usize = outcomes.iter().map(|o| o.functions.len()).sum();
    let mut ids: FxHashMap<Function, FuncId> =
        FxHashMap::with_capacity_and_hasher(all, Default::default());
    let (mut bad_modules, mut mismatched, mut bad_frames) = (0usize, 0usize, 0usize);
    for outcome in outcomes {
        if let Some(why) = outcome.unusable {
            bad_modules += 1;
            bad_frames += outcome.bad_frames;
            if why == Unusable::BuildIdMismatch {
                mismatched += 1;
            }
        }
        let global: Vec<FuncId> = outcome
            .functions
            .into_iter()
            .map(|f| {
                let next = ids.len() as FuncId;
                *ids.entry(f).or_insert(next)
            })
            .collect();
        for (frame, mut locals) in outcome.frames {
            if let Some(slot) = out.frames.get_mut(frame as usize) {
                // Module-local ids become global ones in place.
                locals.retain_mut(|l| match global.get(*l as usize) {
                    Some(&g) => {
                        *l = g;
                        true
                    }
                    None => false,
                });
                *slot = locals;
            }
        }
    }
    // Ids were handed out in order: each key goes to its place, uncloned.
    let mut functions: Vec<Option<Function>> = vec![None; ids.len()];
    for (f, id) in ids {
        if let Some(slot) = functions.get_mut(id as usize) {
            *slot = Some(f);
        }
    }
    out.functions = functions.into_iter().flatten().collect();
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
    ctx: &Context<'_>,
) -> ModuleOutcome {
    let Some(m) = tables.modules.get(module as usize) else {
        return ModuleOutcome {
            functions: Vec::new(),
            frames: Vec::new(),
            unusable: None,
            bad_frames: 0,
        };
    };
    let base = basename(&m.path);
    match m.kind {
        ModuleKind::File => files::file_frames(m, base, frames, ctx),
        ModuleKind::Kernel => kernel_frames(&ctx.ktable, base, frames, ctx.opts),
        ModuleKind::Anonymous if !ctx.jit.is_empty() || ctx.embedded.is_some() => {
            anon_frames(ctx, base, frames)
        }
        // The vDSO image is not on disk.
        _ => unresolved_frames(base, frames, None),
    }
}

/// Anonymous memory (JIT code): the names the recorder embedded (it read
/// the runtimes' maps and dumps while they were written, by time), else
/// the perf maps found now, else `module+0xADDR`.
fn anon_frames(ctx: &Context<'_>, base: &str, frames: &[(FrameId, u64)]) -> ModuleOutcome {
    let jit: &JitMaps = &ctx.jit;
    let embedded = |id: FrameId| {
        let e = ctx.embedded.as_ref()?;
        e.get(id as usize)
            .copied()
            .flatten()
            .filter(|n| !n.is_empty())
    };
    let mut names = LocalNames::default();
    let out = frames
        .iter()
        .map(|&(frame, addr)| {
            if let Some(chain) = embedded(frame) {
                let ids = chain.iter().map(|n| names.id(&sanitize(n), base)).collect();
                return (frame, ids);
            }
            let name = match jit.lookup(addr) {
                Some(n) => sanitize(n),
                None => sanitize(&unresolved(base, addr)),
            };
            (frame, vec![names.id(&name, base)])
        })
        .collect();
    ModuleOutcome {
        functions: names.functions,
        frames: out,
        unusable: None,
        bad_frames: 0,
    }
}

fn kernel_frames(
    ktable: &KernelTable<'_>,
    base: &str,
    frames: &[(FrameId, u64)],
    opts: &NameOptions,
) -> ModuleOutcome {
    let mut functions: Vec<Function> = Vec::new();
    let mut ids: FxHashMap<(String, String), u32> = FxHashMap::default();
    // Many frames fall in one symbol: each symbol is spelled once.
    let mut by_symbol: FxHashMap<*const flamerec_format::KernelSymbol, u32> = FxHashMap::default();
    let mut out = Vec::with_capacity(frames.len());
    for &(frame, addr) in frames {
        let sym = ktable.lookup(addr);
        if let Some(&id) = sym.and_then(|s| by_symbol.get(&std::ptr::from_ref(s))) {
            out.push((frame, vec![id]));
            continue;
        }
        let (name, module) = match sym {
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
        if let Some(sym) = sym {
            by_symbol.insert(std::ptr::from_ref(sym), id);
        }
        out.push((frame, vec![id]));
    }
    ModuleOutcome {
        functions,
        frames: out,
        unusable: None,
        bad_frames: 0,
    }
}

fn unresolved_frames(
    base: &str,
    frames: &[(FrameId, u64)],
    unusable: Option<Unusable>,
) -> ModuleOutcome {
    // Frames come sorted by address, and each address has its own name:
    // no map is needed to give each name one id (`merge` unites names
    // that still coincide).
    let mut functions: Vec<Function> = Vec::new();
    let mut last = None;
    let module = base.to_string();
    let out = frames
        .iter()
        .map(|&(frame, addr)| {
            if last != Some(addr) || functions.is_empty() {
                last = Some(addr);
                functions.push(Function {
                    name: sanitize_owned(unresolved(base, addr)),
                    module: module.clone(),
                });
            }
            (frame, vec![(functions.len() - 1) as u32])
        })
        .collect();
    ModuleOutcome {
        functions,
        frames: out,
        bad_frames: if unusable.is_some() { frames.len() } else { 0 },
        unusable,
    }
}

fn suffixed(mut name: String, opts: &NameOptions) -> String {
    if opts.kernel_suffix {
        name.push_str("_[k]");
    }
    name
}
