// wasm-pack test runs these in the browser too.
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use super::*;
use crate::numerics::compare;
use crate::op::OpKind;
use crate::rng::Rng;

/// A weight `[n, k]` of `dtype` from f32 values, and the values it decodes to.
fn weight(dtype: DType, vals: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let bytes = quant::quantize(dtype, vals).expect("encode");
    let back = quant::dequantize(dtype, &bytes, vals.len()).expect("decode");
    (bytes, back)
}

/// The reference: `t[j * rows + r] = x[r] . w[j]` in f64 over the decoded weight.
fn reference(x: &[f32], w: &[f32], (rows, k, n): (usize, usize, usize)) -> Vec<f32> {
    let mut t = vec![0.0f32; rows * n];
    for j in 0..n {
        for r in 0..rows {
            let s: f64 = (0..k)
                .map(|p| x[r * k + p] as f64 * w[j * k + p] as f64)
                .sum();
            t[j * rows + r] = s as f32;
        }
    }
    t
}

fn check(
    family: Family,
    threads: usize,
    dtype: DType,
    shape: (usize, usize, usize),
    seed: u64,
    specials: bool,
) {
    let (rows, k, n) = shape;
    let mut rng = Rng::new(seed);
    let mut x = rng.uniform_vec(rows * k, -1.0, 1.0);
    let mut wv = rng.uniform_vec(n * k, -1.0, 1.0);
    if specials {
        // NaN and inf in the activations and in the weight, at seeded places.
        let at = |rng: &mut Rng, len: usize| (rng.uniform() * len as f32) as usize % len;
        let i = at(&mut rng, x.len());
        x[i] = f32::NAN;
        let i = at(&mut rng, x.len());
        x[i] = f32::INFINITY;
        let i = at(&mut rng, wv.len());
        wv[i] = f32::NEG_INFINITY;
        let i = at(&mut rng, wv.len());
        wv[i] = f32::NAN;
    }
    let (bytes, back) = weight(dtype, &wv);
    let want = reference(&x, &back, shape);
    let mut got = vec![0.0f32; rows * n];
    product_t(family, threads, dtype, &bytes, &x, shape, &mut got).expect("product");
    let (atol, rtol) = OpKind::Matmul.spec().budget.at(k);
    let cmp = compare(&got, &want, atol, rtol);
    assert!(
        cmp.pass,
        "{family:?} {dtype} threads={threads} {shape:?} specials={specials}: {cmp:?}"
    );
}

const SHAPES: [(usize, usize, usize); 14] = [
    (1, 1, 1),
    (1, 7, 3),
    (1, 16, 4),
    (1, 17, 5),
    (1, 33, 17),
    (1, 100, 70),
    (2, 31, 9),
    (3, 257, 37),
    (4, 64, 8),
    (5, 48, 13),
    (8, 15, 66),
    (9, 40, 13),
    (17, 300, 65),
    (64, 96, 130),
];

#[test]
fn every_family_matches_the_reference() {
    let mut seed = 1;
    for family in Family::available() {
        for dtype in [DType::F16, DType::BF16] {
            for shape in SHAPES {
                for specials in [false, true] {
                    check(family, 1, dtype, shape, seed, specials);
                    seed += 1;
                }
            }
        }
    }
}

/// The decode tiles (eight rows, then four, then one) at every remainder of `n` by eight, on
/// one and two rows of `x` (the wide tiles') and three (the four-row ones'), with `k` odd,
/// below a vector and across the prefetch's row ends.
#[test]
fn every_tile_remainder_matches_the_reference() {
    let mut seed = 500;
    for family in Family::available() {
        for dtype in [DType::F16, DType::BF16] {
            for rows in [1, 2, 3] {
                for n in [7, 8, 9, 12, 13, 15, 16, 17, 21, 31] {
                    for k in [1, 5, 31, 33, 64, 1031] {
                        check(family, 1, dtype, (rows, k, n), seed, seed % 3 == 0);
                        seed += 1;
                    }
                }
            }
        }
    }
}

