//! The integer products on wasm `simd128` (a compile-time feature there, `-C
//! target-feature=+simd128` in `.cargo/config.toml`: no run-time check).
//!
//! wasm has no 8-bit multiply-add: each weight block is unpacked to signed bytes (nibbles with
//! `v128.and` and `u8x16.shr`), widened once to `i16x8` (`i16x8.extend_low/high_i8x16`) and
//! shared by up to [`TILE`] rows of `x`, whose bytes are widened the same way once per call
//! (a copy of twice the quantized rows' size, reused by every weight row: 5-25% faster decode
//! than widening them per weight row); then `i32x4.dot_i16x8_s` multiplies pairs and sums them
//! into `i32` lanes. The K-quants' sub-block
//! scales are multiplied into the widened weight (`i16x8.mul`: `|q sc|` is at most 15 x 63 for
//! `Q4_K` and 32 x 128 for `Q6_K`, inside `i16`), so one `i32x4` accumulates a whole
//! super-block.
//!
//! Every integer sum is the portable kernel's exactly (no lane can overflow: a super-block's
//! largest sum is 256 x 4096 x 127 < 2^31), and the f32 combination of block sums and scales
//! is the portable kernel's expression in the portable kernel's order, so the results match
//! [`super::portable`] bit for bit.

use alloc::vec::Vec;
use core::arch::wasm32::*;

use super::super::buffers::out_of_memory_of;
use super::{TILE, XRow};
use crate::dtype::DType;
use crate::error::Result;
use crate::quant::decode::{f16_at, q4_k_scale_min};

/// `out[j * xs.len() + r] = dot(w row j, xs[r])` for the rows of `w` (`row_bytes` each). Errs
/// only when the widened activations cannot be allocated.
pub fn rows(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) -> Result<()> {
    let nr = xs.len();
    if nr == 0 || row_bytes == 0 {
        return Ok(());
    }
    // Every row of `x` widened to `i16`, 16 values (two vectors) at a time: row `r` is
    // `xw[r * k16..(r + 1) * k16]`.
    let k16 = xs[0].qs.len() / 16;
    let wide: usize = xs.iter().map(|x| x.qs.len() / 16).sum();
    let mut xw: Vec<[v128; 2]> = Vec::new();
    xw.try_reserve_exact(wide)
        .map_err(|_| out_of_memory_of::<[v128; 2]>("widened activations".into(), wide))?;
    for x in xs {
        xw.extend(x.qs.as_chunks::<16>().0.iter().map(|c| widen(load_x(c))));
    }
    for (wr, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(nr)) {
        for (t, (xt, ot)) in xs.chunks(TILE).zip(o.chunks_mut(TILE)).enumerate() {
            let xwt = Wide {
                v: &xw[t * TILE * k16..],
                k16,
            };
            match dtype {
                DType::Q8_0 => blocks32::<Q8_0>(wr, xt, xwt, ot),
                DType::Q4_0 => blocks32::<Q4_0>(wr, xt, xwt, ot),
                DType::Q4_1 => blocks32::<Q4_1>(wr, xt, xwt, ot),
                DType::Q5_0 => blocks32::<Q5_0>(wr, xt, xwt, ot),
                DType::Q4_K => q4_k(wr, xt, xwt, ot),
                DType::Q6_K => q6_k(wr, xt, xwt, ot),
                _ => ot.fill(0.0),
            }
        }
    }
    Ok(())
}

/// The widened rows of a tile of `x`: `k16` pairs of `i16x8` per row.
#[derive(Clone, Copy)]
struct Wide<'a> {
    v: &'a [[v128; 2]],
    k16: usize,
}

impl Wide<'_> {
    /// Values `16 * c0..16 * c1` of row `r`.
    #[inline(always)]
    fn at(&self, r: usize, c0: usize, c1: usize) -> &[[v128; 2]] {
        &self.v[r * self.k16 + c0..r * self.k16 + c1]
    }
}

/// 16 bytes from the start of `b`.
#[inline(always)]
fn load16(b: &[u8]) -> v128 {
    let b = &b[..16];
    // SAFETY: `b` holds 16 bytes (its length checked by the slice above); `v128_load` has no
    // alignment requirement.
    unsafe { v128_load(b.as_ptr().cast()) }
}

