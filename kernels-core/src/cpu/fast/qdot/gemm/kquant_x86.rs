//! Prefill's K-quant GEMMs (`Q4_K`, `Q6_K`) on x86: eight weight rows side by side in the
//! eight `i32` lanes of a vector, against `RX` quantized rows of `x` at a time, with no f32
//! copy of the weight.
//!
//! A group of eight weight rows is repacked once per block of rows of `x` (in vectors: the
//! eight rows' words through an 8 x 8 transpose), in 4-byte units across the lanes: vector `t`
//! of 32-element chunk `c` holds the chunk's values `4t..4t + 4` of every row (lane `j`: row
//! `j`). `Q4_K` keeps its nibbles (a chunk's 32 bytes hold two
//! chunks: the low and the high nibbles), `Q6_K` is widened to its unsigned 6-bit values (one
//! byte each). The sub-block scales (and `Q4_K`'s mins) are unpacked into lanes and the
//! super-block scales converted to f32. Then per row of `x` and sub-block, multiply-adds on
//! the activation's groups of four bytes broadcast give the eight rows' exact integer sums,
//! scaled by the sub-block scales in the lanes (AVX2: in the same `vpmaddwd`; VNNI:
//! `vpdpbusd`, then one `vpmulld` per sub-block). `Q4_K`'s mins and `Q6_K`'s offset of 32
//! take one `vpmaddwd` per pair of sub-blocks against the activation's sub-block sums.
//!
//! The repack is where the weight is read from memory: eight rows' super-blocks side by side,
//! which the hardware prefetcher does not follow. So the first tile of each group prefetches
//! the next group's rows into L2, a super-block of each row per super-block it multiplies, and
//! the reads overlap its arithmetic. `kernels bench llama --prefill-len 16 --new-tokens 1 --runs
//! 3` on a random Qwen2.5-1.5B-shaped Q4_K_M file (Intel Xeon, AVX-512 VNNI, 2026-12-01, six
//! interleaved pairs, prefill tok/s without -> with): 1 thread 22.8-26.6 -> 26.5-29.0 (every
//! pair faster, 1.02-1.22x); 2 threads 32.6-50.1 -> 30.6-53.1 (four pairs of six faster,
//! 0.94-1.15x).
//!
//! The numbers are the portable kernel's (`super::super::portable`), output for output: per
//! super-block the exact integer sums `isum` and `msum`, then `acc += d * dx * isum - dmin *
//! dx * msum` in f32, in that order (`Q6_K`: `acc += d * dx * isum`). They are not the one-row
//! decode kernels' (which sum eight lanes of partial sums in f32), so prefill and decode of a
//! K-quant weight differ by f32 rounding, within the published budgets.

use core::arch::x86_64::*;

use super::super::XRow;
use super::super::x86::{Dot, prefetch_lines, q4_k_scales};
use crate::cpu::fast::buffers::scratch;
use crate::cpu::fast::matref::{f16c_at as f16_at, transpose8};
use crate::error::Result;

/// Weight rows per group: one `i32` lane each.
const JW: usize = 8;
/// The formats, as const parameters.
pub(super) const Q4K: u8 = 0;
pub(super) const Q6K: u8 = 1;

/// Super-block bytes of format `F`.
const fn sb_bytes(f: u8) -> usize {
    if f == Q4K { 144 } else { 210 }
}

/// Sub-blocks per super-block: their scales in lanes, one vector each.
const fn subs(f: u8) -> usize {
    if f == Q4K { 8 } else { 16 }
}

/// Vectors of weight values per super-block: `Q4_K` 4 chunks of nibbles, `Q6_K` 8 of bytes,
/// 8 vectors each.
const fn values(f: u8) -> usize {
    if f == Q4K { 32 } else { 64 }
}

/// Where a repacked super-block's parts start, in `u32` words: the values, the sub-block scales
/// (an `i32` lane each), the pairs against the activation's sums (two `i16` to a lane: `Q4_K`'s
/// mins, `Q6_K`'s scales), `d`, and `Q4_K`'s `dmin`.
const fn scales_at(f: u8) -> usize {
    values(f) * JW
}
const fn pairs_at(f: u8) -> usize {
    scales_at(f) + subs(f) * JW
}
/// Pairs per super-block: `Q4_K`'s 8 mins against 32-element sums, `Q6_K`'s 16 scales
/// against 16-element sums.
const fn npairs(f: u8) -> usize {
    subs(f) / 2
}
const fn d_at(f: u8) -> usize {
    pairs_at(f) + npairs(f) * JW
}
/// `u32` words per repacked super-block of a group.
const fn per_sb(f: u8) -> usize {
    d_at(f) + 2 * JW
}

