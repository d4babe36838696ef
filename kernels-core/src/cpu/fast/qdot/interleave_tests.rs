//! The interleaved layout ([`interleave`]): repack and unpack round trips, and products on a
//! repacked weight bit-identical to those on the plain one, on every family this machine runs,
//! both precisions, awkward shapes (rows of `n` beyond the last group, `n < 8`), NaN and
//! infinity in `x`, zero blocks and extreme scales. (The plain products are checked against
//! the reference in `tests.rs`, so the repacked ones are too.)

use alloc::vec;
use alloc::vec::Vec;

use super::tests::weights;
use super::*;
use crate::rng::Rng;

/// The formats with the interleaved layout.
pub(super) const FORMATS: [DType; 3] = [DType::Q4_0, DType::Q5_0, DType::Q8_0];

pub(super) fn uniform(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * scale)
        .collect()
}

/// The transposed product of `w` (in `layout`) on `family`.
fn run(
    (p, family): (Precision, Family),
    dtype: DType,
    (w, layout): (&[u8], Layout),
    x: &[f32],
    dims: (usize, usize, usize),
) -> Vec<f32> {
    let (rows, k, n) = dims;
    let row_bytes = dtype.bytes_for(k).expect("whole blocks");
    let mut t = vec![0.0f32; rows * n];
    product_t_in(family, p, dtype, (w, layout), row_bytes, x, dims, &mut t).expect("valid product");
    t
}

/// Both layouts' products, bit for bit (NaN where NaN).
fn same_bits(dtype: DType, w: &[u8], x: &[f32], dims: (usize, usize, usize), what: &str) {
    let row_bytes = dtype.bytes_for(dims.1).expect("whole blocks");
    let packed = interleave::repack(dtype, w, row_bytes, dims.2).expect("repack");
    for p in [Precision::Single, Precision::Residual] {
        for f in Family::available() {
            let want = run((p, f), dtype, (w, Layout::Plain), x, dims);
            let got = run((p, f), dtype, (&packed, Layout::Rows8), x, dims);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{dtype} on {} ({p:?}, {what}, {dims:?}) output {i}: {g} repacked, {w} plain",
                    f.name()
                );
            }
        }
    }
}

#[test]
fn repack_and_unpack_round_trip() {
    let mut rng = Rng::new(31);
    for dtype in FORMATS {
        for (n, blocks) in [(1, 1), (7, 3), (8, 1), (9, 2), (16, 3), (17, 1), (24, 152)] {
            let k = 32 * blocks;
            let rb = dtype.bytes_for(k).expect("whole blocks");
            let w = weights(&mut rng, dtype, n, k);
            let r = interleave::repack(dtype, &w, rb, n).expect("repack");
            assert_eq!(r.len(), w.len());
            let whole = n / interleave::GROUP * interleave::GROUP;
            assert_eq!(
                r[whole * rb..],
                w[whole * rb..],
                "{dtype}: the tail stays plain"
            );
            if whole > 0 && blocks > 1 {
                assert_ne!(r[..whole * rb], w[..whole * rb], "{dtype}: interleaved");
            }
            let mut back = vec![0u8; w.len()];
            interleave::plain_rows(dtype, Layout::Rows8, &r, rb, n, (0, n), &mut back);
            assert_eq!(back, w, "{dtype} n {n} k {k}");
            // Decoding a group straight from the layout gives the plain rows' values.
            let gb = interleave::GROUP * rb;
            for (g, p) in r[..whole * rb].chunks_exact(gb).zip(w.chunks_exact(gb)) {
                let mut got = vec![0.0f32; interleave::GROUP * k];
                let mut want = vec![0.0f32; interleave::GROUP * k];
                interleave::decode_group(dtype, g, rb, &mut got);
                quant::decode_blocks(dtype, p, &mut want);
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{dtype} n {n} k {k}: decode_group");
            }
        }
    }
    // Only the three formats; sizes must agree.
    let w = vec![0u8; 2 * 20];
    assert!(interleave::repack(DType::Q4_1, &w, 20, 2).is_err());
    assert!(interleave::repack(DType::Q4_0, &w[..36], 18, 3).is_err());
    let mut t = vec![0.0f32; 1];
    let x = vec![1.0f32; 32];
    let err = product_t_in(
        Family::Portable,
        Precision::Single,
        DType::Q4_1,
        (&w[..20], Layout::Rows8),
        20,
        &x,
        (1, 32, 1),
        &mut t,
    );
    assert!(err.is_err());
}

#[test]
fn repacked_products_match_plain_bit_for_bit() {
    let mut rng = Rng::new(32);
    for dtype in FORMATS {
        for (rows, blocks, n) in [
            (1, 1, 8),
            (1, 3, 13),
            (2, 3, 5),
            (1, 152, 24),
            (2, 1, 17),
            (3, 2, 16),
            (1, 2, 40),
            (9, 1, 9),
            // Prefill: the eight-row GEMM, rows of x past whole tiles of 8 (and 4), and (75 rows
            // of k 4864) more than one L2 block of activations.
            (5, 2, 17),
            (11, 3, 24),
            (20, 1, 16),
            (75, 152, 9),
        ] {
            let k = 32 * blocks;
            let w = weights(&mut rng, dtype, n, k);
            let x = uniform(&mut rng, rows * k, 1.0);
            same_bits(dtype, &w, &x, (rows, k, n), "random");
        }
    }
}

