//! `kernels bench llama --read-rate`: how fast this machine's cores read a buffer as large as
//! the weights one decode step streams, measured in the same process right after the decode
//! runs, so a CPU decode figure can be set against what reading its weights alone allows.
//!
//! The buffer is placed as the loader places weights (transparent huge pages where
//! `KERNELS_HUGE_PAGES` allows: advised before it is written, collapsed after), then read front to
//! back in passes by `threads` threads, each one contiguous slice, with a plain sum of 64-bit
//! words in the widest vector registers the CPU has, four at a time ([`read_all`]). A pass
//! lasts from its first thread's start to its last one's end; the figure is the median pass.
//! Decode cannot read its weights faster than this loop reads the same bytes, unless they sit
//! in a faster level of the caches than the loop's buffer does: a decode step reads every
//! weight once, the loop its buffer once a pass, so both run from the same level.

use std::sync::Barrier;
use std::time::Instant;

use crate::{CliResult, fail};

/// Passes of the buffer: at least this many.
const MIN_PASSES: usize = 5;
/// At most this many passes.
const MAX_PASSES: usize = 50;
/// Passes are added until about this many bytes are read in all.
const TARGET_BYTES: usize = 4_000_000_000;

/// What [`measure`] read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadRate {
    /// Bytes of the buffer (one pass).
    pub bytes: usize,
    /// Threads reading it, each a contiguous slice.
    pub threads: usize,
    /// Passes timed.
    pub passes: usize,
    /// The median pass's rate, 10^9 bytes a second.
    pub median_gb_s: f64,
    /// The fastest pass's rate.
    pub best_gb_s: f64,
}

/// The wrapping sum of `words`, read with the widest vector loads this CPU has (AVX-512 or
/// AVX2 on x86_64, detected at run time; the compiler's baseline elsewhere).
pub fn read_all(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (detected above).
            return unsafe { read_all_avx512(words) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (detected above).
            return unsafe { read_all_avx2(words) };
        }
    }
    read_all_portable(words)
}

/// Four 512-bit accumulators, four loads a step (256 bytes), the rest scalar.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn read_all_avx512(words: &[u64]) -> u64 {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi64, _mm512_loadu_si512, _mm512_reduce_add_epi64,
        _mm512_setzero_si512,
    };
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut chunks = words.chunks_exact(32);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 32 words, so the 8 at `8 * i` (i < 4) are within it; the load
            // takes any alignment.
            let v = unsafe { _mm512_loadu_si512(c.as_ptr().add(8 * i).cast::<__m512i>()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let sum = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    (_mm512_reduce_add_epi64(sum) as u64).wrapping_add(read_all_portable(chunks.remainder()))
}

/// Four 256-bit accumulators, four loads a step (128 bytes), the rest scalar.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_all_avx2(words: &[u64]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_loadu_si256, _mm256_setzero_si256, _mm256_storeu_si256,
    };
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut chunks = words.chunks_exact(16);
    for c in &mut chunks {
        for (i, a) in acc.iter_mut().enumerate() {
            // SAFETY: `c` holds 16 words, so the 4 at `4 * i` (i < 4) are within it; the load
            // takes any alignment.
            let v = unsafe { _mm256_loadu_si256(c.as_ptr().add(4 * i).cast::<__m256i>()) };
            *a = _mm256_add_epi64(*a, v);
        }
    }
    let sum = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    let mut lanes = [0u64; 4];
    // SAFETY: `lanes` is 32 bytes; the store takes any alignment.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), sum) };
    lanes
        .iter()
        .fold(read_all_portable(chunks.remainder()), |s, &l| {
            s.wrapping_add(l)
        })
}

/// The sum over eight scalar accumulators (where no vector path applies, and the tails).
fn read_all_portable(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        for (a, &w) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(w);
        }
    }
    let tail = chunks
        .remainder()
        .iter()
        .fold(0u64, |s, &w| s.wrapping_add(w));
    acc.iter().fold(tail, |s, &a| s.wrapping_add(a))
}

/// Passes for a buffer of `bytes`: enough to read about [`TARGET_BYTES`], within
/// [`MIN_PASSES`]..=[`MAX_PASSES`].
fn passes_for(bytes: usize) -> usize {
    (TARGET_BYTES / bytes.max(1)).clamp(MIN_PASSES, MAX_PASSES)
}