/// Prefill's tiles (the dot form: four rows of `x` by three weight rows on AVX2, six by four
/// on AVX-512, then the remainders; the GEMM's past `DOT_ROWS` and on the portable family) at
/// every remainder of the rows of `x` by four and six and of `n` by three and four, with `k`
/// below a vector, odd, and past one chunk of the dot form (`PREFILL_K`, 1024) into two and
/// three, NaN and inf planted in some; 200 rows take the GEMM on every family.
#[test]
fn every_prefill_tile_remainder_matches_the_reference() {
    let mut seed = 900;
    for family in Family::available() {
        for dtype in [DType::F16, DType::BF16] {
            for rows in [9, 10, 11, 12, 13, 14, 64, 200] {
                for n in [1, 2, 3, 4, 5, 49] {
                    for k in [3, 31, 1024, 1031, 2049, 2500] {
                        if rows >= 64 && k > 1024 && n < 49 {
                            continue;
                        }
                        check(family, 1, dtype, (rows, k, n), seed, seed % 3 == 0);
                        seed += 1;
                    }
                }
            }
        }
    }
}

#[test]
fn threads_give_the_bits_of_one() {
    for family in Family::available() {
        for dtype in [DType::F16, DType::BF16] {
            // Decode (over the threading threshold) and prefill shapes.
            for (shape, seed) in [
                ((1, 300, 701), 7),
                ((3, 257, 300), 8),
                ((40, 200, 150), 9),
                ((13, 2100, 130), 10),
            ] {
                let (rows, k, n) = shape;
                let mut rng = Rng::new(seed);
                let x = rng.uniform_vec(rows * k, -1.0, 1.0);
                let (bytes, _) = weight(dtype, &rng.uniform_vec(n * k, -1.0, 1.0));
                let mut one = vec![0.0f32; rows * n];
                product_t(family, 1, dtype, &bytes, &x, shape, &mut one).expect("one");
                for threads in [2, 3] {
                    let mut got = vec![0.0f32; rows * n];
                    product_t(family, threads, dtype, &bytes, &x, shape, &mut got).expect("more");
                    assert!(
                        got.iter()
                            .zip(&one)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{family:?} {dtype} {shape:?} threads={threads}"
                    );
                }
                check(family, 2, dtype, shape, seed + 100, true);
            }
        }
    }
}

#[test]
fn the_op_writes_the_transposed_product_back_with_bias_and_activation() {
    // Prefill (each range's GEMM blocks straight into its columns) and decode, against the
    // transposed product on one thread turned back by hand: the same bits.
    let family = Family::best();
    for dtype in [DType::F16, DType::BF16] {
        for (shape, seed) in [
            ((9, 64, 21), 21),
            ((40, 200, 150), 22),
            ((130, 96, 200), 23),
            ((64, 1100, 50), 24),
        ] {
            let (rows, k, n) = shape;
            let mut rng = Rng::new(seed);
            let x = rng.uniform_vec(rows * k, -1.0, 1.0);
            let (bytes, _) = weight(dtype, &rng.uniform_vec(n * k, -1.0, 1.0));
            let b = rng.uniform_vec(n, -0.5, 0.5);
            let mut t = vec![0.0f32; rows * n];
            product_t(family, 1, dtype, &bytes, &x, shape, &mut t).expect("one thread");
            let xt = Tensor::from_f32(&[rows, k], x.clone()).expect("x");
            let wt = Tensor::from_raw(&[n, k], dtype, bytes.clone()).expect("w");
            let bt = Tensor::from_f32(&[n], b.clone()).expect("b");
            let y = product_of(Activation::Tanh, &xt, &wt, Some(&bt), None)
                .expect("taken")
                .expect("a product");
            let y = y[0].as_f32().expect("f32");
            for r in 0..rows {
                for j in 0..n {
                    let want = linear::act(Activation::Tanh, t[j * rows + r] + b[j]);
                    let got = y[r * n + j];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{dtype} {shape:?} ({r}, {j})"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let family = Family::best();
    let mut t = vec![0.0f32; 4];
    let x = vec![1.0f32; 4];
    // A weight too short for its shape, a quantized dtype.
    assert!(product_t(family, 1, DType::F16, &[0u8; 6], &x, (1, 4, 1), &mut t).is_err());
    assert!(product_t(family, 1, DType::Q8_0, &[0u8; 34], &x, (1, 4, 1), &mut t).is_err());
    assert!(product_t(family, 1, DType::F16, &[0u8; 8], &x, (1, 4, 1), &mut t).is_ok());
}

#[test]
fn the_forced_family_caps_the_choice() {
    // `Family::of` follows `Isa`: portable stays portable.
    assert_eq!(Family::of(Isa::Portable), Family::Portable);
    assert!(Family::available().contains(&Family::best()));
}
