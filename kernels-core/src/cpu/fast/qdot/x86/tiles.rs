//! Prefill's eight-row GEMM on activations packed by tiles ([`TiledX`]), writing the op's
//! `[rows, n]` output ([`groups_rows`]).
//!
//! The kernel is [`group_f`], the same body as decode's, so the bits are the same; only where
//! it reads `x` differs. [`Acts`](super::super::Acts) keeps each row's quants, scales and sums
//! in three arrays, so `RX` rows at a time cost three pointers a row: 24 at eight rows, more
//! than the general registers, and the block's last steps reloaded them from the stack (perf
//! annotate). A tile here holds, block by block, the `RX` rows' 4-byte chunks side by side,
//! then their scales, then their offset terms (`offset` times the block's sum, made once per
//! product instead of once per group): one pointer and constant displacements, every read a
//! broadcast folded into its instruction.
//!
//! On AVX2 (no VNNI), `Q4_0` and `Q5_0` groups are unpacked once for every tile of `x`
//! ([`Unpacked`], [`group_unpacked`]) rather than once a tile: the nibble masks and shifts (and
//! `Q5_0`'s fifth bits) were a tenth of the instructions with four rows of `x` a tile. Same
//! integer sums and f32 steps as [`group_f`], so the same bits. `qgemm` bench, q4_0 / q5_0 at
//! residual precision, 1 thread, AMD EPYC Zen 3, 2026-11-28, three interleaved rounds, G
//! multiply-adds/s before / after: 64 x 896 x 4864 31.6-37.2 / 35.3-44.8 and 20.0-28.6 /
//! 26.8-37.2; 256 x 896 x 4864 26.8-28.4 / 38.3-40.3 and 18.1-21.6 / 28.9-39.0; the ffn_down
//! shape (k = 4864, whose unpacked group of 38 KiB passes L1) 64 x 4864 x 896 even for q4_0
//! (26.4-35.3 / 27.3-41.2, seven rounds) and 21.0-29.0 / 24.5-34.2 for q5_0.

use alloc::vec::Vec;
use core::arch::x86_64::*;

use super::super::super::pool;
use super::super::gemm::X_BLOCK_BYTES;
use super::interleaved::{XSrc, avx2_quads, group_f, scale_step, unpack_quads};
use super::{Dot, Q4_0, Q5_0, Q8_0, XRow};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// `i32` values a row holds per block in a tile: 8 chunks of 4 bytes, the scale (its bits),
/// the offset term.
const SLOTS: usize = 10;

/// Quantized rows of `x` packed by tiles of `rx` rows (the last one padded with zero rows):
/// tile `t`, block `b` holds `[chunk 0 of rows 0..rx] .. [chunk 7 ..] [scales] [offset terms]`.
pub struct TiledX {
    data: Vec<i32>,
    rx: usize,
    nb: usize,
    rows: usize,
}

impl TiledX {
    /// `xs` (each `nb` blocks of 32) in tiles of `rx` rows, with `offset` for the offset terms.
    pub fn new(xs: &[XRow], rx: usize, nb: usize, offset: i32) -> Result<TiledX> {
        let rows = xs.len();
        let tile = nb.saturating_mul(SLOTS * rx.max(1));
        let too_large = || Error::bad_shape("matmul", "x", &[rows, 32 * nb], "too large");
        let len = rows
            .div_ceil(rx.max(1))
            .checked_mul(tile)
            .ok_or_else(too_large)?;
        if xs
            .iter()
            .any(|x| x.qs.len() < 32 * nb || x.d.len() < nb || x.sums.len() < 2 * nb)
        {
            return Err(Error::bad_shape(
                "matmul",
                "x",
                &[rows, 32 * nb],
                "short rows",
            ));
        }
        let mut data = Vec::new();
        data.try_reserve_exact(len).map_err(|_| too_large())?;
        data.resize(len, 0);
        // Tiles on the pool (prefill packs hundreds of rows), about 64 KiB a range.
        let grain = (1usize << 14).div_ceil(tile.max(1)).max(1);
        pool::for_slices(&mut data, tile.max(1), grain, &|tiles, part| {
            for (t, out) in tiles.zip(part.chunks_exact_mut(tile.max(1))) {
                for i in 0..rx {
                    let Some(x) = xs.get(t * rx + i) else {
                        break;
                    };
                    let blocks = out.chunks_exact_mut(SLOTS * rx);
                    let src =
                        x.qs.chunks_exact(32)
                            .zip(&x.d[..nb])
                            .zip(x.sums.chunks_exact(2));
                    for (o, ((q, &d), s)) in blocks.zip(src) {
                        for (c, q4) in q.chunks_exact(4).enumerate() {
                            let b = [q4[0] as u8, q4[1] as u8, q4[2] as u8, q4[3] as u8];
                            o[c * rx + i] = i32::from_le_bytes(b);
                        }
                        o[8 * rx + i] = d.to_bits() as i32;
                        o[9 * rx + i] = offset * (s[0] + s[1]);
                    }
                }
            }
            Ok(())
        })?;
        Ok(TiledX { data, rx, nb, rows })
    }
}

