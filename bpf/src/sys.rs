//! The crate's one unsafe module: the `bpf(2)` system call for creating
//! maps, reading and writing their elements, and loading programs.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_PROG_LOAD: libc::c_long = 5;

/// `union bpf_attr` for BPF_MAP_CREATE (the fields flamerec sets; the
/// rest of the kernel's union is zero, which the size passed covers).
#[repr(C)]
#[derive(Default)]
struct MapCreate {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for element access.
#[repr(C)]
#[derive(Default)]
struct MapElem {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for BPF_PROG_LOAD.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a repr(C) prefix of the kernel's `union bpf_attr`
    // for `cmd`, initialized, and its size is passed with it; the kernel
    // reads it (and for PROG_LOAD writes into the log buffer it points to,
    // which the caller keeps alive).
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

fn fd_of(r: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel just returned `r` as a new descriptor nothing else owns.
    unsafe { OwnedFd::from_raw_fd(r as i32) }
}

/// A new map.
pub(crate) fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
) -> io::Result<OwnedFd> {
    let mut attr = MapCreate {
        map_type,
        key_size,
        value_size,
        max_entries,
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut attr).map(fd_of)
}

/// The bytes a per-CPU map's value takes: each possible CPU's value,
/// padded to 8 bytes (the kernel's layout).
pub(crate) fn per_cpu_len(value_size: usize) -> io::Result<usize> {
    value_size
        .div_ceil(8)
        .checked_mul(8)
        .and_then(|v| v.checked_mul(crate::possible_cpus().ok()?))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "per-CPU value size"))
}

/// Reads a per-CPU map's value of `key` (values of `value_size` bytes)
/// into `value`, which must hold every possible CPU's: the kernel writes
/// that many, so a shorter buffer is refused here, before it is handed over.
pub(crate) fn map_lookup_per_cpu(
    map: &OwnedFd,
    key: &[u8],
    value_size: usize,
    value: &mut [u8],
) -> io::Result<bool> {
    if value.len() < per_cpu_len(value_size)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a per-CPU value buffer smaller than every possible CPU's values",
        ));
    }
    map_lookup(map, key, value)
}

/// Reads the value of `key` into `value`; `Ok(false)` where there is none.
pub(crate) fn map_lookup(map: &OwnedFd, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets `key` to `value`. The caller passes slices of the map's key and
/// value sizes.
pub(crate) fn map_update(map: &OwnedFd, key: &[u8], value: &[u8]) -> io::Result<()> {
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        flags: 0,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Removes `key`; `Ok(false)` where it was not there.
pub(crate) fn map_delete(map: &OwnedFd, key: &[u8]) -> io::Result<bool> {
    let mut attr = MapElem {
        map_fd: map.as_raw_fd() as u32,
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Loads a program of `prog_type` from `insns` (8 bytes each); on a refusal
/// the verifier's log is returned with the error (asked for only then: a
/// log too small for a program that passes fails its load on some kernels).
pub(crate) fn prog_load(prog_type: u32, insns: &[u8]) -> Result<OwnedFd, (io::Error, String)> {
    let license = b"GPL\0";
    let mut attr = ProgLoad {
        prog_type,
        insn_cnt: (insns.len() / 8) as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    let first = match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(r) => return Ok(fd_of(r)),
        Err(e) => e,
    };
    let mut log = vec![0u8; 1 << 20];
    attr.log_level = 1;
    attr.log_size = log.len() as u32;
    attr.log_buf = log.as_mut_ptr() as u64;
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(r) => Ok(fd_of(r)),
        Err(_) => {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            Err((first, String::from_utf8_lossy(&log[..end]).into_owned()))
        }
    }
}

/// A mapped BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`): the consumer page
/// (ours to write), then the producer page and the data area, mapped twice
/// in a row by the kernel so a record that wraps reads straight on.
pub(crate) struct RingMap {
    consumer: std::ptr::NonNull<u8>,
    producer: std::ptr::NonNull<u8>,
    page: usize,
    size: usize,
}

// SAFETY: the mappings are owned by this value alone; moving it to another
// thread moves that exclusive ownership.
unsafe impl Send for RingMap {}

impl RingMap {
    /// Maps the ring buffer `map` of `size` data bytes (a power-of-two
    /// multiple of the page size).
    pub(crate) fn map(map: &OwnedFd, size: usize) -> io::Result<RingMap> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mmap = |len: usize, prot: i32, offset: usize| -> io::Result<std::ptr::NonNull<u8>> {
            // SAFETY: a fresh shared mapping of the map's descriptor with
            // no address hint, so it overlaps no Rust object; the kernel
            // checks the length and offset against the ring's layout.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    prot,
                    libc::MAP_SHARED,
                    map.as_raw_fd(),
                    offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            std::ptr::NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)
        };
        let consumer = mmap(page, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        let producer = match mmap(page + 2 * size, libc::PROT_READ, page) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `consumer` was mapped above with this length.
                unsafe { libc::munmap(consumer.as_ptr().cast(), page) };
                return Err(e);
            }
        };
        Ok(RingMap {
            consumer,
            producer,
            page,
            size,
        })
    }

    fn consumer_pos(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the consumer page starts with the kernel's u64 consumer
        // position, 8-aligned (page-aligned), alive as long as `self`.
        unsafe {
            &*self
                .consumer
                .as_ptr()
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    fn producer_pos(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: as `consumer_pos`, for the producer page.
        unsafe {
            &*self
                .producer
                .as_ptr()
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    /// Hands every committed record to `f`, oldest first, and frees them.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(&[u8])) {
        use std::sync::atomic::{AtomicU32, Ordering};
        const BUSY: u32 = 1 << 31;
        const DISCARD: u32 = 1 << 30;
        const HEADER: usize = 8;
        let mut cons = self.consumer_pos().load(Ordering::Acquire);
        let prod = self.producer_pos().load(Ordering::Acquire);
        // SAFETY: the data area follows the producer page and is mapped
        // twice in a row (2 * size bytes), alive as long as `self`.
        let data = unsafe { self.producer.as_ptr().add(self.page) };
        while cons < prod {
            let at = (cons as usize) & (self.size - 1);
            // SAFETY: `at` is within the first copy of the data area; the
            // record header is 8-aligned (records are), and the kernel
            // writes it with a release store once the record is committed.
            let header = unsafe { &*data.add(at).cast::<AtomicU32>() };
            let len = header.load(Ordering::Acquire);
            if len & BUSY != 0 {
                break;
            }
            let n = (len & !(BUSY | DISCARD)) as usize;
            if len & DISCARD == 0 && n <= self.size {
                // SAFETY: `n` bytes after the header lie within the double
                // mapping (at + 8 + n < 2 * size), committed by the kernel.
                let body = unsafe { std::slice::from_raw_parts(data.add(at + HEADER), n) };
                f(body);
            }
            cons += ((n + HEADER + 7) & !7) as u64;
        }
        self.consumer_pos().store(cons, Ordering::Release);
    }
}

impl Drop for RingMap {
    fn drop(&mut self) {
        // SAFETY: both were mapped in `map` with these lengths and nothing
        // borrows them past `self`.
        unsafe {
            libc::munmap(self.consumer.as_ptr().cast(), self.page);
            libc::munmap(self.producer.as_ptr().cast(), self.page + 2 * self.size);
        }
    }
}
