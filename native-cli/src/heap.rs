//! The `kernels` process's memory: its allocator and the weights' huge pages.
//!
//! **The allocator.** Every op's output is a new allocation (about a hundred a decode step of a
//! small Llama, freed when the step ends), so the process's allocator is on the hot path of
//! decode. `main` installs mimalloc as the global allocator: against glibc's malloc, in two sets
//! of interleaved rounds, the stories15M's 1-thread decode was 2% and 4% faster (the sets'
//! means) and its prefill 5% and 6%, and a 0.5B GGUF within the rounds' spread or faster
//! (kernels-core/README.md, "Against candle"). It also keeps freed
//! memory for reuse, as glibc's `mallopt` settings here did before it: with glibc's defaults
//! every prefill faulted its activations' pages in again. The cost is memory: on a 0.5B Q4_K_M
//! file the peak was 21-26 MB above glibc's malloc's. Committing mimalloc's arenas on demand
//! (`MIMALLOC_ARENA_EAGER_COMMIT=0`) lowered the peak by 14-27 MB but made that file's decode
//! 4% slower, so mimalloc's defaults stay.
//!
//! **Huge pages.** Decode streams every weight each token, and in 4 KiB pages the TLB misses
//! cost it; the loader puts weights in transparent huge pages ([`advise_huge_pages`],
//! [`collapse_into_huge_pages`]).

use std::ops::Range;

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
        if let Some(r) = whole_huge_pages(p..p.saturating_add(core::mem::size_of_val(b))) {
            // SAFETY: `r` lies inside `b`'s block; the advice changes only how its pages are
            // backed, never their contents.
            unsafe {
                libc::madvise(r.start as *mut libc::c_void, r.len(), libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = b;
}

/// The 2 MiB-aligned ranges [`collapse_into_huge_pages`] advises for `spans`: spans less than a
/// huge page apart are taken as one (so the small blocks a loader writes one after another on
/// the heap are covered together, and the gap's pages with them), and each one is cut to the
/// huge pages it covers whole. Sorted and disjoint.
pub fn huge_page_ranges(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.retain(|s| s.end > s.start);
    spans.sort_unstable_by_key(|s| s.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for s in spans {
        match merged.last_mut() {
            Some(m) if s.start <= m.end.saturating_add(HUGE_PAGE) => m.end = m.end.max(s.end),
            _ => merged.push(s),
        }
    }
    merged.into_iter().filter_map(whole_huge_pages).collect()
}

/// The 2 MiB-aligned part of `r` (the huge pages it covers whole), if any.
fn whole_huge_pages(r: Range<usize>) -> Option<Range<usize>> {
    let lo = r.start.checked_next_multiple_of(HUGE_PAGE)?;
    let hi = r.end / HUGE_PAGE * HUGE_PAGE;
    (hi > lo).then_some(lo..hi)
}

/// Puts the memory under `spans` (address ranges of blocks this process has already written,
/// such as weights read from a checkpoint onto the heap) into transparent huge pages where
/// [`huge_pages`] is on: each of [`huge_page_ranges`] is advised (`MADV_HUGEPAGE`) and collapsed
/// in place (`MADV_COLLAPSE`, Linux 6.1 and later; an older kernel refuses it and the pages stay
/// as they were). The contents never change. Returns how many bytes were collapsed.
pub fn collapse_into_huge_pages(spans: Vec<Range<usize>>) -> usize {
    let mut collapsed = 0;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if huge_pages() {
        for r in huge_page_ranges(spans) {
            // SAFETY: both advices change only how pages are backed, never their contents. `r`
            // is the spans' blocks and the gaps between them (each under a huge page); a gap
            // that is not mapped makes `madvise` fail (ENOMEM), and the range is left as it
            // was.
            let ok = unsafe {
                let p = r.start as *mut libc::c_void;
                libc::madvise(p, r.len(), libc::MADV_HUGEPAGE) == 0
                    && libc::madvise(p, r.len(), libc::MADV_COLLAPSE) == 0
            };
            if ok {
                collapsed += r.len();
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    drop(spans);
    collapsed
}

#[cfg(test)]
// A list of one span is what the tests mean by `vec![a..b]`.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const M: usize = HUGE_PAGE;

    #[test]
    fn spans_less_than_a_huge_page_apart_are_collapsed_together() {
        // Three small blocks with gaps under 2 MiB: one range, cut to whole huge pages.
        let spans = vec![
            M + 100..M + 900_000,
            M + 1_000_000..2 * M,
            2 * M + 4096..5 * M - 1,
        ];
        assert_eq!(huge_page_ranges(spans), vec![2 * M..4 * M]);
        // Out of order, one nested in another, one empty: the same.
        let spans = vec![
            3 * M..3 * M,
            2 * M + 4096..5 * M - 1,
            M + 100..2 * M,
            3 * M..4 * M,
        ];
        assert_eq!(huge_page_ranges(spans), vec![2 * M..4 * M]);
        // More than a huge page apart: two ranges.
        let spans = vec![0..4 * M, 6 * M + 1..10 * M];
        assert_eq!(huge_page_ranges(spans), vec![0..4 * M, 7 * M..10 * M]);
        // Covering no huge page whole: nothing.
        assert!(huge_page_ranges(vec![M + 1..3 * M - 1]).is_empty());
        assert!(huge_page_ranges(vec![usize::MAX - 10..usize::MAX]).is_empty());
        assert!(huge_page_ranges(Vec::new()).is_empty());
    }

    /// Whether this kernel has `MADV_COLLAPSE` (6.1) with transparent huge pages not `never`.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn kernel_collapses() -> bool {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(|c: char| !c.is_ascii_digit())
            .map(|x| x.parse::<u32>());
        let version = (v.next(), v.next());
        let new_enough = matches!(version, (Some(Ok(a)), Some(Ok(b))) if (a, b) >= (6, 1));
        thp.is_ok_and(|t| !t.contains("[never]")) && new_enough
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn collapsing_keeps_the_contents() {
        init_huge_pages();
        let v: Vec<f32> = (0..(8 * M / 4)).map(|i| i as f32 * 0.5 - 7.0).collect();
        let copy = v.clone();
        let p = v.as_ptr() as usize;
        let n = collapse_into_huge_pages(vec![p..p + std::mem::size_of_val(&v[..])]);
        assert!(v.iter().zip(&copy).all(|(a, b)| a.to_bits() == b.to_bits()));
        if huge_pages() && kernel_collapses() {
            // 8 MiB anywhere covers at least three aligned huge pages.
            assert!(n >= 3 * M, "collapsed {n} bytes of 8 MiB");
        } else {
            println!("no MADV_COLLAPSE here (or KERNELS_HUGE_PAGES=0): collapsed {n} bytes");
        }
    }
}
