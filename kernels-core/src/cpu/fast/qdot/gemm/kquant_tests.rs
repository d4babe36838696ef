//! Prefill's K-quant GEMMs (`kquant_x86`: `Q4_K`, `Q6_K`) against the portable kernel, output
//! for output and bit for bit: every x86 family this CPU runs, both precisions, on awkward
//! shapes (one super-block, rows of `x` that fill no tile, weight rows not a multiple of eight,
//! enough rows of `x` to cut them into several blocks), on quantized weights and on random bytes
//! (every scale and min, zero, subnormal, infinite and NaN f16 factors), with zero blocks and
//! extreme activation scales. The product through `product_t` against the reference within
//! the budgets (NaN rows included) is `super::tests`' prefill test, which covers the K-quants.

#![cfg(target_arch = "x86_64")]

use alloc::vec;
use alloc::vec::Vec;

use super::super::{Acts, Family, XRow, portable};
use super::rows;
use super::tests::{families, same_bits};
use crate::cpu::fast::qdot::tests::{set_scales, uniform, weights};
use crate::dtype::DType;
use crate::rng::Rng;

const FORMATS: [DType; 2] = [DType::Q4_K, DType::Q6_K];

/// The GEMM on `f` against the portable kernel, all rows and from weight row 1 on (a
/// thread's range starting mid-group).
fn compare_kernels(
    f: Family,
    dtype: DType,
    w: &[u8],
    acts: &Acts,
    nr: usize,
    k: usize,
    what: &str,
) {
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let n = w.len() / rb;
    let xs: Vec<XRow> = (0..nr).map(|r| acts.row(r)).collect();
    let mut got = vec![f32::NAN; n * nr];
    rows(f, dtype, w, rb, &xs, &mut got).expect("the scratch fits");
    let mut want = vec![0.0f32; n * nr];
    portable::rows(dtype, w, rb, &xs, &mut want);
    let what = alloc::format!("{dtype}, {what} on {}: {nr} rows, k {k}, n {n}", f.name());
    assert!(
        same_bits(&got, &want),
        "{what}: against the portable kernel"
    );
    if n > 1 {
        let mut part = vec![f32::NAN; (n - 1) * nr];
        rows(f, dtype, &w[rb..], rb, &xs, &mut part).expect("the scratch fits");
        assert!(same_bits(&part, &got[nr..]), "{what}, from weight row 1");
    }
}

#[test]
fn k_quant_gemms_give_the_portable_kernels_bits() {
    let mut rng = Rng::new(2803);
    // (rows of x, super-blocks of k, weight rows): 3 and 11 rows (no whole tile of 4 or 8);
    // weight rows 1, 7, 13 (a short group); 36 super-blocks with 130 rows (2 x 130 x 9216
    // bytes at residual precision: several blocks of rows of x).
    let shapes = [(3, 1, 1), (11, 3, 7), (9, 2, 13), (17, 1, 16), (130, 36, 9)];
    for (f, dtype) in families().into_iter().flat_map(|f| FORMATS.map(|d| (f, d))) {
        for &(rows_x, blocks, n) in &shapes {
            let k = blocks * 256;
            for residual in [false, true] {
                let nr = rows_x * if residual { 2 } else { 1 };
                let mut w = weights(&mut rng, dtype, n, k);
                let mut x = uniform(&mut rng, rows_x * k, 1.0);
                // An all-zero activation super-block and an all-zero weight super-block.
                x[k..k + 256].fill(0.0);
                w[..dtype.block_bytes()].fill(0);
                let acts = Acts::new(dtype, &x, k, residual).expect("whole blocks");
                compare_kernels(f, dtype, &w, &acts, nr, k, "quantized weights");
                // Extreme scales: the largest and a subnormal f16 weight scale with
                // activations at 1e30 and 1e-30 (overflow to infinity lands alike).
                for (d, xs) in [(65504.0f32, 1e30f32), (6e-8, 1e-30), (1.0, 1e-38)] {
                    set_scales(dtype, &mut w, d);
                    let x = uniform(&mut rng, rows_x * k, xs);
                    let acts = Acts::new(dtype, &x, k, residual).expect("whole blocks");
                    compare_kernels(f, dtype, &w, &acts, nr, k, "extreme scales");
                }
                // Random bytes: every nibble, 6-bit scale and min, and any f16 factor.
                let w: Vec<u8> = (0..n * k / 256 * dtype.block_bytes())
                    .map(|_| (rng.uniform() * 256.0) as u8)
                    .collect();
                compare_kernels(f, dtype, &w, &acts, nr, k, "random bytes");
            }
        }
    }
}
