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

/// Weights of at least this many bytes are put in transparent huge pages (native-cli's loader).
pub const HUGE_PAGE_MIN: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

static HUGE_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`advise_huge_pages`] advises (`KERNELS_HUGE_PAGES`, on unless `0`; read once by
/// [`init_huge_pages`]).
pub fn huge_pages() -> bool {
    HUGE_PAGES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads `KERNELS_HUGE_PAGES` (`0` turns the advice off). `main` calls it before any large
/// allocation.
pub fn init_huge_pages() {
    let on = std::env::var("KERNELS_HUGE_PAGES").map_or(true, |v| v.trim() != "0");
    HUGE_PAGES.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Advises the 2 MiB-aligned interior of `b` (a block of this process's memory that nothing
/// has touched yet) into transparent huge pages (`MADV_HUGEPAGE`) where [`huge_pages`] is on.
/// Linux with glibc only.
pub fn advise_huge_pages<T>(b: &[T]) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if huge_pages() {
        let p = b.as_ptr() as usize;
        let lo = p.next_multiple_of(HUGE_PAGE);
        let hi = p.saturating_add(core::mem::size_of_val(b)) / HUGE_PAGE * HUGE_PAGE;
        if hi > lo {
            // SAFETY: lo..hi lies inside `b`'s block; the advice changes only how its pages are
            // backed, never their contents.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = b;
}
