//! The `simd128` kernels in the browser (`wasm-pack test --headless --chrome kernels-core`):
//! bit for bit against the portable kernel on seeded random inputs for every format and both
//! activation precisions, 1 to 9 rows of `x`, random weight bytes (every bit pattern, the
//! scales aside), NaN and infinity, all-zero blocks and extreme scales; and, since
//! `wasm_bindgen_test` does not run plain `#[test]`s, the native qdot suite, which checks every
//! family this build runs (portable and `simd128`) against the reference under its budget.

use alloc::vec;
use alloc::vec::Vec;

use wasm_bindgen_test::{console_log, wasm_bindgen_test as test};

use super::*;

/// Equal bits, or both NaN.
fn same(got: &[f32], want: &[f32]) -> Option<usize> {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()))
}

/// The product on `simd128` and on the portable kernel must agree bit for bit; returns it.
fn both(
    p: Precision,
    dtype: DType,
    w: &[u8],
    x: &[f32],
    shape: (usize, usize, usize),
    what: &str,
) -> Vec<f32> {
    let got = run(p, Family::Simd128, dtype, w, x, shape);
    let want = run(p, Family::Portable, dtype, w, x, shape);
    if let Some(i) = same(&got, &want) {
        panic!(
            "{dtype} ({p:?}, {what}, shape {shape:?}): simd128 {:e} at {i}, portable {:e}",
            got[i], want[i]
        );
    }
    got
}

/// `n` rows of `k` random weight bytes of `dtype` (every quant and scale-index bit pattern),
/// with every f16 scale field set to a random finite value of about `1 / 64`.
fn raw_weights(rng: &mut Rng, dtype: DType, n: usize, k: usize) -> Vec<u8> {
    let len = dtype.bytes_for(n * k).expect("whole blocks");
    let mut w: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
    let (bb, at): (usize, &[usize]) = match dtype {
        DType::Q4_1 | DType::Q4_K => (dtype.block_bytes(), &[0, 2]),
        DType::Q6_K => (210, &[208]),
        _ => (dtype.block_bytes(), &[0]),
    };
    for b in w.chunks_exact_mut(bb) {
        for &a in at {
            let d = (rng.uniform() * 2.0 - 1.0) / 64.0;
            b[a..a + 2].copy_from_slice(&quant::encode_f16(d).to_le_bytes());
        }
    }
    w
}

#[test]
fn simd128_is_this_builds_family() {
    assert_eq!(Family::fastest(), Family::Simd128);
    assert_eq!(Family::best(), Family::Simd128);
    assert!(Family::Simd128.missing().is_none());
    assert_eq!(Family::available(), vec![Family::Portable, Family::Simd128]);
    assert_eq!(Family::parse("SIMD128"), Some(Family::Simd128));
}

#[test]
fn simd128_matches_portable_bit_for_bit() {
    let mut rng = Rng::new(28);
    let mut count = 0usize;
    for (p, dtype) in cases() {
        let be = dtype.block_elems();
        for rows in 1..=9 {
            for (blocks, n) in [(1, 3), (2, 5), (3, 2), (7, 1)] {
                let k = blocks * be;
                let shape = (rows, k, n);
                let x = uniform(&mut rng, rows * k, 1.0);
                // Quantized from [-1, 1] (the reference's budget holds), then raw bytes.
                let w = weights(&mut rng, dtype, n, k);
                let got = both(p, dtype, &w, &x, shape, "random");
                check(
                    p,
                    Family::Simd128,
                    dtype,
                    &got,
                    &reference(dtype, &w, &x, shape),
                    k,
                    1.0,
                    "random",
                );
                let w = raw_weights(&mut rng, dtype, n, k);
                both(p, dtype, &w, &x, shape, "raw bytes");
                count += 2;
            }
        }
    }
    console_log!("qdot simd128: {count} random products bit for bit against portable");
    assert_eq!(count, 2 * 6 * 9 * 4 * 2);
}

#[test]
fn simd128_special_values_zero_blocks_and_extreme_scales() {
    let mut rng = Rng::new(29);
    let mut count = 0usize;
    for (p, dtype) in cases() {
        let (n, k) = (4, 5 * dtype.block_elems());
        for rows in [1, 2, 5, 9] {
            let shape = (rows, k, n);
            // NaN and infinities in some rows.
            let w = weights(&mut rng, dtype, n, k);
            let mut x = uniform(&mut rng, rows * k, 1.0);
            x[3] = f32::NAN;
            if rows > 1 {
                x[k + 1] = f32::INFINITY;
                x[k + 7] = f32::NEG_INFINITY;
            }
            let got = both(p, dtype, &w, &x, shape, "nan and inf");
            assert!(got[..n].iter().all(|v| v.is_nan()));
            // An all-zero activation block (scale 0) and all-zero weight blocks.
            let mut w = weights(&mut rng, dtype, n, k);
            let mut x = uniform(&mut rng, rows * k, 1.0);
            x[..dtype.block_elems()].fill(0.0);
            w[..dtype.block_bytes()].fill(0);
            let last = w.len() - dtype.block_bytes();
            w[last..].fill(0);
            both(p, dtype, &w, &x, shape, "zero blocks");
            count += 2;
            // The largest and smallest f16 scales (normal, subnormal) with activations from
            // 1e30 down to 1e-38.
            for (d, xs) in [
                (65504.0f32, 1e30f32),
                (65504.0, 1.0),
                (6.1e-5, 1e-30),
                (6e-8, 1.0),
                (1.0, 1e-38),
            ] {
                let mut w = weights(&mut rng, dtype, n, k);
                set_scales(dtype, &mut w, d);
                let x = uniform(&mut rng, rows * k, xs);
                both(p, dtype, &w, &x, shape, "extreme scales");
                count += 1;
            }
        }
    }
    console_log!("qdot simd128: {count} special-value products bit for bit against portable");
    assert_eq!(count, 2 * 6 * 4 * 7);
}

/// The native suite (plain `#[test]`s, which the browser runner skips) on this build's families.
#[test]
fn native_suite_on_portable_and_simd128() {
    every_family_matches_the_reference_on_every_format();
    special_values_zero_blocks_and_extreme_scales();
    forced_names_and_bad_sizes();
    decode_rows_four_at_a_time_and_the_rest();
}
