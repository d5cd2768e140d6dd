//! Symbolization: turns (module, address) frames into function names, in
//! parallel. `fold` uses it for recordings, `record` to embed names in them,
//! and the live tools (`stacks`, `stall`) for the frames they capture.
//!
//! Frames are grouped by module so each binary is read and parsed once;
//! modules are symbolized concurrently and big modules are also split into
//! chunks of addresses (rayon, on whatever pool the caller installed). The
//! result maps every frame to a list of functions, outermost first: the
//! function holding the code, then the functions DWARF says were inlined
//! into it at that address.
//!
//! Per binary: the on-disk cache (by build id) first; addresses it lacks are
//! looked up in the file (checked against the recorded build id, with DWARF
//! from a separate debug file when it has none itself) and cached (`files`).
//!
//! The house, in the shape of blazesym's: this file is the face (the types
//! callers see and the entry points). `engine` runs the per-module work of
//! one `symbolize` call, sharing a `context`; each kind of frame has its
//! resolver — `files` (mapped ELF binaries), `kernel/` (kallsyms, recorded
//! kernel symbols), `jit` (perf maps) — and each returns an `outcome` (a
//! module's functions and frames). `lookup` is the one sequence that names a
//! binary's addresses (cache, binary, cache again), used by `files` and by
//! `resident`, which names a recording's frames while it grows (the
//! recorder's embedding), each binary kept open between batches on a thread
//! of its own. The sources: `elf/` (files, symbol tables, PLT stubs,
//! sections, separate debug files), `dwarf/` (inlined frames, inflating
//! ahead), `cache/` (the on-disk cache); `symdata` combines `elf` and
//! `dwarf` into one binary's lookups; `types` holds the value types they
//! share and imports nothing. Public beside the face: `names` (spelling
//! rules of folded text) and `live` (names and mappings of running
//! processes); `sys` is the one unsafe module (it maps files).
//!
//! This crate never drops a frame: whatever cannot be named becomes
//! `module+0xOFFSET`. It must not know about samples, roots or output
//! formats beyond the spelling rules of [`names`]. No unsafe code outside
//! `sys` (which maps files), no Linux calls beyond reading files.
#![deny(unsafe_code)]

// Resolvers, one folder per source (their `mod.rs` says what each owns).
mod cache;
mod dwarf;
mod elf;
mod jit;
mod kernel;
// How frames of each kind become names; value types shared by all.
mod context;
mod engine;
mod files;
mod lookup;
mod outcome;
mod resident;
mod symdata;
mod types;
// The crate's one unsafe module: maps files.
mod sys;

pub mod live;
pub mod names;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use flamerec_format::FrameId;

pub use cache::{default_dir as default_cache_dir, SymbolCache};
pub use dwarf::Prefetch;
pub use elf::debugfile::DEFAULT_DEBUG_DIR;
pub use engine::{reads_binaries, symbolize};
pub use kernel::kallsyms;
pub use resident::Namer;

/// Where a module's binary is read when its recorded path does not reach
/// it from here: its process ran in a container, a chroot or a mount
/// namespace of its own, or the file at that path was replaced since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// A path that reaches the binary itself (`/proc/self/fd/N` of a file
    /// the recorder holds open, so it stays readable after its process).
    pub file: PathBuf,
    /// The root the process's own paths are under (a held descriptor's
    /// path too): its separate debug files are looked for there first.
    pub root: Option<PathBuf>,
}

/// The file offsets the function symbol `name` of the ELF file at `path`
/// covers (from its symbol tables); `None` when it is not a readable ELF
/// file, has no such function, or the function has no size.
pub fn function_file_range(path: &std::path::Path, name: &str) -> Option<std::ops::Range<u64>> {
    let file = elf::read_elf(path).ok()?;
    let obj = elf::Object::parse(&file.data)?;
    let load = obj.load_address();
    let (rel, size) = elf::symtab::function_named(&file.data, load, name)?;
    let segments = elf::load_segments(&obj);
    let start = elf::vaddr_to_file_offset(&segments, load.checked_add(rel)?)?;
    (size > 0).then(|| start..start.saturating_add(size))
}

/// The GNU build id of the ELF file at `path`; `None` when it is not a
/// readable ELF file or has none.
pub fn build_id_of(path: &std::path::Path) -> Option<Vec<u8>> {
    let file = elf::read_elf(path).ok()?;
    let obj = elf::Object::parse(&file.data)?;
    obj.build_id().map(<[u8]>::to_vec)
}