/// One tile's reads for [`group_f`].
struct TileSrc<const R: usize> {
    base: *const i32,
}

impl<const R: usize> XSrc<R> for TileSrc<R> {
    #[inline(always)]
    unsafe fn chunk(&self, b: usize, c: usize, r: usize) -> __m256i {
        // SAFETY: `b < nb`, `c < 8`, `r < R`: within the tile ([`groups_rows`] checked its size).
        unsafe { _mm256_set1_epi32(*self.base.add(b * SLOTS * R + c * R + r)) }
    }

    #[inline(always)]
    unsafe fn scale(&self, b: usize, r: usize) -> f32 {
        // SAFETY: as above.
        f32::from_bits(unsafe { *self.base.add(b * SLOTS * R + 8 * R + r) } as u32)
    }

    #[inline(always)]
    unsafe fn offset_term(&self, b: usize, r: usize, _offset: i32) -> i32 {
        // SAFETY: as above; the offset was applied when the tile was packed.
        unsafe { *self.base.add(b * SLOTS * R + 9 * R + r) }
    }
}

/// Bytes ahead that each group's stream is prefetched (decode's distance, `interleaved`'s
/// `PREFETCH`: at 1 KiB a group's first tile waited on memory). The 0.5B Qwen's prefill (AMD
/// EPYC Zen 5, `kernels bench llama --runs 2`, interleaved rounds, 2026-11-28, tok/s, 1 KiB
/// against 8 KiB): Q4_0 at 64 tokens on 1 thread 375.8-379.5 against 391.7-396.0, on 2 threads
/// 630.2-634.9 against 676.8-678.2, at 256 on 1 thread 379.2-381.1 against 382.1-387.1; Q8_0 at
/// 64 on 1 thread 339.3-347.4 against 355.3-359.4.
const PREFETCH: usize = 8192;

/// 32 bytes at `at` of each of two blocks, `b0`'s in the low half.
///
/// # Safety
/// Both blocks hold `at + 32` bytes; the caller runs with AVX-512F.
#[inline(always)]
unsafe fn both(b0: &[u8], b1: &[u8], at: usize) -> __m512i {
    debug_assert!(b0.len() >= at + 32 && b1.len() >= at + 32);
    unsafe {
        let lo = _mm256_loadu_si256(b0.as_ptr().add(at) as *const __m256i);
        let hi = _mm256_loadu_si256(b1.as_ptr().add(at) as *const __m256i);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }
}

/// `Q5_0`'s fifth bits (as 16) of chunk mask `m` of two interleaved blocks, `b0`'s in the low
/// half.
///
/// # Safety
/// The caller runs with AVX-512BW.
#[inline(always)]
unsafe fn high_bits16(b0: &[u8], b1: &[u8], m: usize) -> __m512i {
    let at = 16 + 4 * m;
    let mask = |blk: &[u8]| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
    let k = mask(b0) as u64 | (mask(b1) as u64) << 32;
    unsafe { _mm512_maskz_mov_epi8(k, _mm512_set1_epi8(16)) }
}