/// Reads a buffer of `bytes` (rounded up to whole 64-bit words, at least one) with `threads`
/// threads (at least one, at most one per word) and returns the rates. The buffer is
/// allocated fallibly and the threads started fallibly: either failure is an error naming
/// `--read-rate`.
pub fn measure(bytes: usize, threads: usize) -> CliResult<ReadRate> {
    let words = bytes.div_ceil(8).max(1);
    let mut buf: Vec<u64> = Vec::new();
    buf.try_reserve_exact(words).map_err(|_| {
        fail(format!(
            "bench llama --read-rate: no memory for the {} bytes of the read buffer (the weights' size)",
            words.saturating_mul(8)
        ))
    })?;
    crate::heap::advise_huge_pages(buf.spare_capacity_mut());
    // Distinct values, so no page of the buffer is shared or left unwritten.
    buf.extend((0..words as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    // Memory the allocator had used before is in 4 KiB pages already: collapsed in place, as
    // the loader does with the weights it wrote on the heap.
    let at = buf.as_ptr() as usize;
    let span = at..at.saturating_add(words * 8);
    crate::heap::collapse_into_huge_pages(std::iter::once(span).collect());
    let threads = threads.clamp(1, words);
    let per = words.div_ceil(threads);
    let slices: Vec<&[u64]> = buf.chunks(per).collect();
    let passes = passes_for(words * 8);
    let start = Barrier::new(slices.len());
    let times = std::thread::scope(|s| -> CliResult<Vec<Vec<(Instant, Instant)>>> {
        // Every reader is started before any pass: one that waits on the barrier for a thread
        // that could not start would wait for ever. Each waits for its go; if a thread cannot
        // start, the senders are dropped as this returns and the started ones end unread.
        let mut readers = Vec::with_capacity(slices.len());
        for (i, &slice) in slices.iter().enumerate() {
            let (go, ready) = std::sync::mpsc::channel::<()>();
            let start = &start;
            let reader = std::thread::Builder::new()
                .name(format!("read-rate-{i}"))
                .spawn_scoped(s, move || {
                    let mut spans = Vec::with_capacity(passes);
                    if ready.recv().is_err() {
                        return spans;
                    }
                    for _ in 0..passes {
                        start.wait();
                        let t = Instant::now();
                        std::hint::black_box(read_all(std::hint::black_box(slice)));
                        spans.push((t, Instant::now()));
                    }
                    spans
                })
                .map_err(|e| {
                    fail(format!(
                        "bench llama --read-rate: could not start reading thread {} of {}: {e}",
                        i + 1,
                        slices.len()
                    ))
                })?;
            readers.push((reader, go));
        }
        for (_, go) in &readers {
            // A reader that is gone has nothing to time; the check below reports it.
            let _ = go.send(());
        }
        Ok(readers
            .into_iter()
            .map(|(r, _)| r.join().unwrap_or_default())
            .collect())
    })?;
    if times.iter().any(|t| t.len() != passes) {
        return Err(fail(
            "bench llama --read-rate: a reading thread failed or timed nothing",
        ));
    }
    // A pass lasts from its first thread's start to its last thread's end (with more threads
    // than cores they take turns, and each one's own time would say nothing).
    let mut pass_secs: Vec<f64> = (0..passes)
        .filter_map(|p| {
            let spans = times.iter().filter_map(|t| t.get(p));
            let first = spans.clone().map(|&(a, _)| a).min()?;
            let last = spans.map(|&(_, b)| b).max()?;
            Some(last.duration_since(first).as_secs_f64())
        })
        .collect();
    // A clock step under a nanosecond (a tiny buffer) counts as one.
    let rate = |secs: f64| (words * 8) as f64 / secs.max(1e-9) / 1e9;
    let Some(median) = super::llama::median(&mut pass_secs) else {
        return Err(fail("bench llama --read-rate: no pass was timed"));
    };
    // `median` sorted the passes: the first is the fastest.
    let fastest = pass_secs.first().copied().unwrap_or(median);
    Ok(ReadRate {
        bytes: words * 8,
        threads: slices.len(),
        passes,
        median_gb_s: rate(median),
        best_gb_s: rate(fastest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_all_sums_every_word_with_wraparound() {
        for n in [0usize, 1, 7, 8, 31, 32, 33, 63, 64, 1000] {
            let w: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
            let want = w.iter().fold(0u64, |s, &x| s.wrapping_add(x));
            assert_eq!(read_all(&w), want, "{n} words");
            assert_eq!(read_all_portable(&w), want, "{n} words");
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: detected above.
                    assert_eq!(unsafe { read_all_avx512(&w) }, want, "{n} words");
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: detected above.
                    assert_eq!(unsafe { read_all_avx2(&w) }, want, "{n} words");
                }
            }
        }
        assert_eq!(read_all(&[u64::MAX, 2]), 1);
    }

    #[test]
    fn passes_stay_within_their_bounds() {
        assert_eq!(passes_for(0), MAX_PASSES);
        assert_eq!(passes_for(60_000_000), MAX_PASSES);
        assert_eq!(passes_for(400_000_000), 10);
        assert_eq!(passes_for(4_000_000_000), MIN_PASSES);
    }

    #[test]
    fn measure_reports_the_buffer_threads_and_passes_it_read() {
        for (bytes, threads, want_threads) in [(1 << 20, 1, 1), (1 << 20, 3, 3), (5, 4, 1)] {
            let r = measure(bytes, threads).unwrap();
            assert_eq!(r.bytes, bytes.div_ceil(8) * 8);
            assert_eq!(r.threads, want_threads);
            assert_eq!(r.passes, passes_for(r.bytes));
            assert!(r.median_gb_s.is_finite() && r.median_gb_s > 0.0, "{r:?}");
            assert!(r.best_gb_s >= r.median_gb_s, "{r:?}");
        }
    }
}
