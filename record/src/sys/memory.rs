//! How the C allocator keeps memory for this process.

/// Bounds glibc malloc to `n` arenas for this process: otherwise each
/// thread that allocates may get an arena of its own (up to 8 per CPU),
/// and an arena keeps much of what its threads freed. Whether the
/// allocator took it (not on other C libraries).
pub fn bound_malloc_arenas(n: i32) -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: `mallopt` takes two integers and changes the allocator's
        // settings, which glibc allows at any time (arenas made already
        // stay); no memory is touched through a pointer.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, n) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        let _ = n;
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn glibc_takes_the_bound() {
        assert_eq!(super::bound_malloc_arenas(8), cfg!(target_env = "gnu"));
    }
}
