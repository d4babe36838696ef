//! The weight decoded straight into `B~` ([`product`]) against the transposed panel product
//! ([`panel_product_t`], the weight on the GEMM's left): the same bits for every format the
//! panels take, in both layouts (the interleaved groups decoded in registers on x86, the plain
//! rows through the row buffer), with a bias and each activation, NaN and infinity in `x`, on
//! awkward shapes (a tail of weight rows past the last group and the last micro-panel, fewer
//! `x` rows than a micro-tile, several `KC` blocks with a short last one, several blocks of
//! outputs in one range), and on the threads the pool has.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::cpu::fast::packed::panel_product_t;
use crate::cpu::fast::qdot::{self, tests::weights};
use crate::rng::Rng;

/// Every block-quantized format the panel path takes.
fn formats() -> impl Iterator<Item = DType> {
    DType::WEIGHT
        .into_iter()
        .filter(|d| d.is_quantized() && qdot::takes(*d))
}

/// `product` on `w` (`layout`) against `act(t + bias)` of the one-thread transposed product on
/// the plain weight `plain`, bit for bit (NaN for NaN).
#[allow(clippy::too_many_arguments)]
fn check(
    dtype: DType,
    plain: &[u8],
    (w, layout): (&[u8], Layout),
    x: &[f32],
    bias: Option<&[f32]>,
    activation: Activation,
    (rows, k, n): (usize, usize, usize),
    what: &str,
) {
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let mut t = vec![f32::NAN; rows * n];
    panel_product_t(1, dtype, plain, rb, x, (rows, k, n), &mut t).expect("the panels");
    let got = product(
        dtype,
        (w, layout),
        rb,
        x,
        bias,
        activation,
        (rows, k, n),
        &[rows, n],
    )
    .expect("a product");
    let got = got[0].as_f32().expect("f32");
    for r in 0..rows {
        for j in 0..n {
            let b = bias.map_or(0.0, |b| b[j]);
            let want = linear::act(activation, t[j * rows + r] + b);
            let g = got[r * n + j];
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{what}, {dtype} {rows}x{k}x{n} {layout:?} {activation:?}: ({r}, {j}) {g} against {want}"
            );
        }
    }
}

#[test]
fn every_format_and_layout_gives_the_panel_products_bits() {
    let mut rng = Rng::new(5);
    for dtype in formats() {
        let be = dtype.block_elems();
        // k: one block; a short last `KC` block (AVX2's 256, AVX-512's 192); several blocks.
        let ks = [be, (544usize).next_multiple_of(be), 1280];
        for (rows, k, n) in [
            (1, ks[0], 5),
            (5, ks[1], 24),
            (7, ks[0], 21),
            (13, ks[2], 40),
            (33, ks[1], 53),
        ] {
            let plain = weights(&mut rng, dtype, n, k);
            let rb = dtype.bytes_for(k).expect("whole blocks");
            let mut layouts = vec![(plain.clone(), Layout::Plain)];
            if interleave::supports(dtype) {
                let r = interleave::repack(dtype, &plain, rb, n).expect("repack");
                layouts.push((r, Layout::Rows8));
            }
            let mut x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
            if rows >= 5 {
                x[k + 3] = f32::NAN;
                x[3 * k + 1] = f32::INFINITY;
                x[4 * k] = f32::NEG_INFINITY;
            }
            let bias: Vec<f32> = (0..n).map(|_| rng.uniform() - 0.5).collect();
            for (w, layout) in &layouts {
                let ops = (&w[..], *layout);
                let dims = (rows, k, n);
                check(
                    dtype,
                    &plain,
                    ops,
                    &x,
                    None,
                    Activation::None,
                    dims,
                    "plain",
                );
                for a in [
                    Activation::None,
                    Activation::Relu,
                    Activation::Tanh,
                    Activation::Sigmoid,
                ] {
                    check(dtype, &plain, ops, &x, Some(&bias), a, dims, "bias");
                }
            }
        }
    }
}

#[test]
fn large_products_cut_into_blocks_and_ranges_keep_the_bits() {
    // 300 weight rows: several blocks of outputs per range (64 KiB of outputs is 85 weight rows
    // at 12 x rows, rounded to micro-panels), ranges on every pool thread, a tail of four rows.
    let mut rng = Rng::new(9);
    let (rows, n) = (12, 300);
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_K] {
        let k = 512;
        let plain = weights(&mut rng, dtype, n, k);
        let rb = dtype.bytes_for(k).expect("whole blocks");
        let x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
        check(
            dtype,
            &plain,
            (&plain, Layout::Plain),
            &x,
            None,
            Activation::None,
            (rows, k, n),
            "plain",
        );
        if interleave::supports(dtype) {
            let r = interleave::repack(dtype, &plain, rb, n).expect("repack");
            let dims = (rows, k, n);
            check(
                dtype,
                &plain,
                (&r, Layout::Rows8),
                &x,
                None,
                Activation::None,
                dims,
                "rows8",
            );
        }
    }
}

#[test]
fn disagreeing_sizes_are_errors() {
    let (w, x, q) = (vec![0u8; 34 * 2], vec![0.0f32; 32 * 3], DType::Q8_0);
    let run = |w: &[u8], rb, x: &[f32], bias: Option<&[f32]>| {
        product(
            q,
            (w, Layout::Plain),
            rb,
            x,
            bias,
            Activation::None,
            (3, 32, 2),
            &[3, 2],
        )
    };
    assert!(run(&w, 34, &x, None).is_ok());
    assert!(run(&w[1..], 34, &x, None).is_err());
    assert!(run(&w, 33, &x, None).is_err());
    assert!(run(&w, 34, &x[1..], None).is_err());
    assert!(run(&w, 34, &x, Some(&[0.0; 3])).is_err());
    let f32_weight = product(
        DType::F32,
        (&w, Layout::Plain),
        34,
        &x,
        None,
        Activation::None,
        (3, 32, 2),
        &[3, 2],
    );
    assert!(f32_weight.is_err());
}
