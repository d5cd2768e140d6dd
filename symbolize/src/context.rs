//! What every module's naming in one `symbolize` call shares: the kernel
//! table, JIT maps, the symbol cache, the options, debug info inflated
//! ahead and the names the recording embeds. Built by the engine, read by
//! the resolvers of each kind of frame.

use std::sync::{Arc, Mutex};

use crate::cache::SymbolCache;
use crate::dwarf::Prefetch;
use crate::jit::JitMaps;
use crate::kernel::KernelTable;
use crate::NameOptions;

/// What every module's symbolization shares.
pub(crate) struct Context<'t> {
    pub(crate) ktable: KernelTable<'t>,
    pub(crate) jit: JitMaps,
    pub(crate) cache: Option<SymbolCache>,
    /// The first failure to write the cache (one warning is enough).
    pub(crate) cache_error: Mutex<Option<String>>,
    pub(crate) opts: &'t NameOptions,
    /// Debug info inflated ahead.
    pub(crate) prefetch: &'t Prefetch,
    /// Names the recording embeds, used before any binary is read; by
    /// frame id (a frame without names: `None`).
    pub(crate) embedded: Option<Vec<Option<&'t [Arc<str>]>>>,
}
