//! Frames of file modules (mapped ELF binaries): names from the symbol
//! cache when it knows the address, else from the binary — checked against
//! the recorded build id, with DWARF from a separate debug file when it has
//! none itself — and then added to the cache.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flamerec_format::{FrameId, Module};
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::cache::{AddressTable, SymbolCache};
use crate::dwarf::DieIndex;
use crate::elf::sections::Reader;
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
    let mut table = cached_table(ctx.cache.as_ref(), m, dirs, ctx.opts.inline);
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
    let want_dwarf = ctx.opts.inline || table.has_dwarf;
    let prefetch = |path: &Path| ctx.prefetch.take(path);
    let cache = ctx.cache.as_ref();
    let mut dies = DieIndex::default();
    let looked_up = with_binary(m, dirs, want_dwarf, prefetch, |binary| {
        let missing = if restarts(&table, binary, want_dwarf) {
            table = fresh_table(binary, want_dwarf);
            offsets.to_vec()
        } else {
            missing
        };
        dies = cached_dies(cache, m, binary);
        let found = binary.lookup_all(&missing, &mut dies);
        table.entries.extend(missing.into_iter().zip(found));
    });
    if let Err(why) = looked_up {
        return (table, Some(why));
    }
    if let Some(cache) = cache {
        let mut stored = cache.store(&m.build_id, &table);
        if dies.changed && stored.is_ok() {
            stored = cache.store_dies(&m.build_id, &dies);
        }
        if let Err(e) = stored {
            if let Ok(mut slot) = ctx.cache_error.lock() {
                slot.get_or_insert_with(|| cache_write_failed(&e));
            }
        }
    }
    (table, None)
}

/// The one warning about a cache that could not be written.
pub(crate) fn cache_write_failed(e: &std::io::Error) -> String {
    format!("cannot write the symbol cache: {e}")
}

/// The cached names of module `m`'s addresses, or an empty table. A debug
/// file installed since the entry was made is worth a fresh look (unless
/// inlined frames are not wanted: the table then has what we need).
pub(crate) fn cached_table(
    cache: Option<&SymbolCache>,
    m: &Module,
    dirs: &[PathBuf],
    inline: bool,
) -> AddressTable {
    cache
        .and_then(|c| c.load(&m.build_id))
        .filter(|t| {
            !inline || t.has_dwarf || (!t.dwarf_skipped && !debug_file_installed(dirs, &m.build_id))
        })
        .unwrap_or_default()
}

/// Where the DWARF functions of module `m` are, as cached (empty without
/// a cache entry, or when `binary` has no DWARF to read).
pub(crate) fn cached_dies(
    cache: Option<&SymbolCache>,
    m: &Module,
    binary: &Binary<'_, '_>,
) -> DieIndex {
    cache
        .filter(|_| binary.has_dwarf())
        .and_then(|c| c.load_dies(&m.build_id))
        .unwrap_or_default()
}

/// An empty table for the names `binary` gives.
pub(crate) fn fresh_table(binary: &Binary<'_, '_>, want_dwarf: bool) -> AddressTable {
    AddressTable {
        has_dwarf: binary.has_dwarf(),
        dwarf_skipped: !want_dwarf,
        entries: HashMap::new(),
    }
}

/// Whether the binary's names come from another source than the table's
/// (DWARF appeared or went away), so the table must start over.
pub(crate) fn restarts(table: &AddressTable, binary: &Binary<'_, '_>, want_dwarf: bool) -> bool {
    binary.has_dwarf() != table.has_dwarf || table.dwarf_skipped == want_dwarf
}

fn debug_file_installed(dirs: &[PathBuf], build_id: &[u8]) -> bool {
    dirs.iter()
        .any(|d| debugfile::build_id_path(d, build_id).is_some_and(|p| p.is_file()))
}

/// Opens the binary of `m` (checked against its recorded build id, with a
/// separate debug file from `dirs` when it has no DWARF itself, its DWARF
/// maybe inflated ahead by `prefetch`) and runs `f` on it.
pub(crate) fn with_binary<R>(
    m: &Module,
    dirs: &[PathBuf],
    want_dwarf: bool,
    prefetch: impl FnOnce(&Path) -> Option<Reader<'static>>,
    f: impl FnOnce(&Binary<'_, '_>) -> R,
) -> Result<R, Unusable> {
    let path = Path::new(&m.path);
    let bin = elf::read_elf(path)?;
    let obj = elf::Object::parse(&bin.data).ok_or(Unusable::NotElf)?;
    if !elf::build_id_matches(&obj, &m.build_id) {
        return Err(Unusable::BuildIdMismatch);
    }
    let debug_file = if obj.has_debug_info() {
        None
    } else {
        let own_id;
        let id = if m.build_id.is_empty() {
            own_id = obj.build_id();
            own_id.unwrap_or_default()
        } else {
            &m.build_id
        };
        debugfile::find(path, &obj, id, dirs)
    };
    let debug_obj = debug_file
        .as_ref()
        .and_then(|d| Some((elf::Object::parse(&d.data)?, Some(Arc::clone(&d.file)))));
    let binary = Binary::new(
        (&obj, Some(Arc::clone(&bin.file))),
        debug_obj.as_ref().map(|(o, f)| (o, f.clone())),
        want_dwarf,
        debug_file.as_ref().and_then(|d| prefetch(&d.path)),
    );
    Ok(f(&binary))
}
