//! The quantizers: f32 rows to GGML blocks. `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `F16` and `BF16`
//! follow GGML's reference quantizers (`quantize_row_*_ref`), which the `gguf` package
//! reproduces bit for bit; `kernels-core/tests/quant.rs` checks ours against its output. `Q4_K`
//! is in [`super::k_quants`].

use half::{bf16, f16};

use super::decode::QK;

#[inline]
fn put_f16(out: &mut [u8], at: usize, v: f32) {
    out[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d == 0.0 { 0.0 } else { 1.0 / d }
}

/// The element of largest magnitude (the first of equals), with its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    let mut best = 0.0f32;
    for &v in x {
        if libm::fabsf(v) > libm::fabsf(best) {
            best = v;
        }
    }
    best
}

pub fn f16_block(x: &[f32], out: &mut [u8]) {
    put_f16(out, 0, x[0]);
}

pub fn bf16_block(x: &[f32], out: &mut [u8]) {
    out[..2].copy_from_slice(&bf16::from_f32(x[0]).to_bits().to_le_bytes());
}

/// `d = max|x| / 127`, `q = round(x / d)` (half away from zero).
pub fn q8_0_block(x: &[f32], out: &mut [u8]) {
    let amax = x[..QK].iter().fold(0.0f32, |m, &v| m.max(libm::fabsf(v)));
    let d = amax / 127.0;
    let id = inverse(d);
    put_f16(out, 0, d);
    for (o, &v) in out[2..2 + QK].iter_mut().zip(x) {
        *o = (libm::roundf(v * id) as i8) as u8;
    }
}

/// `d = max / -8` (the signed extreme), `q = min(15, trunc(x / d + 8.5))`.
pub fn q4_0_block(x: &[f32], out: &mut [u8]) {
    let d = signed_absmax(&x[..QK]) / -8.0;
    let id = inverse(d);
    put_f16(out, 0, d);
    let q = |v: f32| ((v * id + 8.5) as u8).min(15);
    for j in 0..QK / 2 {
        out[2 + j] = q(x[j]) | (q(x[j + QK / 2]) << 4);
    }
}

/// `d = (max - min) / 15`, `m = min`, `q = min(15, trunc((x - min) / d + 0.5))`.
pub fn q4_1_block(x: &[f32], out: &mut [u8]) {
    let x = &x[..QK];
    let min = x
        .iter()
        .fold(f32::INFINITY, |m, &v| if v < m { v } else { m });
    let max = x
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    let d = (max - min) / 15.0;
    let id = inverse(d);
    put_f16(out, 0, d);
    put_f16(out, 2, min);
    let q = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
    for j in 0..QK / 2 {
        out[4 + j] = q(x[j]) | (q(x[j + QK / 2]) << 4);
    }
}

/// `d = max / -16`, `q = min(31, trunc(x / d + 16.5))`, fifth bits packed into `qh`.
pub fn q5_0_block(x: &[f32], out: &mut [u8]) {
    let d = signed_absmax(&x[..QK]) / -16.0;
    let id = inverse(d);
    put_f16(out, 0, d);
    let q = |v: f32| ((v * id + 16.5) as u8).min(31);
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let (lo, hi) = (q(x[j]), q(x[j + QK / 2]));
        out[6 + j] = (lo & 0x0F) | ((hi & 0x0F) << 4);
        qh |= ((lo as u32 >> 4) << j) | ((hi as u32 >> 4) << (j + QK / 2));
    }
    out[2..6].copy_from_slice(&qh.to_le_bytes());
}
