//! DWARF: the functions inlined at an address (`inlined`), read as far as
//! the addresses need, and the big `.debug_info` sections inflated ahead
//! while a recording is still being read (`prefetch`). Section bytes come
//! from `elf::sections`.

mod inlined;
mod prefetch;

pub(crate) use inlined::DwarfFile;
pub use prefetch::Prefetch;
