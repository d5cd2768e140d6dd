//! Reading another process's memory with `process_vm_readv`: the rest of a
//! thread's stack beyond the slice a sample copied, or a stopped thread's
//! stack. The kernel checks ptrace-read permission (same user and not
//! undumpable, or CAP_SYS_PTRACE) on every call.

use std::io;

/// Reads `buf.len()` bytes of process `pid` at `addr`; returns how many
/// were read, which is less where the range runs into unmapped memory.
pub fn read_remote(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is valid for writes of its whole
    // length for the duration of the call; the remote iovec is only an
    // address in the other process, which the kernel checks (EFAULT).
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Reads up to `n` bytes of process `pid` at `addr` onto the end of `out`,
/// without zeroing them first (a deep-stack snapshot is up to 16 MiB a
/// round: zeroing and faulting in a fresh buffer each time was most of the
/// recorder's memory traffic). Returns the bytes read.
pub fn read_remote_append(pid: u32, addr: u64, out: &mut Vec<u8>, n: usize) -> io::Result<usize> {
    if n == 0 {
        return Ok(0);
    }
    out.reserve(n);
    let spare = out.spare_capacity_mut();
    let local = libc::iovec {
        iov_base: spare.as_mut_ptr().cast(),
        iov_len: n,
    };
    let remote = libc::iovec {
        iov_base: addr as usize as *mut libc::c_void,
        iov_len: n,
    };
    // SAFETY: `local` describes `n` bytes of `out`'s spare capacity (reserved
    // above), valid for writes for the duration of the call; the remote
    // iovec is only an address in the other process, which the kernel checks.
    let k = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if k < 0 {
        return Err(io::Error::last_os_error());
    }
    let k = (k as usize).min(n);
    // SAFETY: the kernel initialised the first `k` bytes of the spare
    // capacity, and `len + k` is within the capacity reserved above.
    unsafe { out.set_len(out.len() + k) };
    Ok(k)
}

/// Most iovecs one `process_vm_readv` call takes (`IOV_MAX`).
const MAX_IOV: usize = 1024;

/// Reads the 8-byte words of process `pid` at `addrs` into `out` (same
/// length) in as few calls as the kernel allows; returns how many leading
/// words were read (the kernel stops at the first that fails).
pub fn read_remote_words(pid: u32, addrs: &[u64], out: &mut [u64]) -> io::Result<usize> {
    let n = addrs.len().min(out.len());
    let mut done = 0;
    while done < n {
        let batch = (n - done).min(MAX_IOV);
        let out_part = &mut out[done..done + batch];
        let local: Vec<libc::iovec> = out_part
            .iter_mut()
            .map(|w| libc::iovec {
                iov_base: (w as *mut u64).cast(),
                iov_len: 8,
            })
            .collect();
        let remote: Vec<libc::iovec> = addrs[done..done + batch]
            .iter()
            .map(|&a| libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: 8,
            })
            .collect();
        // SAFETY: each local iovec points at one u64 of `out_part`, valid for
        // writes of 8 bytes during the call; both arrays hold `batch` entries
        // (≤ IOV_MAX) and outlive the call; remote addresses are checked by
        // the kernel.
        let got = unsafe {
            libc::process_vm_readv(
                pid as libc::pid_t,
                local.as_ptr(),
                batch as libc::c_ulong,
                remote.as_ptr(),
                batch as libc::c_ulong,
                0,
            )
        };
        if got < 0 {
            if done > 0 {
                break;
            }
            return Err(io::Error::last_os_error());
        }
        let words = got as usize / 8;
        done += words;
        if words < batch {
            break;
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_stops_at_unmapped_memory() {
        let data: Vec<u64> = (0..64).map(|i| i * 3 + 1).collect();
        let me = std::process::id();
        let mut buf = vec![0u8; 64 * 8];
        let n = read_remote(me, data.as_ptr() as u64, &mut buf).expect("own memory");
        assert_eq!(n, buf.len());
        assert_eq!(u64::from_ne_bytes(buf[8..16].try_into().unwrap()), 4);
        let addrs: Vec<u64> = (0..64).map(|i| data.as_ptr() as u64 + i * 8).collect();
        let mut words = vec![0u64; 64];
        assert_eq!(read_remote_words(me, &addrs, &mut words).unwrap(), 64);
        assert_eq!(words, data);
        // Page zero is never mapped.
        assert!(read_remote(me, 8, &mut buf).is_err());
        let mut mixed = vec![addrs[0], 8, addrs[2]];
        let mut out = vec![0u64; 3];
        assert_eq!(read_remote_words(me, &mixed, &mut out).unwrap(), 1);
        mixed.truncate(1);
        assert_eq!(out[0], 1);
    }
}
