//! The reference decoders: one GGML block to f32, exactly as the `gguf` package's numpy code
//! computes it (the same products in the same order, no fused multiply-add), so the results are
//! bit-exact with it (`kernels-core/tests/quant.rs` checks that on fixtures it made).

use half::bf16;

/// Length of the block-quantized formats' 32-element blocks.
pub const QK: usize = 32;
/// Length of the K-quant super-blocks.
pub const QK_K: usize = 256;

/// IEEE binary16 bits to f32, exactly as `half::f16::to_f32` (NaN quieted), in integer
/// arithmetic: the bits shifted into an f32's place are off by an exponent bias of 112 (224
/// for inf and NaN). A zero or subnormal `f16` takes one exact subtraction of normal f32s
/// (`2^-14 (1 + m / 1024) - 2^-14 = m 2^-24`), so no operand is ever a subnormal f32, which
/// would take a microcode assist on Intel's cores (`Q6_K`'s super-block scales can all be
/// subnormal `f16`s).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    const EXP: u32 = 0x0f80_0000; // the f16 exponent field, shifted into an f32's place
    const BIAS: u32 = (127 - 15) << 23;
    let h = h as u32;
    let shifted = (h & 0x7fff) << 13;
    let exp = shifted & EXP;
    let mut bits = shifted + BIAS;
    if exp == EXP {
        // inf and NaN: the exponent all ones, NaN quieted.
        bits += BIAS;
        if h & 0x03ff != 0 {
            bits |= 0x0040_0000;
        }
    } else if exp == 0 {
        // zero and subnormals: 2^-14 (1 + m / 1024), less 2^-14.
        let one_more = f32::from_bits(bits + (1 << 23));
        bits = (one_more - f32::from_bits(113 << 23)).to_bits();
    }
    f32::from_bits(bits | ((h & 0x8000) << 16))
}

#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// `F16`: one element per 2 bytes.
#[inline(always)]
pub fn f16_block(b: &[u8], out: &mut [f32]) {
    out[0] = f16_at(b, 0);
}

/// `BF16`: one element per 2 bytes.
#[inline(always)]
pub fn bf16_block(b: &[u8], out: &mut [f32]) {
    out[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
}

/// `Q8_0`: `d: f16, qs: [i8; 32]`; `x = qs * d`.
#[inline(always)]
pub fn q8_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    // Fixed-size views: the loop vectorizes.
    let (Ok(qs), Ok(out)) = (
        <&[u8; QK]>::try_from(&b[2..2 + QK]),
        <&mut [f32; QK]>::try_from(&mut out[..QK]),
    ) else {
        return;
    };
    for i in 0..QK {
        out[i] = (qs[i] as i8) as f32 * d;
    }
}

/// `Q4_0`: `d: f16, qs: [u8; 16]`; element `j` is the low nibble of `qs[j]`, element `j + 16`
/// the high one; `x = d * (q - 8)`.
#[inline(always)]
pub fn q4_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let (Ok(qs), Ok(out)) = (
        <&[u8; QK / 2]>::try_from(&b[2..2 + QK / 2]),
        <&mut [f32; QK]>::try_from(&mut out[..QK]),
    ) else {
        return;
    };
    for j in 0..QK / 2 {
        out[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
    }
    for j in 0..QK / 2 {
        out[j + QK / 2] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

/// `Q4_1`: `d: f16, m: f16, qs: [u8; 16]`; `x = d * q + m`.
#[inline(always)]
pub fn q4_1_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let (Ok(qs), Ok(out)) = (
        <&[u8; QK / 2]>::try_from(&b[4..4 + QK / 2]),
        <&mut [f32; QK]>::try_from(&mut out[..QK]),
    ) else {
        return;
    };
    for j in 0..QK / 2 {
        out[j] = d * (qs[j] & 0x0F) as f32 + m;
    }
    for j in 0..QK / 2 {
        out[j + QK / 2] = d * (qs[j] >> 4) as f32 + m;
    }
}

/// `Q5_0`: `d: f16, qh: u32, qs: [u8; 16]`; bit `j` of `qh` is element `j`'s fifth bit;
/// `x = d * (q - 16)`.
#[inline(always)]
pub fn q5_0_block(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (Ok(qs), Ok(out)) = (
        <&[u8; QK / 2]>::try_from(&b[6..6 + QK / 2]),
        <&mut [f32; QK]>::try_from(&mut out[..QK]),
    ) else {
        return;
    };
    for j in 0..QK / 2 {
        let lo = (qs[j] & 0x0F) as u32 | (((qh >> j) & 1) << 4);
        out[j] = d * (lo as i32 - 16) as f32;
    }
    for j in 0..QK / 2 {
        let hi = (qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
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
#[inline(always)]
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
            let (Ok(o), Ok(q)) = (
                <&mut [f32; 32]>::try_from(&mut out[32 * j..32 * j + 32]),
                <&[u8; 32]>::try_from(q),
            ) else {
                return;
            };
            let shift = 4 * half;
            for i in 0..32 {
                o[i] = dl * ((q[i] >> shift) & 0x0F) as f32 - ml;
            }
        }
    }
}

/// `Q6_K`: `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`: 6-bit values (low four
/// bits from `ql`, high two from `qh`) in sixteen sub-blocks of 16 with 8-bit scales;
/// `x = (d * sc) * (q - 32)`.
#[inline(always)]
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
