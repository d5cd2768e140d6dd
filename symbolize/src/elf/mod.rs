//! ELF binaries: reading one defensively ([`read_elf`]: only what naming
//! needs, checked against the recorded build id), its headers
//! ([`Object`]: build id, load address, what it carries), its symbol tables
//! (`symtab`), its PLT stubs (`plt`), its sections (`sections`, DWARF
//! inflated lazily) and the separate debug files that hold what it was
//! stripped of (`debugfile`).
//!
//! Nothing here knows about frames, caches or spelling; `symdata` combines
//! these pieces into lookups of one binary.

pub(crate) mod debugfile;
mod file;
mod object;
pub(crate) mod plt;
pub(crate) mod sections;
pub(crate) mod symtab;

pub(crate) use file::{
    build_id_matches, file_offset_to_vaddr, hex, load_segments, read_elf, vaddr_to_file_offset,
    Segment,
};
pub(crate) use object::Object;
