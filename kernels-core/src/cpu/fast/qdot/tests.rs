//! Every format on every kernel family against the dequantize-then-f32 reference, under
//! [`QUANTIZED_ACTIVATION_BUDGETS`]; the SIMD families against the portable one; special
//! values, zero blocks, extreme scales and awkward shapes. `derive_budgets` (ignored) is how
//! the budgets were derived.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::numerics::compare;
use crate::rng::Rng;

/// Every block-quantized weight format, so a new one is tested here until it has kernels.
fn formats() -> impl Iterator<Item = DType> {
    DType::WEIGHT.into_iter().filter(|d| d.is_quantized())
}

/// Every precision with every format.
fn cases() -> impl Iterator<Item = (Precision, DType)> {
    [Precision::Single, Precision::Residual]
        .into_iter()
        .flat_map(|p| formats().map(move |d| (p, d)))
}

pub(crate) fn uniform(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.uniform() * 2.0 - 1.0) * scale)
        .collect()
}

/// `n` rows of `k` weights of `dtype` at unit scale: quantized from `[-1, 1]`, or (`Q6_K`,
/// which is read, not written) random blocks whose largest value is about 1.
pub(crate) fn weights(rng: &mut Rng, dtype: DType, n: usize, k: usize) -> Vec<u8> {
    if dtype != DType::Q6_K {
        let w = uniform(rng, n * k, 1.0);
        return quant::quantize(dtype, &w).expect("whole blocks");
    }
    let mut out = Vec::new();
    for _ in 0..n * k / 256 {
        let mut b = [0u8; 210];
        for v in b[..192].iter_mut() {
            *v = (rng.uniform() * 256.0) as u8;
        }
        for v in b[192..208].iter_mut() {
            *v = ((rng.uniform() * 2.0 - 1.0) * 127.0) as i8 as u8;
        }
        b[208..210].copy_from_slice(&quant::encode_f16(1.0 / (32.0 * 127.0)).to_le_bytes());
        out.extend_from_slice(&b);
    }
    out
}

/// Sets every block's scale field(s) of `dtype` to `d`.
pub(crate) fn set_scales(dtype: DType, w: &mut [u8], d: f32) {
    let bits = quant::encode_f16(d).to_le_bytes();
    let (bb, at): (usize, &[usize]) = match dtype {
        DType::Q4_1 => (20, &[0, 2]),
        DType::Q4_K => (144, &[0, 2]),
        DType::Q6_K => (210, &[208]),
        _ => (dtype.block_bytes(), &[0]),
    };
    for b in w.chunks_exact_mut(bb) {
        for &a in at {
            b[a..a + 2].copy_from_slice(&bits);
        }
    }
}

/// The reference: each weight row decoded to f32, then an f32 dot in order.
/// For each `(d, xs)` of `cases`: random weights with every block scale set to `d` and
/// activations of magnitude `xs`, against the reference within the budget scaled by the
/// largest `|w| x xs` (where that and the reference are finite).
#[allow(clippy::too_many_arguments)]
fn extreme_scales(
    p: Precision,
    f: Family,
    dtype: DType,
    rng: &mut Rng,
    (rows, k, n): (usize, usize, usize),
    cases: &[(f32, f32)],
    label: &str,
) {
    for &(d, xs) in cases {
        let mut w = weights(rng, dtype, n, k);
        set_scales(dtype, &mut w, d);
        let x = uniform(rng, rows * k, xs);
        let want = reference(dtype, &w, &x, (rows, k, n));
        let got = run(p, f, dtype, &w, &x, (rows, k, n));
        let wmax = quant::dequantize(dtype, &w, n * k)
            .expect("whole blocks")
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        let scale = (wmax as f64 * xs as f64) as f32;
        if scale.is_finite() && scale > 0.0 && want.iter().all(|v| v.is_finite()) {
            check(p, f, dtype, &got, &want, k, scale, label);
        }
    }
}

/// `x . w^T` with each weight row decoded to f32, then an f32 dot in order: `[rows, n]`.
pub(crate) fn reference(
    dtype: DType,
    w: &[u8],
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let wf = quant::dequantize(dtype, w, n * k).expect("whole blocks");
    let mut out = vec![0.0f32; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let (xr, wr) = (&x[r * k..(r + 1) * k], &wf[j * k..(j + 1) * k]);
            out[r * n + j] = xr.iter().zip(wr).fold(0.0, |s, (a, b)| s + a * b);
        }
    }
    out
}

/// The product on `family`, as `[rows, n]`.
fn run(
    precision: Precision,
    family: Family,
    dtype: DType,
    w: &[u8],
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let row_bytes = dtype.bytes_for(k).expect("whole blocks");
    let mut t = vec![0.0f32; rows * n];
    product_t(
        family,
        precision,
        dtype,
        w,
        row_bytes,
        x,
        (rows, k, n),
        &mut t,
    )
    .expect("valid product");
    let mut out = vec![0.0f32; rows * n];
    for j in 0..n {
        for r in 0..rows {
            out[r * n + j] = t[j * rows + r];
        }
    }
    out
}