/// Most bytes of 8-bit activations in one block of rows of `x`: each group of weight rows is
/// repacked once per block, so a block of 1 MiB makes the repack a few percent of the
/// products (the rows of `x` stay in L2 on the machines measured: 1-2 MiB per core).
const X_BLOCK_BYTES: usize = 1 << 20;

/// Every weight row of `w` (whole super-blocks of format `F`, `row_bytes` each) against every
/// row of `xs`: `out[j * xs.len() + r]`. Nothing is written where the operands disagree.
///
/// # Safety
/// The CPU has the features of `D`'s family.
#[inline(always)]
pub(super) unsafe fn kquant<D: Dot, const RX: usize, const F: u8>(
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    let nr = xs.len();
    let nb = row_bytes / sb_bytes(F);
    if nr == 0
        || nb == 0
        || row_bytes != nb * sb_bytes(F)
        || xs
            .iter()
            .any(|x| x.qs.len() < 256 * nb || x.d.len() < nb || x.sums.len() < 16 * nb)
    {
        return Ok(());
    }
    let n = (w.len() / row_bytes).min(out.len() / nr);
    // The activations' sub-block sums, two to a word as `i16` (each at most 32 * 127): of 32
    // elements for `Q4_K`, of 16 for `Q6_K`.
    let np = npairs(F);
    let mut pairs = scratch(nr * nb * np, 0u32, "activation sub-block sums")?;
    for (x, p) in xs.iter().zip(pairs.chunks_exact_mut(nb * np)) {
        for (i, q) in p.iter_mut().enumerate() {
            let (a, b) = if F == Q4K {
                let s = &x.sums[4 * i..4 * i + 4];
                (s[0] + s[1], s[2] + s[3])
            } else {
                (x.sums[2 * i], x.sums[2 * i + 1])
            };
            *q = (a as u16 as u32) | ((b as u16 as u32) << 16);
        }
    }
    let mut group = scratch(nb * per_sb(F), 0u32, "repacked weight group")?;
    let per_block = (X_BLOCK_BYTES / (256 * nb)).max(RX) / RX * RX;
    let mut r0 = 0;
    while r0 < nr {
        let r1 = (r0 + per_block).min(nr);
        let mut j = 0;
        while j < n {
            let m = JW.min(n - j);
            let rows = &w[j * row_bytes..(j + m) * row_bytes];
            // SAFETY: the caller's family has AVX2 and F16C.
            unsafe {
                if F == Q4K {
                    repack_q4_k(rows, row_bytes, &mut group);
                } else {
                    repack_q6_k(rows, row_bytes, &mut group);
                }
            }
            let mut store = |r: usize, lanes: &[f32; JW]| {
                for (jj, &v) in lanes.iter().enumerate().take(m) {
                    out[(j + jj) * nr + r] = v;
                }
            };
            // The next group's rows, prefetched into L2 by the first tile: the repack reads
            // them from memory, and here the reads overlap the tile's arithmetic.
            let next_end = w.len().min((j + m + JW) * row_bytes);
            let mut next = w.get((j + m) * row_bytes..next_end).unwrap_or(&[]);
            let mut r = r0;
            while r + RX <= r1 {
                let p = &pairs[r * nb * np..];
                let pf = (core::mem::take(&mut next), row_bytes);
                let res = unsafe { tile::<D, RX, F>(&group, nb, &xs[r..r + RX], p, pf) };
                res.iter().enumerate().for_each(|(i, l)| store(r + i, l));
                r += RX;
            }
            while r < r1 {
                let p = &pairs[r * nb * np..];
                let pf = (core::mem::take(&mut next), row_bytes);
                let res = unsafe { tile::<D, 1, F>(&group, nb, &xs[r..r + 1], p, pf) };
                store(r, &res[0]);
                r += 1;
            }
            j += m;
        }
        r0 = r1;
    }
    Ok(())
}

/// 32 bytes of `b` from `at`.
#[inline(always)]
unsafe fn load32_at(b: &[u8], at: usize) -> __m256i {
    let b = &b[at..at + 32];
    // SAFETY: 32 bytes in bounds (sliced above).
    unsafe { _mm256_loadu_si256(b.as_ptr() as *const __m256i) }
}