/// Index into [`Symbols::functions`].
pub type FuncId = u32;

/// A function as the summary and the folded text name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Function {
    /// Display name, already safe for folded text (and suffixed `_[k]` when asked).
    pub name: String,
    /// Module basename (`libc.so.6`, `[kernel.kallsyms]`).
    pub module: String,
}

/// How to find and name things: the one set of naming options every tool
/// shares (`fold`, the recorder's embedding, `stacks`, the stall library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameOptions {
    /// Append `_[k]` to kernel frames.
    pub kernel_suffix: bool,
    /// Expand inlined functions (default true).
    pub inline: bool,
    /// Symbol cache directory, if any (default none; [`NameOptions::standard`]
    /// uses the one under `$HOME`).
    pub cache_dir: Option<PathBuf>,
    /// Roots of separate debug files (default [`DEFAULT_DEBUG_DIR`]).
    pub debug_dirs: Vec<PathBuf>,
    /// Directory of `perf-PID.map` files, if JIT maps are wanted.
    pub perf_map_dir: Option<PathBuf>,
    /// Processes whose JIT maps to read.
    pub pids: Vec<u32>,
}

impl Default for NameOptions {
    fn default() -> Self {
        NameOptions {
            kernel_suffix: false,
            inline: true,
            cache_dir: None,
            debug_dirs: vec![PathBuf::from(DEFAULT_DEBUG_DIR)],
            perf_map_dir: None,
            pids: Vec::new(),
        }
    }
}

impl NameOptions {
    /// The defaults with the symbol cache under `$HOME`, as the command
    /// line uses them.
    pub fn standard() -> Self {
        NameOptions {
            cache_dir: default_cache_dir(),
            ..Default::default()
        }
    }
}

/// Names of the frames a profile uses.
#[derive(Debug, Default)]
pub struct Symbols {
    /// Every function some frame expands to.
    pub functions: Vec<Function>,
    /// Per frame id, the functions it stands for, outermost first; empty for
    /// frames the profile does not use.
    pub frames: Vec<Vec<FuncId>>,
    /// Problems worth telling the user about, one line each.
    pub warnings: Vec<String>,
}

/// Names a recording carries for its frames (see `flamerec_format::EmbeddedNames`).
pub type Embedded = HashMap<FrameId, Vec<Arc<str>>>;

/// The names a recorder embeds ([`Namer`]): for the frames of file
/// modules, the demangled names (outermost first, inlined after) as
/// `symbolize` would find them with inlined frames, unspelled.
#[derive(Debug, Default)]
pub struct Embedding {
    /// Per frame of a usable binary: its names (empty where it has none).
    pub names: Vec<(FrameId, Vec<String>)>,
    /// Binaries that could not be read (missing, unreadable, another build):
    /// their frames are left out, for `fold` to look up.
    pub unusable_modules: usize,
    /// Frames left out with them.
    pub unusable_frames: usize,
    /// Problems worth telling the user about.
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    #[inline(never)]
    fn probe() -> u64 {
        std::hint::black_box(7)
    }

    /// A function found by name lies at the file offsets of the code its
    /// symbol names: this test's own function, named from its address
    /// through the symbol tables, then found again by that name.
    #[test]
    fn a_function_is_found_by_name_at_its_file_offsets() {
        let exe = std::env::current_exe().expect("own path");
        let code = flamerec_testkit::maps::own_code_mapping(&exe);
        let at = probe as fn() -> u64 as usize as u64;
        let offset = at - code.start + code.pgoff;
        let file = super::elf::read_elf(&exe).expect("ELF");
        let obj = super::elf::Object::parse(&file.data).expect("ELF");
        let load = obj.load_address();
        let vaddr = super::elf::file_offset_to_vaddr(&super::elf::load_segments(&obj), offset)
            .expect("in a segment");
        let name = super::elf::symtab::function_names(&file.data, load, &[vaddr - load])[0]
            .expect("named")
            .to_string();
        let r = super::function_file_range(&exe, &name).expect("found by name");
        assert!(
            r.contains(&offset),
            "{name}: {r:x?} does not hold {offset:#x}"
        );
        assert!(super::function_file_range(&exe, "flamerec_no_such_function").is_none());
    }
}