/// The largest `|got - ref| / sqrt(k)` over a product (divided by `scale`).
fn worst(got: &[f32], want: &[f32], k: usize, scale: f32) -> f64 {
    got.iter()
        .zip(want)
        .map(|(g, r)| ((g - r) / scale).abs() as f64 / libm::sqrt(k as f64))
        .fold(0.0, f64::max)
}

#[allow(clippy::too_many_arguments)]
fn check(
    p: Precision,
    family: Family,
    dtype: DType,
    got: &[f32],
    want: &[f32],
    k: usize,
    scale: f32,
    what: &str,
) {
    let b = quantized_activation_budget(dtype, p).expect("a quantized format");
    let (atol, rtol) = b.at(k);
    let g: Vec<f32> = got.iter().map(|v| v / scale).collect();
    let r: Vec<f32> = want.iter().map(|v| v / scale).collect();
    let c = compare(&g, &r, atol, rtol);
    assert!(
        c.pass,
        "{dtype} on {} ({p:?}, {what}, k {k}): {} outside the budget, max abs {:e}",
        family.name(),
        c.violations,
        c.max_abs_err
    );
}

/// Shapes: `(rows, blocks of k, n)`: decode, prefill tiles and their neighbours, primes.
const SHAPES: [(usize, usize, usize); 8] = [
    (1, 1, 1),
    (1, 3, 7),
    (2, 2, 5),
    (3, 1, 13),
    (4, 2, 4),
    (5, 3, 3),
    (7, 1, 17),
    (9, 2, 2),
];

#[test]
fn every_family_matches_the_reference_on_every_format() {
    let fams = Family::available();
    for f in Family::ALL {
        if let Some(why) = f.missing() {
            // Compiled, not run here: say so.
            std::eprintln!("qdot: skipped the {} family: {why}", f.name());
        }
    }
    let mut rng = Rng::new(11);
    for (p, dtype) in cases() {
        for &(rows, blocks, n) in &SHAPES {
            let k = blocks * dtype.block_elems();
            let w = weights(&mut rng, dtype, n, k);
            let x = uniform(&mut rng, rows * k, 1.0);
            let want = reference(dtype, &w, &x, (rows, k, n));
            let base = run(p, Family::Portable, dtype, &w, &x, (rows, k, n));
            for &f in &fams {
                let got = run(p, f, dtype, &w, &x, (rows, k, n));
                check(p, f, dtype, &got, &want, k, 1.0, "random");
                // Same integer sums as the portable kernel; only the f32 order differs.
                let c = compare(&got, &base, 1e-5, 1e-5);
                assert!(c.pass, "{dtype} on {} against portable: {c:?}", f.name());
            }
        }
    }
}

#[test]
fn special_values_zero_blocks_and_extreme_scales() {
    let mut rng = Rng::new(12);
    for (p, dtype) in cases() {
        let (rows, n) = (5, 6);
        let k = 2 * dtype.block_elems();
        for f in Family::available() {
            // NaN and infinities in some rows: where the reference has them.
            let w = weights(&mut rng, dtype, n, k);
            let mut x = uniform(&mut rng, rows * k, 1.0);
            x[3] = f32::NAN;
            x[k + 1] = f32::INFINITY;
            x[2 * k + 5] = f32::NEG_INFINITY;
            x[2 * k + 6] = f32::INFINITY;
            let want = reference(dtype, &w, &x, (rows, k, n));
            let got = run(p, f, dtype, &w, &x, (rows, k, n));
            check(p, f, dtype, &got, &want, k, 1.0, "nan and inf");
            assert!(got[..n].iter().all(|v| v.is_nan()));
            // An all-zero activation block (scale 0) and an all-zero weight block.
            let mut w = weights(&mut rng, dtype, n, k);
            let mut x = uniform(&mut rng, rows * k, 1.0);
            x[..dtype.block_elems()].fill(0.0);
            let bb = dtype.block_bytes();
            w[..bb].fill(0);
            let want = reference(dtype, &w, &x, (rows, k, n));
            let got = run(p, f, dtype, &w, &x, (rows, k, n));
            check(p, f, dtype, &got, &want, k, 1.0, "zero blocks");
            // The largest and smallest weight scales f16 holds (normal, then subnormal), and
            // activations at 1e30 and 1e-30: budgets scale with the operands.
            let cases = [
                (65504.0f32, 1e30f32),
                (6.1e-5, 1e-30),
                (6e-8, 1.0),
                (1.0, 1e-38),
            ];
            extreme_scales(
                p,
                f,
                dtype,
                &mut rng,
                (rows, k, n),
                &cases,
                "extreme scales",
            );
        }
    }
}

