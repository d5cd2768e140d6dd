//! Copying a thread's user stack out of its process: from the stack pointer
//! up to the end of the mapping that holds it, at most [`MAX_STACK`] bytes.
//! The kernel checks ptrace-read permission on every read.

use std::io;

use flamerec_perf::sys::read_remote;

use flamerec_perf::procfs::Mappings;

/// Most bytes of one thread's stack that are copied: deep enough for
/// interpreters and deep recursion, small enough to copy in well under a
/// millisecond.
pub(crate) const MAX_STACK: usize = 512 * 1024;

/// Appends to `out` the stack of `pid` from `sp + out.len()` on (`out`
/// may already hold the first bytes, e.g. a perf sample's copy), up to the
/// end of the mapping holding `sp` or [`MAX_STACK`] bytes in all.
/// `maps` is read again when it does not know the stack (a thread started
/// after it was read).
pub(crate) fn copy(pid: u32, sp: u64, maps: &mut Mappings, out: &mut Vec<u8>) -> io::Result<()> {
    let end = match maps.end_of(sp) {
        Some(end) => end,
        None => {
            *maps = Mappings::of(pid)?;
            maps.end_of(sp).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("stack pointer {sp:#x} is in no mapping of process {pid}"),
                )
            })?
        }
    };
    let want = usize::try_from(end - sp)
        .unwrap_or(MAX_STACK)
        .min(MAX_STACK);
    let have = out.len();
    if want <= have {
        return Ok(());
    }
    out.resize(want, 0);
    let from = sp + have as u64;
    match read_remote(pid, from, &mut out[have..]) {
        Ok(n) => {
            out.truncate(have + n);
            Ok(())
        }
        Err(e) => {
            out.truncate(have);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_this_threads_stack_up_to_its_mapping_end() {
        let marker: [u64; 4] = std::hint::black_box([0x1122_3344_5566_7788; 4]);
        let sp = marker.as_ptr() as u64;
        let me = std::process::id();
        let mut maps = Mappings::default();
        let mut out = Vec::new();
        copy(me, sp, &mut maps, &mut out).unwrap();
        assert!(out.len() >= 32 && out.len() <= MAX_STACK, "{}", out.len());
        assert_eq!(&out[..8], &0x1122_3344_5566_7788u64.to_ne_bytes());
        // A copy that already has bytes is continued, not redone.
        let mut part = vec![0xaa; 8];
        copy(me, sp, &mut maps, &mut part).unwrap();
        assert_eq!(part.len(), out.len());
        assert_eq!(&part[..8], &[0xaa; 8]);
        assert_eq!(&part[8..16], &out[8..16]);
    }

    #[test]
    fn an_address_in_no_mapping_is_an_error() {
        let mut maps = Mappings::default();
        let err = copy(std::process::id(), 8, &mut maps, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("no mapping"), "{err}");
    }
}
