//! BPF programs for perf events, built from Rust at run time ([`asm`]),
//! loaded and attached without libbpf, a BPF compiler or an object file:
//! the recorder builds the programs it needs for the processes it meets
//! (a CPython's frame walker takes that version's offsets as immediates)
//! on a machine with only the Rust toolchain.
//!
//! A [`Program`] of type `BPF_PROG_TYPE_PERF_EVENT` runs in the kernel at
//! each sample of the perf events it is attached to (with
//! `flamerec_perf::sys::set_bpf`), on the sampled thread's CPU, before the
//! sample is written; [`Map`]s carry what it reads to user space and what
//! user space tells it. Loading needs root (or CAP_BPF and CAP_PERFMON);
//! the verifier checks every program, and its log comes with a refusal.
//!
//! Unsafe code lives in `sys` (the `bpf(2)` system call) alone.
#![deny(unsafe_code)]

pub mod asm;
pub mod interp;
#[allow(unsafe_code)]
mod sys;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use asm::Insn;

/// Why a map or program could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// The kernel refused to create a map.
    #[error("creating a BPF map: {0}")]
    Map(#[source] io::Error),
    /// The kernel (its verifier) refused the program.
    #[error("loading a BPF program: {source}{}", if log.is_empty() { String::new() } else { format!("; the verifier said: {}", log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")) })]
    Load {
        /// The error.
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// Reading or writing an element failed.
    #[error("a BPF map element: {0}")]
    Element(#[source] io::Error),
    /// A program could not be put together ([`asm::Code::finish`]).
    #[error(
        "building a BPF program: a jump reaches farther than 32,767 instructions, or to no label"
    )]
    Build,
}

impl BpfError {
    /// Whether the kernel refused for want of privilege (`EPERM`, `EACCES`):
    /// programs that read user memory at a sample need root, or `CAP_BPF`
    /// with `CAP_PERFMON`.
    pub fn refused(&self) -> bool {
        let e = match self {
            BpfError::Map(e) | BpfError::Element(e) | BpfError::Load { source: e, .. } => e,
            BpfError::Build => return false,
        };
        matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
    }
}

/// Kinds of maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Keys to values, created as they are written.
    Hash,
    /// A hash whose least recently used keys make room for new ones.
    LruHash,
    /// `max_entries` values indexed by a u32 key, all present.
    Array,
    /// An array with one value per CPU (programs see their CPU's).
    PerCpuArray,
    /// A ring buffer programs write records into ([`RingBuffer`]).
    RingBuf,
    /// Programs by u32 index (values: program descriptors), for tail calls.
    ProgArray,
}

impl MapKind {
    fn code(self) -> u32 {
        match self {
            MapKind::Hash => 1,
            MapKind::LruHash => 9,
            MapKind::Array => 2,
            MapKind::PerCpuArray => 6,
            MapKind::RingBuf => 27,
            MapKind::ProgArray => 3,
        }
    }
}

/// A BPF map: keys and values of fixed sizes.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    kind: MapKind,
    key_size: usize,
    value_size: usize,
}

impl Map {
    /// A new map.
    pub fn new(
        kind: MapKind,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> Result<Map, BpfError> {
        let fd = sys::map_create(kind.code(), key_size, value_size, max_entries)
            .map_err(BpfError::Map)?;
        Ok(Map {
            fd,
            kind,
            key_size: key_size as usize,
            value_size: value_size as usize,
        })
    }

    /// The descriptor programs name it by ([`asm::load_map`]).
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The value of `key`, if set; of a per-CPU map, every possible CPU's
    /// value one after another, each padded to a multiple of 8 bytes.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BpfError> {
        let key = self.sized(key, self.key_size)?;
        let per_cpu = self.kind == MapKind::PerCpuArray;
        let len = match per_cpu {
            true => sys::per_cpu_len(self.value_size).map_err(BpfError::Element)?,
            false => self.value_size,
        };
        let mut value = vec![0; len];
        let lookup = match per_cpu {
            true => sys::map_lookup_per_cpu(&self.fd, key, self.value_size, &mut value),
            false => sys::map_lookup(&self.fd, key, &mut value),
        };
        match lookup {
            Ok(true) => Ok(Some(value)),
            Ok(false) => Ok(None),
            Err(e) => Err(BpfError::Element(e)),
        }
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &[u8], value: &[u8]) -> Result<(), BpfError> {
        let key = self.sized(key, self.key_size)?;
        let value = self.sized(value, self.value_size)?;
        sys::map_update(&self.fd, key, value).map_err(BpfError::Element)
    }

    /// Removes `key`; whether it was there.
    pub fn remove(&self, key: &[u8]) -> Result<bool, BpfError> {
        let key = self.sized(key, self.key_size)?;
        sys::map_delete(&self.fd, key).map_err(BpfError::Element)
    }

    fn sized<'a>(&self, bytes: &'a [u8], size: usize) -> Result<&'a [u8], BpfError> {
        if bytes.len() != size {
            return Err(BpfError::Element(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes for an element of {size}", bytes.len()),
            )));
        }
        Ok(bytes)
    }
}

/// A ring buffer map that programs write records into
/// (`bpf_ringbuf_output`, Linux 5.8+) and user space reads in order:
/// records of every CPU in one ring, in the order they were written.
pub struct RingBuffer {
    map: Map,
    ring: sys::RingMap,
}

impl std::fmt::Debug for RingBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingBuffer")
            .field("map", &self.map)
            .finish()
    }
}

impl RingBuffer {
    /// A ring of `size` bytes (a power-of-two number of pages).
    pub fn new(size: u32) -> Result<RingBuffer, BpfError> {
        let map = Map::new(MapKind::RingBuf, 0, 0, size)?;
        let ring = sys::RingMap::map(&map.fd, size as usize).map_err(BpfError::Map)?;
        Ok(RingBuffer { map, ring })
    }

    /// The descriptor programs name it by ([`asm::load_map`]).
    pub fn fd(&self) -> i32 {
        self.map.fd()
    }

    /// Hands every record written so far to `f`, oldest first.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) {
        self.ring.drain(f);
    }
}

/// How many CPUs the kernel may ever bring up (`/sys/devices/system/cpu/possible`,
/// the kernel's own count): per-CPU maps hold a value for each. An error
/// where that cannot be read: no count is guessed.
pub fn possible_cpus() -> std::io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    flamerec_perf::procfs::parse_cpu_list(&text)
        .into_iter()
        .max()
        .map(|last| last as usize + 1)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("cannot read the possible CPUs from {text:?}"),
            )
        })
}

/// A loaded program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads `insns` as a perf-event program. The maps it names must stay
    /// open until it is loaded (the kernel then holds them).
    pub fn perf_event(insns: &[Insn]) -> Result<Program, BpfError> {
        const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
        let bytes: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
        let fd = sys::prog_load(BPF_PROG_TYPE_PERF_EVENT, &bytes)
            .map_err(|(source, log)| BpfError::Load { source, log })?;
        Ok(Program { fd })
    }

    /// Its descriptor, to attach it.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}
