//! The recorder's own system calls that need `unsafe`: starting the
//! profiled command suspended, waiting for it and signalling it, its
//! threads' CPUs and priorities, the allocator's arenas. The perf
//! event calls it shares with the other tools come from `flamerec-perf`
//! and are re-exported here, so the recorder has one `sys` to call.
//!
//! Each item here is a safe wrapper; callers never see a raw pointer.

mod affinity;
mod launch;
mod memory;
mod priority;

pub use affinity::{allowed_cpus, run_on};
pub use flamerec_perf::sys::*;
pub use launch::{kill, wait_nohang, SuspendedChild, WaitStatus};
pub use memory::bound_malloc_arenas;
pub use priority::{lower_namer_priority, raise_recorder_priority, restore_namer_priority};
