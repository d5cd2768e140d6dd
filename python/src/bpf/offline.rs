//! The walk run in user space: the program [`emit`](super::emit) writes
//! for a layout, run by [`flamerec_bpf::interp`] over a process's memory
//! instead of by the kernel at a sample. What it gives is what the kernel's
//! walk would write for a sample of that thread at that moment, so a
//! machine without BPF (no root, no kernel support) still checks the walk
//! against the reader ([`crate::Interpreter::stack`]) frame for frame.

use flamerec_bpf::interp::{Fault, Machine};

use super::{walk_code, Entry, Record, WalkFds, CTX_IP, RECORD_LEN};
use crate::layout::Layout;
use crate::memory::Memory;

/// The maps the walk names, by the descriptors the program is written with.
const FDS: WalkFds = WalkFds {
    threads: 1,
    records: 2,
    known: 3,
    ring: Some(RING),
};
const RING: i32 = 4;

/// Why the walk could not be run in user space.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OfflineError {
    /// The layout's walk could not be put together.
    #[error("the walk of this layout could not be put together")]
    Build,
    /// The program stopped at a fault.
    #[error("the walk faulted: {0}")]
    Fault(#[from] Fault),
    /// The program wrote no record for the thread.
    #[error("the walk wrote no record")]
    NoRecord,
}

/// The walk of `layout` for a sample of thread `tid` of process `tgid`,
/// whose thread state is at `tstate`, over `mem`: the record it writes,
/// and what it sends to its ring (the record again, and the names of the
/// code objects it met first).
pub fn walk_in_user_space(
    layout: &Layout,
    mem: &dyn Memory,
    tgid: u32,
    tid: u32,
    tstate: u64,
) -> Result<(Record, Vec<Entry>), OfflineError> {
    let program = walk_code(layout, &FDS).ok_or(OfflineError::Build)?;
    let read = |addr: u64, buf: &mut [u8]| mem.read(addr, buf).is_ok();
    let mut m = Machine::new(&read);
    m.hash(FDS.threads, 4, 8);
    m.set(FDS.threads, &tid.to_ne_bytes(), &tstate.to_ne_bytes());
    m.array(FDS.records, RECORD_LEN, 1);
    // An LRU map in the kernel; a plain one here (one walk fills no map).
    m.hash(FDS.known, 16, 8);
    m.ring(RING);
    m.pid_tgid = u64::from(tgid) << 32 | u64::from(tid);
    m.ktime = 1;
    // The sampled registers: an instruction pointer the record carries.
    let mut ctx = vec![0u8; 256];
    let at = CTX_IP as usize;
    ctx[at..at + 8].copy_from_slice(&0x5eed_u64.to_ne_bytes());
    m.run(&program, &ctx)?;
    let record = m
        .get(FDS.records, &0u32.to_ne_bytes())
        .and_then(Record::parse)
        .ok_or(OfflineError::NoRecord)?;
    let sent = m
        .ring_entries(RING)
        .iter()
        .filter_map(|b| Entry::parse(b))
        .collect();
    Ok((record, sent))
}
