//! The tiled kernels against a scalar model of their numbers (exact integer block sums, then
//! one `fmaf` per block) and against the four-row decode kernel on each row alone (prefill
//! gives decode's bits): every x86 family this CPU runs, every 32-element format, both
//! precisions, on awkward shapes (`k` of one block, rows of `x` that fill no tile, weight rows
//! not a multiple of eight, a `k` long enough to cut the rows of `x` into several L2 blocks),
//! with zero blocks and extreme scales; and the product through [`product_t`] (NaN and
//! infinite rows included) against the dequantize-then-f32 reference within the published
//! budgets, for the K-quants too.

#![cfg(target_arch = "x86_64")]

use alloc::vec;
use alloc::vec::Vec;

use super::super::x86 as one_row;
use super::super::{Acts, Family, Precision, XRow, product_t, quantized_activation_budget};
use super::{X_BLOCK_BYTES, rows, tiled};
use crate::cpu::fast::qdot::tests::{reference, uniform, weights};
use crate::dtype::DType;
use crate::numerics::compare;
use crate::quant;
use crate::rng::Rng;

const FORMATS: [DType; 4] = [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0];

/// The x86 families this CPU runs (the tiled kernels' families).
pub(super) fn families() -> Vec<Family> {
    let fams: Vec<Family> = Family::available()
        .into_iter()
        .filter(|&f| tiled(f, DType::Q4_0, 3))
        .collect();
    if fams.is_empty() {
        std::eprintln!("qdot gemm: no x86 integer family on this CPU: nothing to compare");
    }
    fams
}

/// Sets the scale field of every block of `w` (`Q4_1`: its min too) to `d`.
fn set_scales(dtype: DType, w: &mut [u8], d: f32) {
    let bits = quant::encode_f16(d).to_le_bytes();
    let at: &[usize] = if dtype == DType::Q4_1 { &[0, 2] } else { &[0] };
    for b in w.chunks_exact_mut(dtype.block_bytes()) {
        for &a in at {
            b[a..a + 2].copy_from_slice(&bits);
        }
    }
}

pub(super) fn same_bits(got: &[f32], want: &[f32]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()))
}

/// The integer values of block `b` of a weight row of `dtype` (the signed ones; `Q4_1`'s
/// unsigned), its scale and `Q4_1`'s min.
fn block_ints(dtype: DType, row: &[u8], b: usize) -> ([i32; 32], f32, f32) {
    let bb = dtype.block_bytes();
    let blk = &row[b * bb..(b + 1) * bb];
    let f16 = |at: usize| quant::decode::f16_at(blk, at);
    let mut q = [0i32; 32];
    let nib = |q: &mut [i32; 32], bytes: &[u8], off: i32| {
        for (i, &v) in bytes.iter().enumerate() {
            q[i] = (v & 0x0F) as i32 - off;
            q[i + 16] = (v >> 4) as i32 - off;
        }
    };
    match dtype {
        DType::Q8_0 => {
            for (q, &v) in q.iter_mut().zip(&blk[2..34]) {
                *q = v as i8 as i32;
            }
        }
        DType::Q4_0 => nib(&mut q, &blk[2..18], 8),
        DType::Q4_1 => nib(&mut q, &blk[4..20], 0),
        _ => {
            nib(&mut q, &blk[6..22], 16);
            let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            for (i, v) in q.iter_mut().enumerate() {
                *v += (((qh >> i) & 1) as i32) << 4;
            }
        }
    }
    let m = if dtype == DType::Q4_1 { f16(2) } else { 0.0 };
    (q, f16(0), m)
}

/// The documented numbers of one output, in scalar code: per block the exact integer dot
/// product, then `acc = fma(dw * dx, s, acc)` (and `Q4_1`'s `acc = fma(m, dx * sum x, acc)`).
fn model(dtype: DType, row: &[u8], x: &XRow, nb: usize) -> f32 {
    let mut acc = 0.0f32;
    for b in 0..nb {
        let (q, dw, mw) = block_ints(dtype, row, b);
        let s: i32 = (0..32).map(|i| q[i] * x.qs[32 * b + i] as i32).sum();
        let dx = x.d[b];
        acc = libm::fmaf(dw * dx, s as f32, acc);
        if dtype == DType::Q4_1 {
            let xs_b = x.sums[2 * b] + x.sums[2 * b + 1];
            acc = libm::fmaf(mw, dx * xs_b as f32, acc);
        }
    }
    acc
}