/// Eight bytes of `b` from `at`, in the low half of a vector.
#[inline(always)]
unsafe fn load8_at(b: &[u8], at: usize) -> __m128i {
    let b = &b[at..at + 8];
    // SAFETY: 8 bytes in bounds (sliced above).
    unsafe { _mm_loadl_epi64(b.as_ptr() as *const __m128i) }
}

/// `v` into words `at..at + 8` of `g`.
#[inline(always)]
unsafe fn store8(g: &mut [u32], at: usize, v: __m256i) {
    let g = &mut g[at..at + JW];
    // SAFETY: eight words in bounds (sliced above).
    unsafe { _mm256_storeu_si256(g.as_mut_ptr() as *mut __m256i, v) }
}

/// The eight rows' vectors `v` transposed: their first `words` words into words `at..at + 8 *
/// words` of `g` (word `at + 8 i + j` is word `i` of `v[j]`). (Loops, not closures, build
/// the vectors: a closure does not take its caller's target features.)
#[inline(always)]
unsafe fn transposed_into(g: &mut [u32], (at, words): (usize, usize), v: [__m256i; JW]) {
    unsafe {
        let v = transpose8(v);
        for (i, v) in v.into_iter().enumerate().take(words) {
            store8(g, at + JW * i, v);
        }
    }
}

/// The (at most [`JW`]) `Q4_K` weight rows in `w` into the lanes of `group`, eight rows'
/// words at a time through an 8 x 8 transpose; lanes past the rows hold zeros (scales 0:
/// their sums are not stored).
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[inline(always)]
unsafe fn repack_q4_k(w: &[u8], row_bytes: usize, group: &mut [u32]) {
    const F: u8 = Q4K;
    let m = (w.len() / row_bytes).min(JW);
    let nb = row_bytes / sb_bytes(F);
    for (b, g) in group.chunks_exact_mut(per_sb(F)).enumerate().take(nb) {
        let sb: [&[u8]; JW] = core::array::from_fn(|j| {
            let at = j.min(m.saturating_sub(1)) * row_bytes + b * sb_bytes(F);
            w.get(at..at + sb_bytes(F)).unwrap_or(&[])
        });
        unsafe {
            let zero = _mm256_setzero_si256();
            // Values: words 8t..8t + 8 of each row (chunk t / 2's nibbles).
            for t in 0..4 {
                let mut v = [zero; JW];
                for j in 0..m {
                    v[j] = load32_at(sb[j], 16 + 32 * t);
                }
                transposed_into(g, (8 * t * JW, 8), v);
            }
            let (mut sc, mut mn) = ([zero; JW], [zero; JW]);
            for j in 0..m {
                let sm = q4_k_scales(sb[j]);
                sc[j] = _mm256_cvtepu8_epi32(sm);
                // The mins two to a word (`u16` each): pairs 0-3 in words 0-3.
                mn[j] = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128::<8>(sm)));
            }
            transposed_into(g, (scales_at(F), 8), sc);
            transposed_into(g, (pairs_at(F), 4), mn);
        }
        for j in 0..JW {
            let (d, dmin) = if j < m {
                // SAFETY: F16C (the caller).
                unsafe { (f16_at(sb[j], 0).to_bits(), f16_at(sb[j], 2).to_bits()) }
            } else {
                (0, 0)
            };
            g[d_at(F) + j] = d;
            g[d_at(F) + JW + j] = dmin;
        }
    }
}