#[test]
fn forced_names_and_bad_sizes() {
    assert_eq!(Family::parse("AVX512"), Some(Family::Avx512Vnni));
    assert_eq!(Family::parse(" avxvnni"), Some(Family::AvxVnni));
    assert_eq!(Family::parse("portable"), Some(Family::Portable));
    assert_eq!(Family::parse("sse"), None);
    assert!(Family::best().missing().is_none());
    let mut out = [0.0f32; 2];
    // A row that is not whole blocks, and operands that disagree: errors, no panic.
    assert!(
        product_t(
            Family::Portable,
            Precision::Single,
            DType::Q4_0,
            &[0; 18],
            18,
            &[0.0; 31],
            (1, 31, 1),
            &mut out[..1]
        )
        .is_err()
    );
    assert!(
        product_t(
            Family::Portable,
            Precision::Single,
            DType::Q4_0,
            &[0; 18],
            18,
            &[0.0; 32],
            (1, 32, 2),
            &mut out
        )
        .is_err()
    );
    assert!(
        product_t(
            Family::Portable,
            Precision::Single,
            DType::F16,
            &[0; 64],
            64,
            &[0.0; 32],
            (1, 32, 1),
            &mut out[..1]
        )
        .is_err()
    );
}

/// How [`QUANTIZED_ACTIVATION_BUDGETS`] was derived: the worst `|got - ref| / sqrt(k)` over 200
/// seeds per format on every family, at unit scale; the budget is twice it.
#[test]
#[ignore]
fn derive_budgets() {
    for (p, dtype) in cases() {
        let mut worst_seen = 0.0f64;
        for seed in 0..200 {
            let mut rng = Rng::new(1000 + seed);
            let blocks = [1, 3, 4864 / dtype.block_elems()][seed as usize % 3];
            let (rows, k, n) = (1 + seed as usize % 5, blocks * dtype.block_elems(), 16);
            let w = weights(&mut rng, dtype, n, k);
            let x = uniform(&mut rng, rows * k, 1.0);
            let want = reference(dtype, &w, &x, (rows, k, n));
            for f in Family::available() {
                let got = run(p, f, dtype, &w, &x, (rows, k, n));
                worst_seen = worst_seen.max(worst(&got, &want, k, 1.0));
            }
        }
        std::eprintln!("{p:?} {dtype}: worst |err| / sqrt(k) = {worst_seen:.3e}");
    }
}

// The simd128 kernels against the portable one in the browser (wasm-pack test).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[path = "wasm_tests.rs"]
mod wasm_tests;

/// Decode shapes (one row of `x`: one or two quantized rows), whose weight rows go four at a
/// time through the x86 families' shared-activation kernel and the rest one at a time: every
/// family against the reference and the portable kernel, with zero blocks, a NaN row and the
/// extreme weight scales, on weight counts around multiples of four.
#[test]
fn decode_rows_four_at_a_time_and_the_rest() {
    let mut rng = Rng::new(13);
    for (p, dtype) in cases() {
        // n below four, at four and around its multiples; k of one block and several.
        for (n, blocks) in [(1, 1), (3, 2), (4, 1), (5, 2), (9, 3), (11, 1), (16, 2)] {
            let k = blocks * dtype.block_elems();
            for f in Family::available() {
                let mut w = weights(&mut rng, dtype, n, k);
                // An all-zero weight block in the second row of the first four (the only
                // row's when n is 1).
                let bb = dtype.block_bytes();
                let z = dtype.bytes_for(k).expect("whole blocks") * (n > 1) as usize;
                w[z..z + bb].fill(0);
                let mut x = uniform(&mut rng, k, 1.0);
                x[..dtype.block_elems().min(k)].fill(0.0);
                let want = reference(dtype, &w, &x, (1, k, n));
                let got = run(p, f, dtype, &w, &x, (1, k, n));
                check(p, f, dtype, &got, &want, k, 1.0, "decode");
                let base = run(p, Family::Portable, dtype, &w, &x, (1, k, n));
                let c = compare(&got, &base, 1e-5, 1e-5);
                assert!(
                    c.pass,
                    "{dtype} decode on {} against portable: {c:?}",
                    f.name()
                );
                // A NaN: every output NaN, as the reference.
                let mut xn = x.clone();
                xn[k - 1] = f32::NAN;
                let got = run(p, f, dtype, &w, &xn, (1, k, n));
                assert!(got.iter().all(|v| v.is_nan()), "{dtype} on {}", f.name());
                // The largest weight scale with activations at 1e26, not 1e30: a K-quant's
                // super-block scale times the activation's times its integer sum can pass
                // f32's range where the reference's terms do not (an inherent limit of the
                // integer path, which the tile test above meets by luck of its data).
                let cases = [(65504.0f32, 1e26f32), (6e-8, 1.0), (1.0, 1e-38)];
                let label = "decode, extreme scales";
                extreme_scales(p, f, dtype, &mut rng, (1, k, n), &cases, label);
            }
        }
    }
}

