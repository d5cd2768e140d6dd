//! A sample between its perf record and the file: a value type the sample
//! path, the live stacks (`deep`) and deferred callchains (`defer`) pass
//! around, kept in a leaf module so none of them imports another for it.

use flamerec_format::Frame;

/// A sample whose user part is done.
pub(crate) struct RawSample {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_MONOTONIC ns.
    pub time: u64,
    pub ip: u64,
    /// Kernel callchain, leaf first, untrimmed.
    pub kernel: Vec<u64>,
    /// User frames, leaf first.
    pub user: Vec<Frame>,
    /// The user frames were unwound and stop short of the thread's entry.
    pub user_cut: bool,
    /// The thread's Python frames, as the kernel walked them at the sample.
    pub python: Option<Box<flamerec_python::bpf::Record>>,
}