/// The tiled kernels on `nr` quantized rows against the scalar [`model`], against the four-row
/// decode kernel on each row alone (where the weight rows are whole fours: decode's numbers
/// row for row), and on weight rows `1..` alone (a thread's range starting mid-tile).
fn compare_kernels(f: Family, dtype: DType, w: &[u8], acts: &Acts, nr: usize, k: usize) {
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let n = w.len() / rb;
    let xs: Vec<XRow> = (0..nr).map(|r| acts.row(r)).collect();
    let mut got = vec![f32::NAN; n * nr];
    rows(f, dtype, w, rb, &xs, &mut got).expect("the scratch fits");
    let what = alloc::format!("{dtype} on {}: {nr} rows, k {k}, n {n}", f.name());
    let want: Vec<f32> = (0..n * nr)
        .map(|i| {
            model(
                dtype,
                &w[(i / nr) * rb..(i / nr + 1) * rb],
                &xs[i % nr],
                k / 32,
            )
        })
        .collect();
    assert!(same_bits(&got, &want), "{what}: against the model");
    if n.is_multiple_of(4) {
        for (r, x) in xs.iter().enumerate() {
            let mut one = vec![0.0f32; n];
            one_row::rows(f, dtype, w, rb, core::slice::from_ref(x), &mut one);
            let col: Vec<f32> = (0..n).map(|j| got[j * nr + r]).collect();
            assert!(same_bits(&col, &one), "{what}: row {r} against decode");
        }
    }
    if n > 1 {
        let mut part = vec![f32::NAN; (n - 1) * nr];
        rows(f, dtype, &w[rb..], rb, &xs, &mut part).expect("the scratch fits");
        assert!(same_bits(&part, &got[nr..]), "{what}, from weight row 1");
    }
}

#[test]
fn tiles_have_the_bits_of_decode_and_the_scalar_model() {
    let mut rng = Rng::new(2801);
    // (rows of x, blocks of k, weight rows): k of one block; 9, 17 and 65 rows (no whole
    // tile); weight rows 1, 5, 7, 13; 256 blocks (k 8192) cut the rows of x into L2 blocks.
    let shapes = [
        (9, 1, 1),
        (17, 3, 5),
        (65, 28, 7),
        (9, 2, 13),
        (3, 1, 4),
        (17, 2, 16),
        (65, 256, 12),
    ];
    let (rows65, blocks, _) = shapes[6];
    assert!(
        2 * rows65 * 32 * blocks > 2 * X_BLOCK_BYTES,
        "several L2 blocks"
    );
    for f in families() {
        for dtype in FORMATS {
            for &(rows, blocks, n) in &shapes {
                let k = blocks * 32;
                for residual in [false, true] {
                    let nr = rows * if residual { 2 } else { 1 };
                    let mut w = weights(&mut rng, dtype, n, k);
                    let mut x = uniform(&mut rng, rows * k, 1.0);
                    // An all-zero activation block and an all-zero weight block.
                    x[k..k + 32].fill(0.0);
                    w[..dtype.block_bytes()].fill(0);
                    let acts = Acts::new(dtype, &x, k, residual).expect("whole blocks");
                    compare_kernels(f, dtype, &w, &acts, nr, k);
                    // Extreme scales: the largest and a subnormal f16 weight scale with
                    // activations at 1e30 and 1e-30 (overflow to infinity lands alike).
                    for (d, xs) in [(65504.0f32, 1e30f32), (6e-8, 1e-30), (1.0, 1e-38)] {
                        set_scales(dtype, &mut w, d);
                        let x = uniform(&mut rng, rows * k, xs);
                        let acts = Acts::new(dtype, &x, k, residual).expect("whole blocks");
                        compare_kernels(f, dtype, &w, &acts, nr, k);
                    }
                }
            }
        }
    }
}

#[test]
fn prefill_through_the_product_is_within_budget_and_keeps_nan_rows() {
    let mut rng = Rng::new(2802);
    // The K-quants take their own GEMM (`kquant_x86`) on the same families.
    let formats = FORMATS.into_iter().chain([DType::Q4_K, DType::Q6_K]);
    for f in families() {
        for dtype in formats.clone() {
            for p in [Precision::Single, Precision::Residual] {
                for (rows, blocks, n) in [(9, 1, 3), (17, 5, 10), (65, 3, 9)] {
                    let k = blocks * dtype.block_elems();
                    let w = weights(&mut rng, dtype, n, k);
                    let mut x = uniform(&mut rng, rows * k, 1.0);
                    x[k + 3] = f32::NAN;
                    x[2 * k + 1] = f32::INFINITY;
                    x[(rows - 1) * k] = f32::NEG_INFINITY;
                    let rb = dtype.bytes_for(k).expect("whole blocks");
                    let mut t = vec![0.0f32; rows * n];
                    product_t(f, p, dtype, &w, rb, &x, (rows, k, n), &mut t).expect("a product");
                    let got: Vec<f32> = (0..rows * n).map(|i| t[(i % n) * rows + i / n]).collect();
                    let want = reference(dtype, &w, &x, (rows, k, n));
                    let what = alloc::format!("{dtype} on {} ({p:?}), {rows}x{k}x{n}", f.name());
                    for r in [1, 2, rows - 1] {
                        let row = &got[r * n..(r + 1) * n];
                        let wrow = &want[r * n..(r + 1) * n];
                        for (g, w) in row.iter().zip(wrow) {
                            assert!(g.to_bits() == w.to_bits(), "{what}: special row {r}");
                        }
                    }
                    let (atol, rtol) = quantized_activation_budget(dtype, p)
                        .expect("a quantized format")
                        .at(k);
                    let c = compare(&got, &want, atol, rtol);
                    assert!(c.pass, "{what}: {} outside the budget", c.violations);
                }
            }
        }
    }
}
