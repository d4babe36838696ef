//! Prefill's eight-row GEMM on activations packed by tiles ([`TiledX`]), writing the op's
//! `[rows, n]` output ([`groups_rows`]).
//!
//! The kernel is [`group_f`], the same body as decode's, so the bits are the same; only where
//! it reads `x` differs. [`Acts`](super::super::Acts) keeps each row's quants, scales and sums
//! in three arrays, so `RX` rows at a time cost three pointers a row: 24 on AVX-512 VNNI, more
//! than the general registers, and the block's last steps reloaded them from the stack (perf
//! annotate). A tile here holds, block by block, the `RX` rows' 4-byte chunks side by side,
//! then their scales, then their offset terms (`offset` times the block's sum, made once per
//! product instead of once per group): one pointer and constant displacements, every read a
//! broadcast folded into its instruction.

use alloc::vec::Vec;
use core::arch::x86_64::*;

use super::super::super::pool;
use super::super::gemm::X_BLOCK_BYTES;
use super::interleaved::{XSrc, group_f};
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

/// Every whole group of `w` (`8 * row_bytes` bytes each) of `dtype` against every row of `x`,
/// into a row-major output: lane `j` of group `g` against row `r` goes to
/// `out[r * ld + 8 * g + j]` plus `bias[8 * g + j]` (or `+ 0.0`, as the transposing path
/// adds); with `pairs`, rows `2i` and `2i + 1` (one row's two residual terms) are summed first
/// into output row `i` (the transposed path's sum, in the same order). Tiles are taken in
/// blocks whose activations stay in L2 ([`X_BLOCK_BYTES`]) while every group passes over them.
/// `x` not packed for `RX` rows or this `row_bytes`, or another dtype: nothing is written.
///
/// # Safety
/// `out` must be valid for writes at `r * ld + c` for every output row `r` (`x`'s rows, or half
/// of them with `pairs`) and column `c < 8 * ng`, `ng` the whole groups in `w`, and no other
/// thread may access those values meanwhile; with `pairs`, `x` must hold an even number of
/// rows, and `RX` must be even. A `bias` holds at least `8 * ng` values.
#[inline(always)]
pub(super) unsafe fn groups_rows<D: Dot, const RX: usize>(
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    x: &TiledX,
    (out, ld): (*mut f32, usize),
    pairs: bool,
    bias: Option<&[f32]>,
) {
    let args = (w, row_bytes, x, (out, ld), pairs, bias);
    unsafe {
        match dtype {
            DType::Q4_0 => rows_f::<D, RX, Q4_0>(args),
            DType::Q5_0 => rows_f::<D, RX, Q5_0>(args),
            DType::Q8_0 => rows_f::<D, RX, Q8_0>(args),
            _ => {}
        }
    }
}

/// [`groups_rows`]' arguments.
type RowsArgs<'a> = (
    &'a [u8],
    usize,
    &'a TiledX,
    (*mut f32, usize),
    bool,
    Option<&'a [f32]>,
);

#[inline(always)]
unsafe fn rows_f<D: Dot, const RX: usize, const F: u8>(
    (w, row_bytes, x, (out, ld), pairs, bias): RowsArgs,
) {
    let gb = 8 * row_bytes;
    let nb = row_bytes / [34usize, 18, 20, 22][F as usize];
    let tile = nb * SLOTS * RX;
    let tiles = x.rows.div_ceil(RX);
    if gb == 0 || x.rx != RX || x.nb != nb || x.data.len() < tiles * tile {
        return;
    }
    let ng = w.len() / gb;
    // Tiles whose 8-bit values (32 bytes a block a row) stay in L2 while every group passes.
    let per_block = (X_BLOCK_BYTES / (32 * nb * RX).max(1)).max(1);
    let mut t0 = 0;
    while t0 < tiles {
        let t1 = (t0 + per_block).min(tiles);
        for gi in 0..ng {
            let g = &w[gi * gb..(gi + 1) * gb];
            // SAFETY: a bias holds `8 * ng` values (the contract); 8 from `8 gi`.
            let b = match bias {
                Some(b) => unsafe { _mm256_loadu_ps(b[8 * gi..8 * gi + 8].as_ptr()) },
                None => unsafe { _mm256_setzero_ps() },
            };
            for t in t0..t1 {
                let src = TileSrc::<RX> {
                    base: x.data[t * tile..].as_ptr(),
                };
                let acc = unsafe { group_f::<D, RX, F, _>(g, nb, &src) };
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
        }
        t0 = t1;
    }
}
