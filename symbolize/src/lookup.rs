//! Looking a file module's addresses up, the one sequence `symbolize` and
//! the recorder's resident namers share: the cached table of the binary's
//! build id first; for what it lacks, the binary opened (checked against
//! the recorded build id, DWARF from a separate debug file when it has none
//! itself), the table started over when the binary's names now come from
//! another source, the addresses looked up (DWARF functions found through
//! the cached index of where they are), and both written back to the cache.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flamerec_format::Module;

use crate::cache::{AddressTable, SymbolCache};
use crate::dwarf::DieIndex;
use crate::elf::sections::Reader;
use crate::elf::{self, debugfile};
use crate::symdata::Binary;
use crate::types::Unusable;
use crate::Located;

/// One binary's names as they grow.
pub(crate) struct ModuleNames<'a> {
    module: &'a Module,
    cache: Option<&'a SymbolCache>,
    /// The names found so far, by file offset.
    pub(crate) table: AddressTable,
    want_dwarf: bool,
    /// Where the binary's DWARF functions are (read from the cache when
    /// the binary is opened; grows as units are walked).
    dies: DieIndex,
}

impl<'a> ModuleNames<'a> {
    /// The cached names of `m`'s addresses, or an empty table. A debug
    /// file installed since the entry was made is worth a fresh look
    /// (unless inlined frames are not wanted: the table then has what is
    /// needed).
    pub(crate) fn cached(
        m: &'a Module,
        cache: Option<&'a SymbolCache>,
        dirs: &[PathBuf],
        inline: bool,
    ) -> Self {
        let table = cache
            .and_then(|c| c.load(&m.build_id))
            .filter(|t| {
                !inline
                    || t.has_dwarf
                    || (!t.dwarf_skipped && !debug_file_installed(dirs, &m.build_id))
            })
            .unwrap_or_default();
        // Without inlined frames the symbol table names the outer
        // functions; DWARF is only parsed to extend a table that has it.
        let want_dwarf = inline || table.has_dwarf;
        ModuleNames {
            module: m,
            cache,
            table,
            want_dwarf,
            dies: DieIndex::default(),
        }
    }

    /// Whether DWARF is to be read.
    pub(crate) fn want_dwarf(&self) -> bool {
        self.want_dwarf
    }

    /// Which of `offsets` the table lacks, sorted, each once.
    pub(crate) fn lacks(&self, offsets: impl Iterator<Item = u64>) -> Vec<u64> {
        let mut missing: Vec<u64> = offsets
            .filter(|o| !self.table.entries.contains_key(o))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
    }

    /// The binary is open: the table starts over when the binary's names
    /// come from another source than its (DWARF appeared or went away, or
    /// was skipped and is now wanted), and the cached index of its DWARF
    /// functions is read. Returns whether the table started over.
    pub(crate) fn opened(&mut self, binary: &Binary<'_, '_>) -> bool {
        let restart = binary.has_dwarf() != self.table.has_dwarf
            || self.table.dwarf_skipped == self.want_dwarf;
        if restart {
            self.table = AddressTable {
                has_dwarf: binary.has_dwarf(),
                dwarf_skipped: !self.want_dwarf,
                entries: HashMap::new(),
            };
        }
        self.dies = self
            .cache
            .filter(|_| binary.has_dwarf())
            .and_then(|c| c.load_dies(&self.module.build_id))
            .unwrap_or_default();
        restart
    }

    /// Looks `missing` (sorted) up in the open binary.
    pub(crate) fn look_up(&mut self, binary: &Binary<'_, '_>, missing: Vec<u64>) {
        let found = binary.lookup_all(&missing, &mut self.dies);
        self.table.entries.extend(missing.into_iter().zip(found));
    }

    /// Writes the names to the cache (nothing without one).
    pub(crate) fn store_names(&self) -> io::Result<()> {
        match self.cache {
            Some(c) => c.store(&self.module.build_id, &self.table),
            None => Ok(()),
        }
    }

    /// Writes the names and, when it grew, the index of DWARF functions.
    pub(crate) fn store(&self) -> io::Result<()> {
        self.store_names()?;
        self.store_dies()
    }

    /// Writes the index of DWARF functions, when it grew.
    pub(crate) fn store_dies(&self) -> io::Result<()> {
        match self.cache {
            Some(c) if self.dies.changed => c.store_dies(&self.module.build_id, &self.dies),
            _ => Ok(()),
        }
    }
}

/// The one warning about a cache that could not be written.
pub(crate) fn cache_write_failed(e: &std::io::Error) -> String {
    format!("cannot write the symbol cache: {e}")
}

/// `path` (absolute) as seen under `root`.
fn rerooted(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

fn debug_file_installed(dirs: &[PathBuf], build_id: &[u8]) -> bool {
    dirs.iter()
        .any(|d| debugfile::build_id_path(d, build_id).is_some_and(|p| p.is_file()))
}

/// Opens the binary of `m` (checked against its recorded build id, with a
/// separate debug file from `dirs` when it has no DWARF itself, its DWARF
/// maybe inflated ahead by `prefetch`) and runs `f` on it. `at` says where
/// the binary and its process's own debug files are read when its recorded
/// path does not reach them from here.
pub(crate) fn with_binary<R>(
    m: &Module,
    at: Option<&Located>,
    dirs: &[PathBuf],
    want_dwarf: bool,
    prefetch: impl FnOnce(&Path) -> Option<Reader<'static>>,
    f: impl FnOnce(&Binary<'_, '_>) -> R,
) -> Result<R, Unusable> {
    let path = Path::new(&m.path);
    let bin = elf::read_elf(at.map_or(path, |a| &a.file))?;
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
        let root = at.and_then(|a| a.root.as_deref());
        let found = |root: Option<&Path>| {
            let dirs: Vec<PathBuf> = match root {
                Some(r) => dirs.iter().map(|d| rerooted(r, d)).collect(),
                None => dirs.to_vec(),
            };
            let seen_as = root.map_or_else(|| path.to_path_buf(), |r| rerooted(r, path));
            debugfile::find(&seen_as, &bin.path, &obj, id, &dirs)
        };
        // The process's own debug files first, then the host's (by build
        // id, the same build wherever it is installed).
        root.and_then(|r| found(Some(r))).or_else(|| found(None))
    };
    let debug_obj = debug_file
        .as_ref()
        .and_then(|d| Some((elf::Object::parse(&d.data)?, Some(Arc::clone(&d.file)))));
    let binary = Binary::new(
        (&obj, Some(Arc::clone(&bin.file))),
        debug_obj.as_ref().map(|(o, f)| (o, f.clone())),
        want_dwarf,
        debug_file.as_ref().and_then(|d| prefetch(&d.path)),
    )
    .mapped_from(
        std::iter::once(&bin.data)
            .chain(debug_file.as_ref().map(|d| &d.data))
            .collect(),
    );
    Ok(f(&binary))
}