#[test]
fn repacked_special_values_zero_blocks_and_extreme_scales() {
    let mut rng = Rng::new(33);
    for (dtype, rows) in FORMATS.into_iter().flat_map(|d| [(d, 2), (d, 11)]) {
        let (k, n) = (96, 19);
        let rb = dtype.bytes_for(k).expect("whole blocks");
        // NaN and infinity in the second row of x; the first stays quantized.
        let w = weights(&mut rng, dtype, n, k);
        let mut x = uniform(&mut rng, rows * k, 1.0);
        x[k + 3] = f32::NAN;
        x[k + 40] = f32::INFINITY;
        same_bits(dtype, &w, &x, (rows, k, n), "nan");
        let mut x1 = uniform(&mut rng, k, 1.0);
        x1[5] = f32::NEG_INFINITY;
        same_bits(dtype, &w, &x1, (1, k, n), "inf");
        // Zero blocks: an activation block, a weight block in a group and in the tail.
        let mut w = weights(&mut rng, dtype, n, k);
        let bb = dtype.block_bytes();
        w[3 * rb + bb..3 * rb + 2 * bb].fill(0);
        w[17 * rb..17 * rb + bb].fill(0);
        let mut x = uniform(&mut rng, rows * k, 1.0);
        x[32..64].fill(0.0);
        same_bits(dtype, &w, &x, (rows, k, n), "zero blocks");
        // The largest and smallest f16 scales, huge and tiny activations.
        for (d, xs) in [(65504.0f32, 1e30f32), (6.1e-5, 1e-30), (6e-8, 1.0)] {
            let mut w = weights(&mut rng, dtype, n, k);
            let bits = quant::encode_f16(d).to_le_bytes();
            for b in w.chunks_exact_mut(bb) {
                b[..2].copy_from_slice(&bits);
            }
            let x = uniform(&mut rng, rows * k, xs);
            same_bits(dtype, &w, &x, (rows, k, n), "extreme scales");
        }
        // Every fifth bit set, and none (q5_0's masks), and the extreme q8_0 values.
        let mut w = weights(&mut rng, dtype, n, k);
        for (i, b) in w.chunks_exact_mut(bb).enumerate() {
            match dtype {
                DType::Q5_0 => b[2..6].fill(if i % 2 == 0 { 0xFF } else { 0 }),
                DType::Q8_0 => b[2..].fill(if i % 2 == 0 { 0x80 } else { 0x7F }),
                _ => b[2..].fill(if i % 2 == 0 { 0xFF } else { 0 }),
            }
        }
        let x = uniform(&mut rng, rows * k, 1.0);
        same_bits(dtype, &w, &x, (rows, k, n), "extreme quants");
        // The largest block sums: every quant at its largest (unsigned) magnitude against
        // activations all at +-127, so the AVX2 kernel's 16-bit partial sums reach their bound
        // (a partial sum held too long wraps and the bits differ).
        let mut w = weights(&mut rng, dtype, n, k);
        for b in w.chunks_exact_mut(bb) {
            match dtype {
                DType::Q8_0 => b[2..].fill(0x80),
                _ => b[2..].fill(0xFF),
            }
        }
        let x: Vec<f32> = (0..rows * k)
            .map(|i| if (i / k) % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        same_bits(dtype, &w, &x, (rows, k, n), "largest sums");
    }
}

#[test]
fn repack_into_a_given_buffer_gives_the_same_bytes_in_its_memory() {
    let mut rng = Rng::new(37);
    for dtype in FORMATS {
        let (n, k) = (17, 96);
        let rb = dtype.bytes_for(k).expect("whole blocks");
        let w = weights(&mut rng, dtype, n, k);
        let want = interleave::repack(dtype, &w, rb, n).expect("repack");
        // A buffer with room and stale contents: cleared, then filled in place.
        let mut given = vec![0xA5u8; 3];
        given.reserve_exact(w.len());
        let at = given.as_ptr();
        let got = interleave::repack_in(dtype, &w, rb, n, given).expect("repack_in");
        assert_eq!(got, want, "{dtype}");
        assert_eq!(
            got.as_ptr(),
            at,
            "{dtype}: the given memory holds the result"
        );
        // Too small a buffer grows; the bytes are the same.
        let got = interleave::repack_in(dtype, &w, rb, n, vec![1u8; 2]).expect("repack_in");
        assert_eq!(got, want, "{dtype}");
        // The tensor form asks for a buffer of the weight's size and keeps the layout.
        let t = crate::tensor::Tensor::from_raw(&[n, k], dtype, w.clone()).expect("tensor");
        let mut asked = Vec::new();
        let r = interleave::repack_tensor_with(&t, &mut |len| {
            asked.push(len);
            Ok(Vec::with_capacity(len))
        })
        .expect("repack_tensor_with");
        if let Some(r) = r {
            assert_eq!(asked, [w.len()], "{dtype}");
            let (bytes, layout) = r.packed_in().expect("packed");
            assert_eq!((bytes, layout), (&want[..], Layout::Rows8), "{dtype}");
        }
    }
}
