//! The weight dtypes against the `gguf` package (`tests/fixtures/quant/make_fixtures.py`):
//! every decoder bit-exact with its dequantization of random blocks, and the quantizers the
//! package has bit-exact with its quantization of random rows. `Q4_K`, which it cannot
//! quantize, is checked by its round-trip error against GGML's published bound.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::quant;
use kernels_core::{DType, Tensor};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

macro_rules! fixture {
    ($name:literal, $ext:literal) => {
        include_bytes!(concat!("../../tests/fixtures/quant/", $name, ".", $ext)).as_slice()
    };
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.to_bits(),
            w.to_bits(),
            "{what}: element {i}: {g} vs gguf's {w}"
        );
    }
}

fn check_dequantize(dtype: DType, blocks: &[u8], want: &[u8]) {
    let want = f32s(want);
    let got = quant::dequantize(dtype, blocks, want.len()).unwrap();
    assert_bits_eq(dtype.name(), &got, &want);
    // Through a tensor, as ops see it.
    let cols = dtype.block_elems() * 2;
    let t = Tensor::from_raw(&[want.len() / cols, cols], dtype, blocks.to_vec()).unwrap();
    assert_bits_eq(
        dtype.name(),
        t.dequantize().unwrap().as_f32().unwrap(),
        &want,
    );
}

#[test]
fn dequantization_is_bit_exact_with_the_gguf_package() {
    let cases: [(DType, &[u8], &[u8]); 8] = [
        (
            DType::F16,
            fixture!("f16", "blocks"),
            fixture!("f16", "dequantized"),
        ),
        (
            DType::BF16,
            fixture!("bf16", "blocks"),
            fixture!("bf16", "dequantized"),
        ),
        (
            DType::Q8_0,
            fixture!("q8_0", "blocks"),
            fixture!("q8_0", "dequantized"),
        ),
        (
            DType::Q4_0,
            fixture!("q4_0", "blocks"),
            fixture!("q4_0", "dequantized"),
        ),
        (
            DType::Q4_1,
            fixture!("q4_1", "blocks"),
            fixture!("q4_1", "dequantized"),
        ),
        (
            DType::Q5_0,
            fixture!("q5_0", "blocks"),
            fixture!("q5_0", "dequantized"),
        ),
        (
            DType::Q4_K,
            fixture!("q4_k", "blocks"),
            fixture!("q4_k", "dequantized"),
        ),
        (
            DType::Q6_K,
            fixture!("q6_k", "blocks"),
            fixture!("q6_k", "dequantized"),
        ),
    ];
    for (dtype, blocks, want) in cases {
        check_dequantize(dtype, blocks, want);
    }
}

#[test]
fn quantization_is_bit_exact_with_the_gguf_package() {
    let cases: [(DType, &[u8], &[u8]); 5] = [
        (
            DType::BF16,
            fixture!("bf16", "source"),
            fixture!("bf16", "quantized"),
        ),
        (
            DType::Q8_0,
            fixture!("q8_0", "source"),
            fixture!("q8_0", "quantized"),
        ),
        (
            DType::Q4_0,
            fixture!("q4_0", "source"),
            fixture!("q4_0", "quantized"),
        ),
        (
            DType::Q4_1,
            fixture!("q4_1", "source"),
            fixture!("q4_1", "quantized"),
        ),
        (
            DType::Q5_0,
            fixture!("q5_0", "source"),
            fixture!("q5_0", "quantized"),
        ),
    ];
    for (dtype, source, want) in cases {
        let got = quant::quantize(dtype, &f32s(source)).unwrap();
        assert_eq!(got.len(), want.len(), "{dtype}");
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        assert_eq!(first, None, "{dtype}: first differing byte");
    }
}

