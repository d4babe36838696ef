//! The `kernels` process's heap settings.
//!
//! A forward pass frees its activations when it ends and allocates them again in the next one.
//! glibc's malloc hands the top of its heap back to the kernel as soon as more than its trim
//! threshold is free there (128 KiB at first, then twice the largest freed `mmap`ed chunk), and
//! serves large allocations with fresh `mmap`s; so every prefill faulted the same megabytes of
//! zeroed pages back in (page faults and the kernel's page clearing were about 10% of a
//! 256-token prefill in `perf`). [`keep_freed_memory`] keeps them.

/// Serves allocations below 32 MiB from the heap and keeps up to 128 MiB of freed memory at
/// its top instead of returning it to the kernel. Larger blocks (model weights, files read
/// whole) are still mapped and unmapped on their own. glibc only; elsewhere nothing.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's parameters; `main` calls this first, before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}
