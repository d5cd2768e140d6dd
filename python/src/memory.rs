//! Reading a process's memory: the one way this crate looks into a running
//! CPython, behind a trait so tests and other readers (a BPF copy, a core
//! file) can stand in.

use std::io;

/// Memory of one process.
pub trait Memory {
    /// Fills `buf` from `addr`; an error when any of it cannot be read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()>;

    /// A little-endian u64 at `addr`.
    fn u64(&self, addr: u64) -> io::Result<u64> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A little-endian i32 at `addr`.
    fn i32(&self, addr: u64) -> io::Result<i32> {
        let mut b = [0; 4];
        self.read(addr, &mut b)?;
        Ok(i32::from_le_bytes(b))
    }

    /// A byte at `addr`.
    fn u8(&self, addr: u64) -> io::Result<u8> {
        let mut b = [0; 1];
        self.read(addr, &mut b)?;
        Ok(b[0])
    }
}

/// A live process, read with `process_vm_readv` (the kernel checks the
/// right to trace it on every read).
#[derive(Debug, Clone, Copy)]
pub struct Process(pub u32);

impl Memory for Process {
    fn read(&self, addr: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = flamerec_perf::sys::read_remote(self.0, addr, buf)?;
        if n < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} of {} bytes readable at {addr:#x}", n, buf.len()),
            ));
        }
        Ok(())
    }
}
