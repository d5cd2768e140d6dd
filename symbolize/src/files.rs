//! Frames of file modules (mapped ELF binaries): names from the symbol
//! cache when it knows the address, else from the binary — checked against
//! the recorded build id, with DWARF from a separate debug file when it has
//! none itself — and then added to the cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use flamerec_format::{FrameId, Module};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use symbolic_debuginfo::elf::ElfObject;

use crate::cache::AddressTable;
use crate::elf::{self, debugfile};
use crate::engine::{Context, LocalNames, ModuleOutcome};
use crate::names::{sanitize, sanitized, unresolved};
use crate::symdata::Binary;
use crate::types::{RawName, Unusable};

/// Names the frames (`(frame, file offset)`, sorted by offset) of module `m`:
/// from the names embedded in the recording where it has them, else from
/// the symbol cache and the binary.
pub(crate) fn file_frames(
    m: &Module,
    base: &str,
    frames: &[(FrameId, u64)],
    ctx: &Context<'_>,
) -> ModuleOutcome {
    let embedded_names = |id: FrameId| {
        let e = ctx.embedded.as_ref()?;
        e.get(id as usize).copied().flatten()
    };
    let (embedded, frames): (Vec<_>, Vec<_>) = match &ctx.embedded {
        Some(_) => frames
            .iter()
            .map(|&(id, addr)| (id, addr, embedded_names(id)))
            .partition(|(_, _, names)| names.is_some()),
        None => (
            Vec::new(),
            frames.iter().map(|&(id, addr)| (id, addr, None)).collect(),
        ),
    };
    let mut offsets: Vec<u64> = frames.iter().map(|&(_, off, _)| off).collect();
    offsets.dedup();
    let (table, unusable) = if offsets.is_empty() {
        (AddressTable::default(), None)
    } else {
        names_of(m, &offsets, ctx)
    };
    let inline = ctx.opts.inline;
    let shown = |names: &[RawName]| -> usize {
        if inline {
            names.len()
        } else {
            names.len().min(1)
        }
    };

    let mut wanted: Vec<&RawName> = offsets
        .iter()
        .filter_map(|o| table.entries.get(o))
        .flat_map(|names| &names[..shown(names)])
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    // Demangling is the costly part of naming; each name once, in parallel.
    let demangled: HashMap<&RawName, String> = wanted
        .par_iter()
        .map(|&raw| (raw, sanitize(&raw.demangle())))
        .collect();

    let mut names = LocalNames::default();
    let mut out = Vec::with_capacity(frames.len() + embedded.len());
    {
        // The recording stores each distinct name once and shares it
        // between frames: each is spelled and interned once.
        let mut by_string: FxHashMap<*const u8, u32> = FxHashMap::default();
        for &(frame, addr, chain) in &embedded {
            let chain = chain.unwrap_or_default();
            let shown = if inline {
                chain
            } else {
                &chain[..chain.len().min(1)]
            };
            let mut ids: Vec<u32> = shown
                .iter()
                .map(|n| {
                    *by_string
                        .entry(n.as_ptr())
                        .or_insert_with(|| names.id(&sanitized(n), base))
                })
                .collect();
            if ids.is_empty() {
                ids.push(names.id(&sanitize(&unresolved(base, addr)), base));
            }
            out.push((frame, ids));
        }
    }
    let mut bad_frames = 0;
    for &(frame, addr, _) in &frames {
        let known = table.entries.get(&addr);
        let mut ids: Vec<u32> = known
            .map(|n| &n[..shown(n)])
            .unwrap_or_default()
            .iter()
            .filter_map(|raw| demangled.get(raw))
            .map(|n| names.id(n, base))
            .collect();
        if ids.is_empty() {
            ids.push(names.id(&sanitize(&unresolved(base, addr)), base));
        }
        if known.is_none() && unusable.is_some() {
            bad_frames += 1;
        }
        out.push((frame, ids));
    }
    ModuleOutcome {
        functions: names.functions,
        frames: out,
        unusable: unusable.filter(|_| bad_frames > 0),
        bad_frames,
    }
}