/// [`group_f`] on two groups at once in 512-bit vectors (AVX-512 VNNI): lanes 0-7 group `g0`'s
/// rows, 8-15 group `g1`'s, every lane the same operations as `group_f`'s (so the same bits),
/// with each broadcast chunk of `x`, offset term and scale serving sixteen weight rows instead
/// of eight: half the instructions a multiply-add outside the `vpdpbusd`s.
#[inline(always)]
unsafe fn group16_f<const R: usize, const F: u8>(
    (g0, g1): (&[u8], &[u8]),
    nb: usize,
    x: &TileSrc<R>,
) -> [__m512; R] {
    let bb = [34usize, 18, 20, 22][F as usize];
    let gb = 8 * bb;
    let (g0, g1) = (&g0[..nb * gb], &g1[..nb * gb]);
    // SAFETY: every load is within the two groups' `nb` blocks (sliced above) or the tile
    // (`TileSrc`'s contract); the caller runs with AVX-512 VNNI.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        for b in 0..nb {
            let blk0 = g0.get_unchecked(b * gb..(b + 1) * gb);
            let blk1 = g1.get_unchecked(b * gb..(b + 1) * gb);
            for g in [g0, g1] {
                let p = g.as_ptr().wrapping_add(b * gb + PREFETCH);
                for l in 0..gb.div_ceil(64) {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64 * l) as *const i8);
                }
            }
            let mut s = [_mm512_setzero_si512(); R];
            let bx = |c: usize, r: usize| x.base.add(b * SLOTS * R + c * R + r);
            if F == Q8_0 {
                for c in 0..8 {
                    let v = both(blk0, blk1, 16 + 32 * c);
                    for (r, sr) in s.iter_mut().enumerate() {
                        *sr = _mm512_dpbusd_epi32(*sr, v, _mm512_set1_epi32(*bx(c, r)));
                    }
                }
            } else {
                let q = if F == Q5_0 { 48 } else { 16 };
                let m4 = _mm512_set1_epi8(0x0F);
                for c in 0..4 {
                    let v = both(blk0, blk1, q + 32 * c);
                    let mut lo = _mm512_and_si512(v, m4);
                    let mut hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    if F == Q5_0 {
                        lo = _mm512_or_si512(lo, high_bits16(blk0, blk1, 2 * c));
                        hi = _mm512_or_si512(hi, high_bits16(blk0, blk1, 2 * c + 1));
                    }
                    for (r, sr) in s.iter_mut().enumerate() {
                        *sr = _mm512_dpbusd_epi32(*sr, lo, _mm512_set1_epi32(*bx(c, r)));
                        *sr = _mm512_dpbusd_epi32(*sr, hi, _mm512_set1_epi32(*bx(c + 4, r)));
                    }
                }
            }
            let d0 = _mm_loadu_si128(blk0.as_ptr() as *const __m128i);
            let d1 = _mm_loadu_si128(blk1.as_ptr() as *const __m128i);
            let dw = _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(d0), d1));
            for (r, a) in acc.iter_mut().enumerate() {
                // sum (u - o) x = sum u x - o sum x, in i32 exactly (the offset is in the tile).
                // (The offset, 8, 16 or 128 on VNNI, was applied when the tile was packed.)
                let si = _mm512_sub_epi32(s[r], _mm512_set1_epi32(x.offset_term(b, r, 0)));
                let dx = _mm512_set1_ps(x.scale(b, r));
                *a = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(si), *a);
            }
        }
        acc
    }
}

/// Every whole group of `w` (`8 * row_bytes` bytes each) of `dtype` against every row of `x`,
/// into a row-major output: lane `j` of group `g` against row `r` goes to
/// `out[r * ld + 8 * g + j]` plus `bias[8 * g + j]` (or `+ 0.0`, as the transposing path
/// adds); with `pairs`, rows `2i` and `2i + 1` (one row's two residual terms) are summed first
/// into output row `i` (the transposed path's sum, in the same order). Tiles are taken in
/// blocks whose activations stay in L2 ([`X_BLOCK_BYTES`]) while every group passes over them.
/// `x` not packed for `RX` rows or this `row_bytes`, or another dtype: nothing is written.
/// `WIDE` (AVX-512 VNNI only) takes two groups at a time ([`group16_f`]).
///
/// # Safety
/// `out` must be valid for writes at `r * ld + c` for every output row `r` (`x`'s rows, or half
/// of them with `pairs`) and column `c < 8 * ng`, `ng` the whole groups in `w`, and no other
/// thread may access those values meanwhile; with `pairs`, `x` must hold an even number of
/// rows, and `RX` must be even. A `bias` holds at least `8 * ng` values.
#[inline(always)]
pub(super) unsafe fn groups_rows<D: Dot, const RX: usize, const WIDE: bool>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    x: &TiledX,
    (out, ld): (*mut f32, usize),
    pairs: bool,
    bias: Option<&[f32]>,
) {
    let args = (dtype, w, row_bytes, x, (out, ld), pairs, bias);
    unsafe {
        match dtype {
            DType::Q4_0 => rows_f::<D, RX, Q4_0, WIDE>(args),
            DType::Q5_0 => rows_f::<D, RX, Q5_0, WIDE>(args),
            DType::Q8_0 => rows_f::<D, RX, Q8_0, WIDE>(args),
            _ => {}
        }
    }
}