/// 16 activation bytes.
#[inline(always)]
fn load_x(x: &[i8; 16]) -> v128 {
    // SAFETY: 16 bytes; no alignment requirement.
    unsafe { v128_load(x.as_ptr().cast()) }
}

/// 16 signed bytes as two `i16x8`: elements 0-7, then 8-15.
#[inline(always)]
fn widen(v: v128) -> [v128; 2] {
    [i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v)]
}

/// `sum w[i] x[i]` over 16 widened elements into four `i32` lanes.
#[inline(always)]
fn dot16(w: &[v128; 2], x: &[v128; 2]) -> v128 {
    i32x4_add(i32x4_dot_i16x8(w[0], x[0]), i32x4_dot_i16x8(w[1], x[1]))
}

/// `sum w[i] x[i]` over 32 widened elements (two halves of 16) into four `i32` lanes.
#[inline(always)]
fn dot32(w: &[[v128; 2]; 2], x: &[[v128; 2]]) -> v128 {
    i32x4_add(dot16(&w[0], &x[0]), dot16(&w[1], &x[1]))
}

#[inline(always)]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        + i32x4_extract_lane::<1>(v)
        + i32x4_extract_lane::<2>(v)
        + i32x4_extract_lane::<3>(v)
}

/// The low nibbles of 16 bytes, and the high ones.
#[inline(always)]
fn nibbles(v: v128) -> (v128, v128) {
    (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4))
}

/// `w` times `sc` in every `i16` lane (the K-quants' sub-block scale).
#[inline(always)]
fn scaled(w: [v128; 2], sc: i16) -> [v128; 2] {
    let s = i16x8_splat(sc);
    [i16x8_mul(w[0], s), i16x8_mul(w[1], s)]
}

const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q4_1: u8 = 2;
const Q5_0: u8 = 3;