/// Root-mean-square error of a quantize-dequantize round trip, relative to the rms of `x`.
fn relative_rms_error(dtype: DType, x: &[f32]) -> f64 {
    let q = quant::quantize(dtype, x).unwrap();
    let y = quant::dequantize(dtype, &q, x.len()).unwrap();
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in x.iter().zip(&y) {
        num += ((a - b) as f64).powi(2);
        den += (*a as f64).powi(2);
    }
    (num / den).sqrt()
}

#[test]
fn round_trip_errors_are_those_of_the_formats() {
    let mut rng = kernels_core::Rng::new(7);
    let x: Vec<f32> = (0..256 * 16).map(|_| rng.normal()).collect();
    // Gaussian weights. Rounding to a step h leaves an rms error of h / sqrt(12): f16 and bf16
    // have 11 and 8 significant bits (2^-11 / sqrt(3) = 2.8e-4, 2^-8 / sqrt(3) = 2.3e-3 of the
    // value); Q8_0's step is max|x| / 127 of a block (max|x| about 2.5 sigma for 32 normal
    // samples: 0.0057 sigma), the 4- and 5-bit formats' 16 or 32 times coarser. Measured here:
    // 2.1e-4, 1.7e-3, 5.5e-3, 0.044 (q5_0), 0.079 (q4_1), 0.088 (q4_0), 0.073 (q4_k).
    for (dtype, bound) in [
        (DType::F16, 3e-4),
        (DType::BF16, 2.5e-3),
        (DType::Q8_0, 7e-3),
        (DType::Q5_0, 5.5e-2),
        (DType::Q4_1, 0.10),
        (DType::Q4_0, 0.11),
        (DType::Q4_K, 0.09),
    ] {
        let e = relative_rms_error(dtype, &x);
        assert!(e < bound, "{dtype}: relative rms error {e} over {bound}");
        assert!(e > 0.0, "{dtype}: a lossy format lost nothing?");
    }
    // Q4_K beats Q4_0 at the same 4.5 bits (that is what its search is for).
    assert!(relative_rms_error(DType::Q4_K, &x) < relative_rms_error(DType::Q4_0, &x));
}

#[test]
fn all_zero_and_constant_blocks_round_trip_exactly() {
    for dtype in quant::QUANTIZE_TO {
        let n = dtype.block_elems().max(32) * 2;
        let zeros = vec![0.0f32; n];
        let q = quant::quantize(dtype, &zeros).unwrap();
        assert_eq!(quant::dequantize(dtype, &q, n).unwrap(), zeros, "{dtype}");
    }
}

#[test]
fn bad_sizes_are_errors_not_panics() {
    assert!(quant::dequantize(DType::Q4_K, &[0; 143], 256).is_err());
    assert!(quant::dequantize(DType::Q4_K, &[0; 144], 255).is_err());
    assert!(quant::dequantize(DType::F32, &[0; 4], 1).is_err());
    assert!(quant::quantize(DType::Q8_0, &[0.0; 33]).is_err());
    assert!(quant::quantize(DType::Q6_K, &[0.0; 256]).is_err());
    // Blocks must run along the last dimension.
    assert!(Tensor::from_raw(&[32, 1], DType::Q8_0, vec![0; 34]).is_err());
    assert!(Tensor::from_raw(&[1, 32], DType::Q8_0, vec![0; 33]).is_err());
    assert!(Tensor::from_raw(&[1, 32], DType::F32, vec![0; 128]).is_err());
    assert!(Tensor::from_raw(&[usize::MAX, 64], DType::Q8_0, vec![]).is_err());
    let t = Tensor::from_raw(&[2, 32], DType::Q8_0, vec![0; 68]).unwrap();
    assert_eq!(t.byte_len(), 68);
    assert!(t.as_f32().is_err());
}

#[test]
fn the_f16_conversion_is_half_s_on_every_bit_pattern() {
    for h in 0..=u16::MAX {
        let want = half::f16::from_bits(h).to_f32();
        let got = quant::decode::f16_to_f32(h);
        assert_eq!(got.to_bits(), want.to_bits(), "f16 bits {h:#06x}");
    }
}