/// The names to embed for the frames of file module `m`: per frame, the
/// demangled chain (outermost first, inlined after; empty where the binary
/// knows no name), or `None` for all of them when the binary is unusable
/// (missing, unreadable, another build), whose names then stay for `fold`
/// to look up.
pub(crate) fn embed_frames(
    m: &Module,
    frames: &[(FrameId, u64)],
    ctx: &Context<'_>,
) -> Option<Vec<(FrameId, Vec<String>)>> {
    let mut offsets: Vec<u64> = frames.iter().map(|&(_, off)| off).collect();
    offsets.dedup();
    let (table, unusable) = names_of(m, &offsets, ctx);
    if unusable.is_some() {
        return None;
    }
    let mut wanted: Vec<&RawName> = table.entries.values().flatten().collect();
    wanted.sort_unstable();
    wanted.dedup();
    let demangled: HashMap<&RawName, String> = wanted
        .par_iter()
        .map(|&raw| (raw, raw.demangle()))
        .collect();
    Some(
        frames
            .iter()
            .map(|&(frame, addr)| {
                let chain = table
                    .entries
                    .get(&addr)
                    .map(|names| {
                        names
                            .iter()
                            .filter_map(|r| demangled.get(r).cloned())
                            .collect()
                    })
                    .unwrap_or_default();
                (frame, chain)
            })
            .collect(),
    )
}

/// The names of `offsets` of module `m`: the cached table, completed from
/// the binary for the offsets it lacks (and then cached again).
fn names_of(m: &Module, offsets: &[u64], ctx: &Context<'_>) -> (AddressTable, Option<Unusable>) {
    let dirs = &ctx.opts.debug_dirs;
    let cached = ctx.cache.as_ref().and_then(|c| c.load(&m.build_id));
    // A debug file installed since the entry was made is worth a fresh look
    // (unless inlined frames are not wanted: the table then has what we need).
    let inline = ctx.opts.inline;
    let mut table = cached
        .filter(|t| {
            !inline || t.has_dwarf || (!t.dwarf_skipped && !debug_file_installed(dirs, &m.build_id))
        })
        .unwrap_or_default();
    let missing: Vec<u64> = offsets
        .iter()
        .filter(|o| !table.entries.contains_key(o))
        .copied()
        .collect();
    if missing.is_empty() {
        return (table, None);
    }
    // Without inlined frames the symbol table names the outer functions;
    // DWARF is only parsed to extend a table that already has it.
    let want_dwarf = inline || table.has_dwarf;
    if let Err(why) = from_binary(ctx, m, dirs, want_dwarf, &mut table, offsets, missing) {
        return (table, Some(why));
    }
    if let Some(cache) = &ctx.cache {
        if let Err(e) = cache.store(&m.build_id, &table) {
            if let Ok(mut slot) = ctx.cache_error.lock() {
                slot.get_or_insert_with(|| format!("cannot write the symbol cache: {e}"));
            }
        }
    }
    (table, None)
}

fn debug_file_installed(dirs: &[PathBuf], build_id: &[u8]) -> bool {
    dirs.iter()
        .any(|d| debugfile::build_id_path(d, build_id).is_some_and(|p| p.is_file()))
}

/// Looks `missing` up in the binary of `m` and adds them to `table`; when
/// the binary's names come from another source than the table's (DWARF
/// appeared or went away), the table starts over with all of `offsets`.
fn from_binary(
    ctx: &Context<'_>,
    m: &Module,
    dirs: &[PathBuf],
    want_dwarf: bool,
    table: &mut AddressTable,
    offsets: &[u64],
    mut missing: Vec<u64>,
) -> Result<(), Unusable> {
    let path = Path::new(&m.path);
    let bin = elf::read_elf(path)?;
    let obj = ElfObject::parse(&bin.data).map_err(|_| Unusable::NotElf)?;
    if !elf::build_id_matches(&obj, &m.build_id) {
        return Err(Unusable::BuildIdMismatch);
    }
    let debug_file = if obj.has_debug_info() {
        None
    } else {
        let own_id;
        let id = if m.build_id.is_empty() {
            own_id = obj.code_id().and_then(|c| elf::unhex(c.as_str()));
            own_id.as_deref().unwrap_or_default()
        } else {
            &m.build_id
        };
        debugfile::find(path, &obj, id, dirs)
    };
    let debug_obj = debug_file
        .as_ref()
        .and_then(|d| Some((ElfObject::parse(&d.data).ok()?, d.dwarf_on_disk.clone())));
    let binary = Binary::new(
        &bin.data,
        (&obj, bin.dwarf_on_disk.clone()),
        debug_obj.as_ref().map(|(o, f)| (o, f.clone())),
        want_dwarf,
        debug_file.as_ref().and_then(|d| ctx.prefetch.take(&d.path)),
    )?;
    if binary.has_dwarf() != table.has_dwarf || table.dwarf_skipped == want_dwarf {
        *table = AddressTable {
            has_dwarf: binary.has_dwarf(),
            dwarf_skipped: !want_dwarf,
            entries: HashMap::new(),
        };
        missing = offsets.to_vec();
    }
    let found = binary.lookup_all(&missing);
    table.entries.extend(missing.into_iter().zip(found));
    Ok(())
}
