//! [`into_rows::product_into_rows`]: the transposed product's bits turned back to `[rows, n]`
//! plus the bias, on every family this machine runs that has the eight-row kernel, both
//! precisions, both layouts, rows of `x` past whole tiles of 8 and 4 (odd counts too) and more
//! than one L2 block of activations; where it declines (NaN in `x`, one row, a tail of weight
//! rows) and where operands disagree.

use alloc::vec;
use alloc::vec::Vec;

use super::interleave_tests::{FORMATS, uniform};
use super::into_rows::{product_into_rows, takes_into_rows};
use super::tests::weights;
use super::*;
use crate::rng::Rng;

/// The transposing path's result: `product_t_in`, turned back, `+ bias` (or `+ 0.0`).
fn transposed_back(
    (p, f): (Precision, Family),
    dtype: DType,
    w: (&[u8], Layout),
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let mut t = vec![0.0f32; rows * n];
    product_t_in(f, p, dtype, w, rb, x, (rows, k, n), &mut t).expect("valid product");
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        for j in 0..n {
            out[r * n + j] = t[j * rows + r] + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

fn families() -> Vec<Family> {
    Family::available()
        .into_iter()
        .filter(|&f| takes_into_rows(f, DType::Q8_0, 2, 8))
        .collect()
}

#[test]
fn rows_out_match_the_transposed_product_bit_for_bit() {
    let mut rng = Rng::new(41);
    assert!(!families().is_empty() || !crate::cpu::fast::qdot::x86::has_avx2());
    for dtype in FORMATS {
        let rb = |k: usize| dtype.bytes_for(k).expect("whole blocks");
        for (rows, blocks, n) in [
            (2, 1, 8),
            (3, 2, 16),
            (5, 3, 24),
            (6, 1, 8),
            (13, 2, 40),
            (37, 1, 8),
            // 75 rows of k 4864: more than one L2 block of activations, and ranges of groups
            // on more than one thread.
            (75, 152, 32),
        ] {
            let k = 32 * blocks;
            let w = weights(&mut rng, dtype, n, k);
            let packed = interleave::repack(dtype, &w, rb(k), n).expect("repack");
            let x = uniform(&mut rng, rows * k, 1.0);
            let b = uniform(&mut rng, n, 2.0);
            for (layout, wl) in [(Layout::Plain, &w), (Layout::Rows8, &packed)] {
                for bias in [None, Some(&b[..])] {
                    for p in [Precision::Single, Precision::Residual] {
                        for f in families() {
                            let dims = (rows, k, n);
                            let want = transposed_back((p, f), dtype, (wl, layout), &x, dims, bias);
                            let mut got = vec![f32::NAN; rows * n];
                            let ops = ((&wl[..], layout), rb(k), &x[..], dims, bias);
                            let took = product_into_rows(f, p, dtype, ops, &mut got);
                            assert_eq!(took.ok(), Some(true), "{dtype} {dims:?}");
                            let same = got
                                .iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            assert!(
                                same,
                                "{dtype} on {} ({p:?}, {layout:?}, bias {}, {dims:?})",
                                f.name(),
                                bias.is_some()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn declines_what_it_does_not_take_and_rejects_disagreeing_sizes() {
    let mut rng = Rng::new(42);
    let dtype = DType::Q8_0;
    let (k, n) = (64, 16);
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let w = weights(&mut rng, dtype, n, k);
    let x = uniform(&mut rng, 3 * k, 1.0);
    let p = Precision::Residual;
    for f in families() {
        let mut out = vec![7.0f32; 3 * n];
        // A NaN in a row of x: the transposing path's reference dot, nothing written here.
        let mut xn = x.clone();
        xn[k + 5] = f32::NAN;
        let ops = ((&w[..], Layout::Plain), rb, &xn[..], (3, k, n), None);
        assert_eq!(
            product_into_rows(f, p, dtype, ops, &mut out).ok(),
            Some(false)
        );
        assert!(out.iter().all(|&v| v == 7.0));
        // One row (decode), a tail of weight rows, a format without the layout.
        assert!(!takes_into_rows(f, dtype, 1, n));
        assert!(!takes_into_rows(f, dtype, 3, n + 1));
        assert!(!takes_into_rows(f, DType::Q4_1, 3, n));
        assert!(!takes_into_rows(f, DType::Q4_K, 3, n));
        // Sizes that disagree: x, out, bias, weight bytes.
        let short_bias = vec![0.0f32; n - 1];
        let bad: [(usize, usize, Option<&[f32]>, usize); 4] = [
            (3 * k - 1, 3 * n, None, rb),
            (3 * k, 3 * n - 8, None, rb),
            (3 * k, 3 * n, Some(&short_bias), rb),
            (3 * k, 3 * n, None, rb + 1),
        ];
        for (xl, ol, bias, rbb) in bad {
            let mut out = vec![0.0f32; ol];
            let ops = ((&w[..], Layout::Plain), rbb, &x[..xl], (3, k, n), bias);
            assert!(product_into_rows(f, p, dtype, ops, &mut out).is_err());
        }
    }
    assert!(!takes_into_rows(Family::Portable, dtype, 3, n));
}