/// [`groups_rows`]' arguments, in its order.
pub(super) type RowsArgs<'a> = (
    DType,
    &'a [u8],
    usize,
    &'a TiledX,
    (*mut f32, usize),
    bool,
    Option<&'a [f32]>,
);

#[inline(always)]
unsafe fn rows_f<D: Dot, const RX: usize, const F: u8, const WIDE: bool>(
    (_, w, row_bytes, x, (out, ld), pairs, bias): RowsArgs,
) {
    let gb = 8 * row_bytes;
    let nb = row_bytes / [34usize, 18, 20, 22][F as usize];
    let tile = nb * SLOTS * RX;
    let tiles = x.rows.div_ceil(RX);
    if gb == 0 || x.rx != RX || x.nb != nb || x.data.len() < tiles * tile {
        return;
    }
    let ng = w.len() / gb;
    // AVX2's 4-bit formats: each group unpacked once for all its tiles (empty, and so not
    // taken, where it cannot be had: `group_f` unpacks per tile instead).
    let avx2_4bit = !D::VNNI && F != Q8_0;
    let mut unpacked = if avx2_4bit {
        Unpacked::new(nb)
    } else {
        Unpacked::default()
    };
    // Tiles whose 8-bit values (32 bytes a block a row) stay in L2 while every group passes.
    let per_block = (X_BLOCK_BYTES / (32 * nb * RX).max(1)).max(1);
    let mut t0 = 0;
    while t0 < tiles {
        let t1 = (t0 + per_block).min(tiles);
        let mut gi = 0;
        while gi < ng {
            let g = &w[gi * gb..(gi + 1) * gb];
            // Two groups at a time in 512-bit vectors where the family has them.
            if WIDE && gi + 1 < ng {
                let g1 = &w[(gi + 1) * gb..(gi + 2) * gb];
                // SAFETY: a bias holds `8 * ng` values (the contract); 16 from `8 gi`.
                let b = match bias {
                    Some(b) => unsafe { _mm512_loadu_ps(b[8 * gi..8 * gi + 16].as_ptr()) },
                    None => unsafe { _mm512_setzero_ps() },
                };
                for t in t0..t1 {
                    let src = TileSrc::<RX> {
                        base: x.data[t * tile..].as_ptr(),
                    };
                    let acc = unsafe { group16_f::<RX, F>((g, g1), nb, &src) };
                    let r = t * RX;
                    let valid = (x.rows - r).min(RX);
                    // SAFETY: rows `r..r + valid` (or their pairs) and columns
                    // `8 gi..8 gi + 16` are the caller's (the contract).
                    unsafe {
                        if pairs {
                            for i in 0..valid / 2 {
                                let v = _mm512_add_ps(_mm512_add_ps(acc[2 * i], acc[2 * i + 1]), b);
                                _mm512_storeu_ps(out.add((r / 2 + i) * ld + 8 * gi), v);
                            }
                        } else {
                            for (i, a) in acc.iter().enumerate().take(valid) {
                                let v = _mm512_add_ps(*a, b);
                                _mm512_storeu_ps(out.add((r + i) * ld + 8 * gi), v);
                            }
                        }
                    }
                }
                gi += 2;
                continue;
            }
            // SAFETY: a bias holds `8 * ng` values (the contract); 8 from `8 gi`.
            let b = match bias {
                Some(b) => unsafe { _mm256_loadu_ps(b[8 * gi..8 * gi + 8].as_ptr()) },
                None => unsafe { _mm256_setzero_ps() },
            };
            let unpack = avx2_4bit && unpacked.quads.len() >= 8 * nb;
            if unpack {
                // SAFETY: the group holds `nb` blocks; the caller runs AVX2.
                unsafe { unpacked.fill::<D, F>(g, nb) };
            }
            for t in t0..t1 {
                let src = TileSrc::<RX> {
                    base: x.data[t * tile..].as_ptr(),
                };
                let acc = if unpack {
                    // SAFETY: `unpacked` holds the group's `nb` blocks (filled above).
                    unsafe { group_unpacked::<RX, F>(&unpacked, nb, &src) }
                } else {
                    unsafe { group_f::<D, RX, F, _>(g, nb, &src) }
                };
                let r = t * RX;
                let valid = (x.rows - r).min(RX);
                // SAFETY: rows `r..r + valid` (or their pairs) and columns `8 gi..8 gi + 8` are
                // the caller's (the contract).
                unsafe {
                    if pairs {
                        for i in 0..valid / 2 {
                            let v = _mm256_add_ps(_mm256_add_ps(acc[2 * i], acc[2 * i + 1]), b);
                            _mm256_storeu_ps(out.add((r / 2 + i) * ld + 8 * gi), v);
                        }
                    } else {
                        for (i, a) in acc.iter().enumerate().take(valid) {
                            _mm256_storeu_ps(out.add((r + i) * ld + 8 * gi), _mm256_add_ps(*a, b));
                        }
                    }
                }
            }
            gi += 1;
        }
        t0 = t1;
    }
}