/// The (at most [`JW`]) `Q6_K` weight rows in `w` into the lanes of `group`, their values
/// unsigned (`q + 32`, in `[0, 63]`), eight rows' words at a time through an 8 x 8 transpose;
/// lanes past the rows hold zeros.
///
/// # Safety
/// The CPU has AVX2 and F16C.
#[inline(always)]
unsafe fn repack_q6_k(w: &[u8], row_bytes: usize, group: &mut [u32]) {
    const F: u8 = Q6K;
    let m = (w.len() / row_bytes).min(JW);
    let nb = row_bytes / sb_bytes(F);
    for (b, g) in group.chunks_exact_mut(per_sb(F)).enumerate().take(nb) {
        let sb: [&[u8]; JW] = core::array::from_fn(|j| {
            let at = j.min(m.saturating_sub(1)) * row_bytes + b * sb_bytes(F);
            w.get(at..at + sb_bytes(F)).unwrap_or(&[])
        });
        unsafe {
            let zero = _mm256_setzero_si256();
            let (lo4, three) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
            // Values `32k..32k + 32` in order (`quant::decode`'s layout: halves of 128, four
            // runs of 32 from the low nibbles of `ql[0..32]`, of `ql[32..64]`, their high
            // nibbles, each with two bits of `qh`), then words `8k..8k + 8` of the rows.
            for k in 0..8 {
                let (h, run) = (k / 4, k % 4);
                let mut v = [zero; JW];
                for j in 0..m {
                    let q = load32_at(sb[j], 64 * h + 32 * (run % 2));
                    let e = load32_at(sb[j], 128 + 32 * h);
                    let q = if run < 2 {
                        q
                    } else {
                        _mm256_srli_epi16::<4>(q)
                    };
                    let e = match run {
                        0 => e,
                        1 => _mm256_srli_epi16::<2>(e),
                        2 => _mm256_srli_epi16::<4>(e),
                        _ => _mm256_srli_epi16::<6>(e),
                    };
                    // Two bits shifted by 4 stay inside their byte.
                    v[j] = _mm256_or_si256(
                        _mm256_and_si256(q, lo4),
                        _mm256_slli_epi16::<4>(_mm256_and_si256(e, three)),
                    );
                }
                transposed_into(g, (8 * k * JW, 8), v);
            }
            for half in 0..2 {
                let mut v = [zero; JW];
                for j in 0..m {
                    v[j] = _mm256_cvtepi8_epi32(load8_at(sb[j], 192 + 8 * half));
                }
                transposed_into(g, (scales_at(F) + 8 * half * JW, 8), v);
            }
            // The scales two to a word (`i16` each).
            let mut v = [zero; JW];
            for j in 0..m {
                let s = &sb[j][192..208];
                v[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(s.as_ptr() as *const __m128i));
            }
            transposed_into(g, (pairs_at(F), 8), v);
        }
        for j in 0..JW {
            g[d_at(F) + j] = if j < m {
                // SAFETY: F16C (the caller).
                unsafe { f16_at(sb[j], 208).to_bits() }
            } else {
                0
            };
            g[d_at(F) + JW + j] = 0;
        }
    }
}

/// Four bytes of `q` at `at`, as one `i32`, in every lane.
#[inline(always)]
unsafe fn bcast4(q: &[i8], at: usize) -> __m256i {
    unsafe { _mm256_set1_epi32(core::ptr::read_unaligned(q.as_ptr().add(at) as *const i32)) }
}

