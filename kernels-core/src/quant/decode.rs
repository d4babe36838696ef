//! The reference decoders: one GGML block to f32, exactly as the `gguf` package's numpy code
//! computes it (the same products in the same order, no fused multiply-add), so the results are
//! bit-exact with it (`kernels-core/tests/quant.rs` checks that on fixtures it made).

use half::{bf16, f16};

/// Length of the block-quantized formats' 32-element blocks.
pub const QK: usize = 32;
/// Length of the K-quant super-blocks.
pub const QK_K: usize = 256;

#[inline]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// `F16`: one element per 2 bytes.
pub fn f16_block(b: &[u8], out: &mut [f32]) {
    out[0] = f16_at(b, 0);
}

/// `BF16`: one element per 2 bytes.
pub fn bf16_block(b: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
}

/// `Q8_0`: `d: f16, qs: [i8; 32]`; `x = qs * d`.
pub fn q8_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    for (o, &q) in out[..QK].iter_mut().zip(&b[2..2 + QK]) {
        *o = (q as i8) as f32 * d;
    }
}

/// `Q4_0`: `d: f16, qs: [u8; 16]`; element `j` is the low nibble of `qs[j]`, element `j + 16`
/// the high one; `x = d * (q - 8)`.
pub fn q4_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..2 + QK / 2];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = d * ((q & 0x0F) as i32 - 8) as f32;
        out[j + QK / 2] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

/// `Q4_1`: `d: f16, m: f16, qs: [u8; 16]`; `x = d * q + m`.
pub fn q4_1_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..4 + QK / 2];
    for (j, &q) in qs.iter().enumerate() {
        out[j] = d * (q & 0x0F) as f32 + m;
        out[j + QK / 2] = d * (q >> 4) as f32 + m;
    }
}

/// `Q5_0`: `d: f16, qh: u32, qs: [u8; 16]`; bit `j` of `qh` is element `j`'s fifth bit;
/// `x = d * (q - 16)`.
pub fn q5_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..6 + QK / 2];
    for (j, &q) in qs.iter().enumerate() {
        let lo = (q & 0x0F) as u32 | (((qh >> j) & 1) << 4);
        let hi = (q >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
        out[j] = d * (lo as i32 - 16) as f32;
        out[j + QK / 2] = d * (hi as i32 - 16) as f32;
    }
}

/// The 6-bit scale and min of sub-block `j` of a `Q4_K` block's 12 packed scale bytes
/// (`get_scale_min_k4` in GGML).
#[inline]
pub(crate) fn q4_k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// `Q4_K`: `d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]`: eight sub-blocks of 32 with
/// 6-bit scales and mins; sub-block `2c` is the low nibbles of `qs[32c..32c + 32]`, `2c + 1`
/// the high ones; `x = (d * sc) * q - dmin * m`.
pub fn q4_k_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..16 + QK_K / 2];
    for c in 0..4 {
        let q = &qs[32 * c..32 * c + 32];
        for half in 0..2 {
            let j = 2 * c + half;
            let (sc, m) = q4_k_scale_min(scales, j);
            let dl = d * sc as f32;
            let ml = dmin * m as f32;
            let o = &mut out[32 * j..32 * j + 32];
            let shift = 4 * half;
            for (o, &q) in o.iter_mut().zip(q) {
                *o = dl * ((q >> shift) & 0x0F) as f32 - ml;
            }
        }
    }
}

/// `Q6_K`: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`: 6-bit values (low four
/// bits from `ql`, high two from `qh`) in sixteen sub-blocks of 16 with 8-bit scales;
/// `x = (d * sc) * (q - 32)`.
pub fn q6_k_block(b: &[u8], out: &mut [f32]) {
    let ql = &b[..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = f16_at(b, 208);
    for h in 0..2 {
        let (ql, qh) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
        let base = 128 * h;
        for l in 0..32 {
            let q = [
                (ql[l] & 0x0F) | ((qh[l] & 3) << 4),
                (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4),
                (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
            ];
            for (k, &q) in q.iter().enumerate() {
                let i = base + 32 * k + l;
                let sc = d * (scales[i / 16] as i8) as f32;
                out[i] = sc * (q as i32 - 32) as f32;
            }
        }
    }
}
