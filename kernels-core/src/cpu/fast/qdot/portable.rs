//! The integer products in plain Rust (every target): each weight block is unpacked once into
//! 8-bit integers, then dotted with up to [`TILE`] rows of quantized activations in `i32`.
//! The reference every SIMD family is checked against (`simd128` in the browser build bit for
//! bit), and the kernel of targets without one (wasm built without `simd128`, for instance).

use super::{TILE, XRow};
use crate::dtype::DType;
use crate::quant::decode::{f16_at, q4_k_scale_min};

/// `out[j * xs.len() + r] = dot(w row j, xs[r])` for the rows of `w` (`row_bytes` each).
pub fn rows(dtype: DType, w: &[u8], row_bytes: usize, xs: &[XRow], out: &mut [f32]) {
    let nr = xs.len();
    if nr == 0 || row_bytes == 0 {
        return;
    }
    for (wr, o) in w.chunks_exact(row_bytes).zip(out.chunks_exact_mut(nr)) {
        for (xt, ot) in xs.chunks(TILE).zip(o.chunks_mut(TILE)) {
            match dtype {
                DType::Q8_0 => blocks32(wr, 34, xt, ot, q8_0),
                DType::Q4_0 => blocks32(wr, 18, xt, ot, q4_0),
                DType::Q4_1 => blocks32(wr, 20, xt, ot, q4_1),
                DType::Q5_0 => blocks32(wr, 22, xt, ot, q5_0),
                DType::Q4_K => q4_k(wr, xt, ot),
                DType::Q6_K => q6_k(wr, xt, ot),
                _ => ot.fill(0.0),
            }
        }
    }
}

#[inline(always)]
fn dot32(w: &[i8; 32], x: &[i8]) -> i32 {
    let mut s = 0i32;
    for (a, b) in w.iter().zip(&x[..32]) {
        s += *a as i32 * *b as i32;
    }
    s
}

/// A 32-element block unpacked: its values as `i8`, its scale, and the constant added to each
/// value (`Q4_1`'s min; 0 elsewhere).
type Unpack = fn(&[u8], &mut [i8; 32]) -> (f32, f32);

#[inline(always)]
fn blocks32(w: &[u8], bb: usize, xs: &[XRow], out: &mut [f32], unpack: Unpack) {
    let mut acc = [0.0f32; TILE];
    let mut q = [0i8; 32];
    for (b, wb) in w.chunks_exact(bb).enumerate() {
        let (d, m) = unpack(wb, &mut q);
        for (a, x) in acc.iter_mut().zip(xs) {
            let s = dot32(&q, &x.qs[32 * b..]);
            let dx = x.d[b];
            *a += d * dx * s as f32;
            if m != 0.0 {
                *a += m * dx * (x.sums[2 * b] + x.sums[2 * b + 1]) as f32;
            }
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}

fn q8_0(b: &[u8], q: &mut [i8; 32]) -> (f32, f32) {
    for (q, &v) in q.iter_mut().zip(&b[2..34]) {
        *q = v as i8;
    }
    (f16_at(b, 0), 0.0)
}

fn q4_0(b: &[u8], q: &mut [i8; 32]) -> (f32, f32) {
    for (j, &v) in b[2..18].iter().enumerate() {
        q[j] = (v & 0x0F) as i8 - 8;
        q[j + 16] = (v >> 4) as i8 - 8;
    }
    (f16_at(b, 0), 0.0)
}

fn q4_1(b: &[u8], q: &mut [i8; 32]) -> (f32, f32) {
    for (j, &v) in b[4..20].iter().enumerate() {
        q[j] = (v & 0x0F) as i8;
        q[j + 16] = (v >> 4) as i8;
    }
    (f16_at(b, 0), f16_at(b, 2))
}

fn q5_0(b: &[u8], q: &mut [i8; 32]) -> (f32, f32) {
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for (j, &v) in b[6..22].iter().enumerate() {
        let lo = (v & 0x0F) | ((((qh >> j) & 1) as u8) << 4);
        let hi = (v >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        q[j] = lo as i8 - 16;
        q[j + 16] = hi as i8 - 16;
    }
    (f16_at(b, 0), 0.0)
}

/// `Q4_K` against `Q8_K`: `d * dx * sum_j sc_j (q_j . x_j) - dmin * dx * sum_j m_j sum(x_j)`.
fn q4_k(w: &[u8], xs: &[XRow], out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    let mut q = [[0i8; 32]; 8];
    for (b, wb) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(wb, 0), f16_at(wb, 2));
        let scales = &wb[4..16];
        for c in 0..4 {
            for l in 0..32 {
                let v = wb[16 + 32 * c + l];
                q[2 * c][l] = (v & 0x0F) as i8;
                q[2 * c + 1][l] = (v >> 4) as i8;
            }
        }
        for (a, x) in acc.iter_mut().zip(xs) {
            let (mut isum, mut msum) = (0i32, 0i32);
            for (j, qj) in q.iter().enumerate() {
                let (sc, m) = q4_k_scale_min(scales, j);
                isum += sc as i32 * dot32(qj, &x.qs[256 * b + 32 * j..]);
                msum += m as i32 * (x.sums[16 * b + 2 * j] + x.sums[16 * b + 2 * j + 1]);
            }
            let dx = x.d[b];
            *a += d * dx * isum as f32 - dmin * dx * msum as f32;
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}

/// `Q6_K` against `Q8_K`: `d * dx * sum_s sc_s ((q_s - 32) . x_s)` over sub-blocks of 16.
fn q6_k(w: &[u8], xs: &[XRow], out: &mut [f32]) {
    let mut acc = [0.0f32; TILE];
    let mut q = [[0i8; 32]; 8];
    for (b, wb) in w.chunks_exact(210).enumerate() {
        let (ql, qh, scales) = (&wb[..128], &wb[128..192], &wb[192..208]);
        let d = f16_at(wb, 208);
        for h in 0..2 {
            for l in 0..32 {
                let (a, c, e) = (ql[64 * h + l], ql[64 * h + l + 32], qh[32 * h + l]);
                q[4 * h][l] = ((a & 0x0F) | ((e & 3) << 4)) as i8 - 32;
                q[4 * h + 1][l] = ((c & 0x0F) | (((e >> 2) & 3) << 4)) as i8 - 32;
                q[4 * h + 2][l] = ((a >> 4) | (((e >> 4) & 3) << 4)) as i8 - 32;
                q[4 * h + 3][l] = ((c >> 4) | (((e >> 6) & 3) << 4)) as i8 - 32;
            }
        }
        for (a, x) in acc.iter_mut().zip(xs) {
            let mut isum = 0i32;
            for (c, qc) in q.iter().enumerate() {
                let xq = &x.qs[256 * b + 32 * c..256 * b + 32 * c + 32];
                let lo: i32 = (0..16).map(|i| qc[i] as i32 * xq[i] as i32).sum();
                let hi: i32 = (16..32).map(|i| qc[i] as i32 * xq[i] as i32).sum();
                isum += (scales[2 * c] as i8) as i32 * lo + (scales[2 * c + 1] as i8) as i32 * hi;
            }
            *a += d * x.d[b] * isum as f32;
        }
    }
    out.copy_from_slice(&acc[..out.len()]);
}
