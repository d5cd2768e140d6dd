//! Which CPUs a thread may run on.

use std::io;

/// The CPUs the calling thread may run on, in order (empty when the kernel
/// does not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits, valid zeroed; sched_getaffinity
    // writes at most size_of::<cpu_set_t>() bytes into it; pid 0 is the
    // calling thread.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        set
    };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's size in bits.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Lets the calling thread run on `cpus` only (CPUs past the set's size
/// are left out).
pub fn run_on(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: as above; CPU_SET is given CPUs below CPU_SETSIZE only, and
    // sched_setaffinity reads the whole set it is given.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}