/// One group of a 4-bit format unpacked for AVX2 ([`group_unpacked`]): per block the low and
/// high nibbles of its four chunks ([`unpack_quads`]: `[lo 0, hi 0, .., lo 3, hi 3]`) and the
/// eight weight scales. At k = 4864 that is 38 KiB, read by every tile of `x` in turn.
#[derive(Default)]
struct Unpacked {
    quads: Vec<__m256i>,
    scales: Vec<__m256>,
}

impl Unpacked {
    /// Room for `nb` blocks, or none where it cannot be had.
    fn new(nb: usize) -> Unpacked {
        let mut u = Unpacked::default();
        let Some(nq) = nb.checked_mul(8) else {
            return u;
        };
        if u.quads.try_reserve_exact(nq).is_err() || u.scales.try_reserve_exact(nb).is_err() {
            return Unpacked::default();
        }
        // SAFETY: zeroed vectors are valid values (no CPU feature needed to make them).
        u.quads.resize(nq, unsafe { core::mem::zeroed() });
        u.scales.resize(nb, unsafe { core::mem::zeroed() });
        u
    }

    /// Group `g`'s `nb` blocks of format `F` (`Q4_0` or `Q5_0`).
    ///
    /// # Safety
    /// The caller runs AVX2 and F16C; `g` holds `nb` blocks and `self` room for them.
    #[inline(always)]
    unsafe fn fill<D: Dot, const F: u8>(&mut self, g: &[u8], nb: usize) {
        let gb = 8 * [34usize, 18, 20, 22][F as usize];
        let g = &g[..nb * gb];
        for (b, (q, sc)) in self
            .quads
            .chunks_exact_mut(8)
            .zip(self.scales.iter_mut())
            .take(nb)
            .enumerate()
        {
            let blk = &g[b * gb..(b + 1) * gb];
            // SAFETY: a whole block (sliced above); the caller runs AVX2 and F16C.
            unsafe {
                for c in 0..4 {
                    (q[2 * c], q[2 * c + 1]) = unpack_quads::<D, F>(blk, c);
                }
                *sc = _mm256_cvtph_ps(_mm_loadu_si128(blk.as_ptr() as *const __m128i));
            }
        }
    }
}

/// [`group_f`] on AVX2 for a 4-bit format, on the group [`Unpacked`] once for every tile of
/// `x` (`group_f` unpacks each block again for every tile: 12 of about 100 vector
/// instructions a block and tile of four rows): the same multiply-adds and f32 steps
/// ([`avx2_quads`], [`scale_step`]), so the same bits.
///
/// # Safety
/// The caller runs AVX2 and FMA; `u` holds `nb` blocks; `x` holds `nb` blocks for `R` rows.
#[inline(always)]
unsafe fn group_unpacked<const R: usize, const F: u8>(
    u: &Unpacked,
    nb: usize,
    x: &TileSrc<R>,
) -> [__m256; R] {
    let offset = super::offset(F);
    // SAFETY: blocks `b < nb` of `u` (the contract) and of the tile.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let mut s = [_mm256_setzero_si256(); R];
            let mut p16 = [_mm256_setzero_si256(); R];
            for c in 0..4 {
                let lo = *u.quads.get_unchecked(8 * b + 2 * c);
                let hi = *u.quads.get_unchecked(8 * b + 2 * c + 1);
                avx2_quads::<R, F, _>((lo, hi), x, (b, c), &mut p16, &mut s);
            }
            scale_step(*u.scales.get_unchecked(b), &s, x, (b, offset), &mut acc);
        }
        acc
    }
}