/// A 32-element block of format `F`: its values widened (two halves of 16), its scale and its
/// min (0 but for `Q4_1`).
#[inline(always)]
fn unpack32<const F: u8>(b: &[u8]) -> ([[v128; 2]; 2], f32, f32) {
    match F {
        Q8_0 => (
            [widen(load16(&b[2..])), widen(load16(&b[18..34]))],
            f16_at(b, 0),
            0.0,
        ),
        Q4_0 => {
            let (lo, hi) = nibbles(load16(&b[2..18]));
            let eight = i8x16_splat(8);
            (
                [widen(i8x16_sub(lo, eight)), widen(i8x16_sub(hi, eight))],
                f16_at(b, 0),
                0.0,
            )
        }
        Q4_1 => {
            let (lo, hi) = nibbles(load16(&b[4..20]));
            ([widen(lo), widen(hi)], f16_at(b, 0), f16_at(b, 2))
        }
        _ => {
            // Q5_0: bit j of `qh` is the fifth bit of element j. Each element's byte of `qh`
            // goes to its lane, then the lane's own bit is tested.
            let qh = u32x4_splat(u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
            let mask = u64x2_splat(0x8040_2010_0804_0201);
            let fifth = |idx: v128| {
                let bytes = u8x16_swizzle(qh, idx);
                v128_and(i8x16_eq(v128_and(bytes, mask), mask), u8x16_splat(16))
            };
            let h_lo = fifth(u8x16(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
            let h_hi = fifth(u8x16(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
            let (lo, hi) = nibbles(load16(&b[6..22]));
            let sixteen = i8x16_splat(16);
            (
                [
                    widen(i8x16_sub(v128_or(lo, h_lo), sixteen)),
                    widen(i8x16_sub(v128_or(hi, h_hi), sixteen)),
                ],
                f16_at(b, 0),
                0.0,
            )
        }
    }
}

/// The 32-element formats: per block, the integer dot with each row of the tile, then the
/// portable kernel's f32 update.
#[inline(always)]
fn blocks32<const F: u8>(w: &[u8], xs: &[XRow], xw: Wide, out: &mut [f32]) {
    let bb = [34, 18, 20, 22][F as usize];
    let mut acc = [0.0f32; TILE];
    for (b, wb) in w.chunks_exact(bb).enumerate() {
        let (q, d, m) = unpack32::<F>(wb);
        for (r, (a, x)) in acc.iter_mut().zip(xs).enumerate() {
            let s = hsum(dot32(&q, xw.at(r, 2 * b, 2 * b + 2)));
            let dx = x.d[b];
            *a += d * dx * s as f32;
            if m != 0.0 {
                *a += m * dx * (x.sums[2 * b] + x.sums[2 * b + 1]) as f32;
            }
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}

/// `Q4_K` against `Q8_K`: `d * dx * sum_j sc_j (q_j . x_j) - dmin * dx * sum_j m_j sum(x_j)`.
fn q4_k(w: &[u8], xs: &[XRow], xw: Wide, out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    for (b, wb) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
        let scales = &wb[4..16];
        let mut isum = [i32x4_splat(0); TILE];
        for c in 0..4 {
            // Sub-block 2c is the low nibbles of these 32 bytes, 2c + 1 the high ones.
            let (lo0, hi0) = nibbles(load16(&wb[16 + 32 * c..]));
            let (lo1, hi1) = nibbles(load16(&wb[32 + 32 * c..]));
            let sc_lo = q4_k_scale_min(scales, 2 * c).0 as i16;
            let sc_hi = q4_k_scale_min(scales, 2 * c + 1).0 as i16;
            let wl = [scaled(widen(lo0), sc_lo), scaled(widen(lo1), sc_lo)];
            let wh = [scaled(widen(hi0), sc_hi), scaled(widen(hi1), sc_hi)];
            for (r, s) in isum.iter_mut().take(xs.len()).enumerate() {
                let xq = xw.at(r, 16 * b + 4 * c, 16 * b + 4 * c + 4);
                *s = i32x4_add(*s, i32x4_add(dot32(&wl, &xq[..2]), dot32(&wh, &xq[2..])));
            }
        }
        for ((a, x), s) in acc.iter_mut().zip(xs).zip(&isum) {
            let mut msum = 0i32;
            for j in 0..8 {
                let m = q4_k_scale_min(scales, j).1;
                msum += m as i32 * (x.sums[16 * b + 2 * j] + x.sums[16 * b + 2 * j + 1]);
            }
            let dx = x.d[b];
            *a += d * dx * hsum(*s) as f32 - dmin * dx * msum as f32;
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}

/// `Q6_K` against `Q8_K`: `d * dx * sum_s sc_s ((q_s - 32) . x_s)` over sub-blocks of 16.
fn q6_k(w: &[u8], xs: &[XRow], xw: Wide, out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    let (low, three, off) = (u8x16_splat(0x0F), u8x16_splat(3), i8x16_splat(32));
    for (b, wb) in w.chunks_exact(210).enumerate() {
        let (ql, qh, scales) = (&wb[..128], &wb[128..192], &wb[192..208]);
        let d = f16_at(wb, 208);
        let mut isum = [i32x4_splat(0); TILE];
        for h in 0..2 {
            // Elements `l` and `l + 16` of each 32-element chunk `4h + k`: sub-blocks of 16,
            // each with its own scale.
            for half in 0..2 {
                let a = load16(&ql[64 * h + 16 * half..]);
                let c = load16(&ql[64 * h + 32 + 16 * half..]);
                let e = load16(&qh[32 * h + 16 * half..]);
                let hb = |s: u32| u8x16_shl(v128_and(u8x16_shr(e, s), three), 4);
                let q = [
                    v128_or(v128_and(a, low), hb(0)),
                    v128_or(v128_and(c, low), hb(2)),
                    v128_or(u8x16_shr(a, 4), hb(4)),
                    v128_or(u8x16_shr(c, 4), hb(6)),
                ];
                for (k, qk) in q.into_iter().enumerate() {
                    let chunk = 4 * h + k;
                    let sc = scales[2 * chunk + half] as i8 as i16;
                    let wq = scaled(widen(i8x16_sub(qk, off)), sc);
                    for (r, s) in isum.iter_mut().take(xs.len()).enumerate() {
                        let c = 16 * b + 2 * chunk + half;
                        *s = i32x4_add(*s, dot16(&wq, &xw.at(r, c, c + 1)[0]));
                    }
                }
            }
        }
        for ((a, x), s) in acc.iter_mut().zip(xs).zip(&isum) {
            *a += d * x.d[b] * hsum(*s) as f32;
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}
