//! The mmap'd perf ring buffer: one metadata page followed by 2^n data pages.
//!
//! The kernel writes records at `data_head`; we copy everything between
//! `data_tail` and `data_head` out (handling the wrap at the end of the data
//! area) and then publish the new `data_tail`. Ordering as the
//! perf_event_open(2) man page requires: an acquire load of `data_head`
//! before reading data, a release store of `data_tail` after.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

/// A mapped perf ring buffer, unmapped on drop.
pub struct RingBuffer {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value alone; moving it to another
// thread moves that exclusive ownership.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) data pages plus the metadata page.
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<Self> {
        let page = super::page_size();
        let map_len = page * (1 + data_pages);
        // SAFETY: a fresh shared mapping of a perf event fd; we pass no
        // address hint, so it cannot overlap any existing Rust object.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let meta = base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the kernel's
        // perf_event_mmap_page; these two fields are set once at mmap time.
        let (off, size) = unsafe {
            (
                ptr::read_volatile(ptr::addr_of!((*meta).data_offset)),
                ptr::read_volatile(ptr::addr_of!((*meta).data_size)),
            )
        };
        // Kernels before 4.1 leave these zero: data starts after one page.
        let (data_offset, data_size) = if size == 0 {
            (page, page * data_pages)
        } else {
            (off as usize, size as usize)
        };
        Ok(RingBuffer {
            base,
            map_len,
            data_offset,
            data_size,
        })
    }

    fn head(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: data_head is an 8-byte aligned u64 inside the mapped
        // metadata page, which lives as long as `self`; the kernel updates
        // it concurrently, so it is only accessed atomically.
        unsafe { AtomicU64::from_ptr(ptr::addr_of_mut!((*meta).data_head)) }
    }

    fn tail(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: as for `head`; data_tail is written only by us and read
        // by the kernel, so it too is only accessed atomically.
        unsafe { AtomicU64::from_ptr(ptr::addr_of_mut!((*meta).data_tail)) }
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// The bytes the kernel has published and this reader has not consumed:
    /// two slices when they wrap around the end of the buffer (the second
    /// empty otherwise). Reading them in place spares copying every sample's
    /// stack out of the ring; the kernel does not write them until
    /// [`RingBuffer::consume`] frees them.
    pub fn peek(&self) -> (&[u8], &[u8]) {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        let avail = (head.wrapping_sub(tail) as usize).min(self.data_size);
        if avail == 0 {
            return (&[], &[]);
        }
        let start = (tail as usize) % self.data_size;
        let first = avail.min(self.data_size - start);
        // SAFETY: data_offset + data_size lies inside the mapping, which lives
        // as long as `self`; `start + first` and `avail - first` stay within
        // the data area; the bytes between tail and head are not written by
        // the kernel until `consume` moves data_tail past them, which takes
        // `&mut self` and so ends these borrows first.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            (
                std::slice::from_raw_parts(data.add(start), first),
                std::slice::from_raw_parts(data, avail - first),
            )
        }
    }

    /// Frees the first `n` bytes [`RingBuffer::peek`] showed for the kernel
    /// to write again.
    pub fn consume(&mut self, n: usize) {
        let tail = self.tail().load(Ordering::Relaxed);
        self.tail()
            .store(tail.wrapping_add(n as u64), Ordering::Release);
    }

    /// Appends every byte the kernel has published to `out` and frees that
    /// space in the buffer. Returns the number of bytes copied.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Relaxed);
        let avail = head.wrapping_sub(tail) as usize;
        if avail == 0 {
            return 0;
        }
        let avail = avail.min(self.data_size);
        let start = (tail as usize) % self.data_size;
        let first = avail.min(self.data_size - start);
        // SAFETY: data_offset + data_size lies inside the mapping; `start +
        // first` and `avail - first` stay within the data area; the bytes
        // between tail and head are not written by the kernel until we move
        // data_tail past them below.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, avail - first));
        }
        self.tail()
            .store(tail.wrapping_add(avail as u64), Ordering::Release);
        avail
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned, and no
        // reference into the mapping outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}
