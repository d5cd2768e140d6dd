//! Frames of file modules (mapped ELF binaries): names from the symbol
//! cache when it knows the address, else from the binary — checked against
//! the recorded build id, with DWARF from a separate debug file when it has
//! none itself — and then added to the cache.

use std::collections::HashMap;
use std::path::Path;

use flamerec_format::{FrameId, Module};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::cache::AddressTable;
use crate::context::Context;
use crate::lookup::{cache_write_failed, with_binary, ModuleNames};
use crate::names::{sanitize, sanitized, unresolved};
use crate::outcome::{LocalNames, ModuleOutcome};
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
    // Demangling is the costly part of naming; each name once, in parallel
    // (and no pool asked for when the recording names every frame).
    let demangled: HashMap<&RawName, String> = if wanted.is_empty() {
        HashMap::new()
    } else {
        wanted
            .par_iter()
            .map(|&raw| (raw, sanitize(&raw.demangle())))
            .collect()
    };

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

/// The names of `offsets` of module `m`: the cached table, completed from
/// the binary for the offsets it lacks (and then cached again).
fn names_of(m: &Module, offsets: &[u64], ctx: &Context<'_>) -> (AddressTable, Option<Unusable>) {
    let dirs = &ctx.opts.debug_dirs;
    let mut names = ModuleNames::cached(m, ctx.cache.as_ref(), dirs, ctx.opts.inline);
    let missing = names.lacks(offsets.iter().copied());
    if missing.is_empty() {
        return (names.table, None);
    }
    let prefetch = |path: &Path| ctx.prefetch.take(path);
    let looked_up = with_binary(m, None, dirs, names.want_dwarf(), prefetch, |binary| {
        let missing = if names.opened(binary) {
            offsets.to_vec()
        } else {
            missing
        };
        names.look_up(binary, missing);
    });
    if let Err(why) = looked_up {
        return (names.table, Some(why));
    }
    if let Err(e) = names.store() {
        if let Ok(mut slot) = ctx.cache_error.lock() {
            slot.get_or_insert_with(|| cache_write_failed(&e));
        }
    }
    (names.table, None)
}