/// The K-quants' decode gives each weight row the bits of the one-row kernel (x86's multi-row
/// `Q4_K` kernel, four rows or two at a time, keeps its integer lanes and f32 order; `Q6_K`
/// decode is one row at a time there, held to the same promise): every weight row of a decode
/// product against the row alone, bit for bit, on each family, for weight counts below, at and
/// around multiples of four and `k` of one super-block and several, including an all-zero
/// weight block and extreme scales.
#[test]
fn k_quant_decode_rows_four_at_a_time_match_one_at_a_time_bit_for_bit() {
    let mut rng = Rng::new(14);
    for p in [Precision::Single, Precision::Residual] {
        for dtype in [DType::Q4_K, DType::Q6_K] {
            for (n, blocks) in [(1, 1), (2, 2), (3, 1), (4, 1), (5, 3), (8, 2), (13, 5)] {
                let k = blocks * dtype.block_elems();
                let row_bytes = dtype.bytes_for(k).expect("whole blocks");
                for f in Family::available() {
                    for (d, xs) in [
                        (None, 1.0f32),
                        (Some(65504.0f32), 1e20f32),
                        (Some(6e-8), 1.0),
                    ] {
                        let mut w = weights(&mut rng, dtype, n, k);
                        if let Some(d) = d {
                            set_scales(dtype, &mut w, d);
                        }
                        // An all-zero weight block: the second row's first (the only row's).
                        let z = row_bytes * (n > 1) as usize;
                        w[z..z + dtype.block_bytes()].fill(0);
                        let x = uniform(&mut rng, k, xs);
                        let all = run(p, f, dtype, &w, &x, (1, k, n));
                        for (j, g) in all.iter().enumerate() {
                            let wj = &w[j * row_bytes..(j + 1) * row_bytes];
                            let one = run(p, f, dtype, wj, &x, (1, k, 1));
                            assert_eq!(
                                g.to_bits(),
                                one[0].to_bits(),
                                "{dtype} {p:?} on {}: row {j} of {n}, k {k}: {g} vs {}",
                                f.name(),
                                one[0]
                            );
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn vectorized_activation_quantization_matches_the_scalar_blocks_bit_for_bit() {
    // `Acts::new`'s AVX2 quantizer against the scalar blocks (values, scales, sums of 16 and
    // the residual `x - d q`): random rows over many scales,
    // all-zero, subnormal-only and huge blocks, values on rounding ties, both block sizes.
    let mut rng = Rng::new(2812);
    for block in [32, 256] {
        for case in 0..40 {
            let n = block * 3;
            let scale = [1.0f32, 1e-3, 1e3, 1e30, 1e-38, 3e-39][case % 6];
            let mut x: Vec<f32> = (0..n)
                .map(|_| (rng.uniform() * 2.0 - 1.0) * scale)
                .collect();
            if case % 5 == 1 {
                x[..block].fill(0.0);
            }
            if case % 5 == 2 {
                // Ties: amax 127, so v * id lands on halves.
                for (i, v) in x[block..2 * block].iter_mut().enumerate() {
                    *v = (i as f32 - 40.0) + 0.5;
                }
                x[block] = 127.0;
            }
            if case % 5 == 3 {
                x[2 * block..].fill(1e-45);
            }
            let (mut q1, mut d1) = (vec![0i8; n], vec![0.0f32; n / block]);
            let (mut s1, mut r1) = (vec![0i32; n / 16], vec![0.0f32; n]);
            let (mut q2, mut d2) = (vec![7i8; n], vec![9.0f32; n / block]);
            let (mut s2, mut r2) = (vec![5i32; n / 16], vec![3.0f32; n]);
            for (b, xb) in x.chunks_exact(block).enumerate() {
                let span = b * block..(b + 1) * block;
                d1[b] = quantize_block(xb, &mut q1[span.clone()]);
                let sb = &mut s1[b * block / 16..(b + 1) * block / 16];
                block_sums_and_residual(xb, &q1[span.clone()], d1[b], sb, Some(&mut r1[span]));
            }
            let out = (&mut q2[..], &mut d2[..], &mut s2[..]);
            if !x86::quantize_blocks(&x, block, out, Some(&mut r2)) {
                return; // no AVX2 here
            }
            assert_eq!(s1, s2, "block {block} case {case}: sums");
            let same = r1.iter().zip(&r2).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "block {block} case {case}: residuals");
            assert_eq!(q1, q2, "block {block} case {case}: values");
            let same = d1.iter().zip(&d2).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "block {block} case {case}: scales {d1:?} {d2:?}");
        }
    }
}
