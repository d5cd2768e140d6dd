//! Kernel symbols: the running kernel's table (`kallsyms`, read by the
//! recorder and the live tools, and by `fold` for perf.data input) and the
//! symbols a recording carries, looked up by address (`table`).

pub mod kallsyms;
mod table;

pub(crate) use table::{module_name, KernelTable};