/// The repacked group (format `F`) against the `R` rows `xs` (`pairs`: their sub-block sums,
/// from the first row's): `out[r][j]`. Super-block by super-block, the same super-blocks of
/// the rows in `prefetch` (weight rows of `row_bytes`; empty for none) are prefetched into L2.
#[inline(always)]
unsafe fn tile<D: Dot, const R: usize, const F: u8>(
    group: &[u32],
    nb: usize,
    xs: &[XRow],
    pairs: &[u32],
    (prefetch, row_bytes): (&[u8], usize),
) -> [[f32; JW]; R] {
    let np = npairs(F);
    let xq: [&[i8]; R] = core::array::from_fn(|r| &xs[r].qs[..256 * nb]);
    let xd: [&[f32]; R] = core::array::from_fn(|r| &xs[r].d[..nb]);
    let xp: [&[u32]; R] = core::array::from_fn(|r| &pairs[r * nb * np..(r + 1) * nb * np]);
    let g = &group[..nb * per_sb(F)];
    let vec_at = |at: usize| unsafe { _mm256_loadu_si256(g.as_ptr().add(at) as *const __m256i) };
    unsafe {
        let low = _mm256_set1_epi8(0x0F);
        let zero = _mm256_setzero_si256();
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let gb = b * per_sb(F);
            let mut at = b * sb_bytes(F);
            while at < prefetch.len() {
                // A line a super-block's last byte may leave out starts the next one's (or the
                // next row's first, already prefetched).
                prefetch_lines::<_MM_HINT_T1>(prefetch.as_ptr().wrapping_add(at), sb_bytes(F));
                at += row_bytes;
            }
            let mut isum = [zero; R];
            // Per 32-byte vector run: two sub-blocks (`Q4_K`: a chunk's low and high nibbles, 32
            // elements each; `Q6_K`: a chunk's two halves, 16 elements each).
            for c in 0..subs(F) / 2 {
                let (sl, sh) = (
                    vec_at(gb + scales_at(F) + 2 * c * JW),
                    vec_at(gb + scales_at(F) + (2 * c + 1) * JW),
                );
                if D::VNNI {
                    // Exact sums per sub-block, then scaled: `vpdpbusd`, one `vpmulld` each.
                    let mut lo_sum = [zero; R];
                    let mut hi_sum = [zero; R];
                    if F == Q4K {
                        let xc = 256 * b + 64 * c;
                        for t in 0..8 {
                            let v = vec_at(gb + (8 * c + t) * JW);
                            let lo = _mm256_and_si256(v, low);
                            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                            for r in 0..R {
                                let q = xq[r];
                                lo_sum[r] = D::dot_u(lo_sum[r], lo, bcast4(q, xc + 4 * t));
                                hi_sum[r] = D::dot_u(hi_sum[r], hi, bcast4(q, xc + 32 + 4 * t));
                            }
                        }
                    } else {
                        let xc = 256 * b + 32 * c;
                        for t in 0..4 {
                            let lo = vec_at(gb + (8 * c + t) * JW);
                            let hi = vec_at(gb + (8 * c + 4 + t) * JW);
                            for r in 0..R {
                                let q = xq[r];
                                lo_sum[r] = D::dot_u(lo_sum[r], lo, bcast4(q, xc + 4 * t));
                                hi_sum[r] = D::dot_u(hi_sum[r], hi, bcast4(q, xc + 16 + 4 * t));
                            }
                        }
                    }
                    for r in 0..R {
                        let s = _mm256_add_epi32(
                            _mm256_mullo_epi32(lo_sum[r], sl),
                            _mm256_mullo_epi32(hi_sum[r], sh),
                        );
                        isum[r] = _mm256_add_epi32(isum[r], s);
                    }
                } else {
                    // AVX2: the scale in the `vpmaddwd` that sums `vpmaddubsw`'s pairs (`Q6_K`'s
                    // scales are signed: the shift keeps the sign in the high half).
                    let sl = _mm256_or_si256(
                        _mm256_and_si256(sl, _mm256_set1_epi32(0xFFFF)),
                        _mm256_slli_epi32(sl, 16),
                    );
                    let sh = _mm256_or_si256(
                        _mm256_and_si256(sh, _mm256_set1_epi32(0xFFFF)),
                        _mm256_slli_epi32(sh, 16),
                    );
                    if F == Q4K {
                        let xc = 256 * b + 64 * c;
                        for t in 0..8 {
                            let v = vec_at(gb + (8 * c + t) * JW);
                            let lo = _mm256_and_si256(v, low);
                            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                            for r in 0..R {
                                let q = xq[r];
                                let p = D::dot_scaled(isum[r], lo, bcast4(q, xc + 4 * t), sl);
                                isum[r] = D::dot_scaled(p, hi, bcast4(q, xc + 32 + 4 * t), sh);
                            }
                        }
                    } else {
                        let xc = 256 * b + 32 * c;
                        for t in 0..4 {
                            let lo = vec_at(gb + (8 * c + t) * JW);
                            let hi = vec_at(gb + (8 * c + 4 + t) * JW);
                            for r in 0..R {
                                let q = xq[r];
                                let p = D::dot_scaled(isum[r], lo, bcast4(q, xc + 4 * t), sl);
                                isum[r] = D::dot_scaled(p, hi, bcast4(q, xc + 16 + 4 * t), sh);
                            }
                        }
                    }
                }
            }
            let pv: [__m256i; 8] = core::array::from_fn(|p| {
                if p < np {
                    vec_at(gb + pairs_at(F) + p * JW)
                } else {
                    zero
                }
            });
            let d = _mm256_castsi256_ps(vec_at(gb + d_at(F)));
            let dmin = _mm256_castsi256_ps(vec_at(gb + d_at(F) + JW));
            for r in 0..R {
                let p = xp[r].get_unchecked(np * b..np * b + np);
                let mut msum = zero;
                for (pp, &m) in p.iter().zip(&pv) {
                    let prod = _mm256_madd_epi16(m, _mm256_set1_epi32(*pp as i32));
                    msum = _mm256_add_epi32(msum, prod);
                }
                let dx = _mm256_set1_ps(*xd[r].get_unchecked(b));
                if F == Q4K {
                    // `d * dx * isum - dmin * dx * msum`, in that order (the portable kernel's).
                    let t1 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[r]));
                    let t2 = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum));
                    acc[r] = _mm256_add_ps(acc[r], _mm256_sub_ps(t1, t2));
                } else {
                    // `sum sc (q - 32) . x` = `sum sc (u . x) - 32 sum sc sum x`, exactly.
                    let i = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(msum, 5));
                    let t = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i));
                    acc[r] = _mm256_add_ps(acc[r], t);
                }
            }
        }
        let mut out = [[0.0f32; JW]; R];
        for r in 0..R {
            _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        }
        out
    }
}
