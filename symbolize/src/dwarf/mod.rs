//! DWARF: the functions inlined at an address (`inlined`), read as far as
//! the addresses need, where each unit's functions start (`index`, kept so a
//! unit is walked whole once), and the big `.debug_info` sections inflated ahead
//! while a recording is still being read (`prefetch`). Section bytes come
//! from `elf::sections`.

mod index;
mod inlined;
mod prefetch;

pub(crate) use index::{Arange, DieIndex, FunctionRange};
pub(crate) use inlined::DwarfFile;
pub use prefetch::Prefetch;

/// Of the address ranges (of units or functions) starting at or before an
/// address, sorted by start, how many of the last ones may still hold it:
/// ranges rarely overlap, but aliases and duplicates of a function do.
const OVERLAPPING: usize = 16;
