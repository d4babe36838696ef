//! Prefill on a quantized weight with f32 activations ([`panel_product_t`]): the weight rows
//! split over any number of threads give the bits of one thread, on awkward shapes (weight rows
//! not a whole number of grains or panels, a range of fewer rows than a micro-tile, several
//! panels in one range), and the result is the dequantize-then-f32 product.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::cpu::fast::qdot::tests::weights;
use crate::rng::Rng;

/// Every block-quantized format the panel path takes.
fn formats() -> impl Iterator<Item = DType> {
    DType::WEIGHT
        .into_iter()
        .filter(|d| d.is_quantized() && qdot::takes(*d))
}

fn run_on(
    threads: usize,
    dtype: DType,
    w: &[u8],
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let row_bytes = dtype.bytes_for(k).expect("whole blocks");
    let mut t = vec![f32::NAN; rows * n];
    panel_product_t(threads, dtype, w, row_bytes, x, (rows, k, n), &mut t).expect("a product");
    t
}

/// The product on each of `threads` thread counts has the bits of the one-thread product.
fn same_bits_on(
    threads: &[usize],
    dtype: DType,
    w: &[u8],
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
) {
    let one = run_on(1, dtype, w, x, (rows, k, n));
    for &t in threads {
        let many = run_on(t, dtype, w, x, (rows, k, n));
        let same = one
            .iter()
            .zip(&many)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{dtype} {rows}x{k}x{n} on {t} threads");
    }
}

/// Every output against the decoded weight's f32 dot product, within the f32 rounding of a
/// different summation order (relative to the sum of `|x w|`).
fn check_reference(dtype: DType, w: &[u8], x: &[f32], (rows, k, n): (usize, usize, usize)) {
    let wf = quant::dequantize(dtype, w, n * k).expect("whole blocks");
    let got = run_on(1, dtype, w, x, (rows, k, n));
    for j in 0..n {
        for r in 0..rows {
            let (xr, wr) = (&x[r * k..(r + 1) * k], &wf[j * k..(j + 1) * k]);
            let want: f64 = xr.iter().zip(wr).map(|(a, b)| *a as f64 * *b as f64).sum();
            let mag: f64 = xr
                .iter()
                .zip(wr)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            let g = got[j * rows + r];
            if !want.is_finite() {
                assert_eq!(
                    g.is_nan(),
                    want.is_nan(),
                    "{dtype} ({j}, {r}): {g} vs {want}"
                );
                continue;
            }
            assert!(
                (g as f64 - want).abs() <= 1e-5 * mag + 1e-30,
                "{dtype} {rows}x{k}x{n} at weight row {j}, x row {r}: {g} vs {want}"
            );
        }
    }
}

#[test]
fn any_thread_count_gives_the_bits_of_one_thread() {
    let mut rng = Rng::new(28);
    for dtype in formats() {
        let kb = dtype.block_elems();
        // (rows of x, k, weight rows): a single weight row; fewer weight rows than a grain; a
        // prime count; rows of x that fill no register tile.
        let shapes = [
            (9, kb.max(96).div_ceil(kb) * kb, 1),
            (13, 3 * kb.max(32), 7),
            (24, 256, 37),
            (67, 2 * kb.max(256), 70),
            (10, kb.max(256), 301),
        ];
        for (rows, k, n) in shapes {
            let w = weights(&mut rng, dtype, n, k);
            let mut x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
            // A row with an infinity and a row with a NaN land where one thread puts them.
            x[k + 3] = f32::INFINITY;
            x[2 * k] = f32::NAN;
            same_bits_on(&[2, 3, 5, 8], dtype, &w, &x, (rows, k, n));
            check_reference(dtype, &w, &x, (rows, k, n));
        }
    }
}

#[test]
fn several_panels_in_one_range() {
    // k = 8192: 64 weight rows a panel, so 300 rows are five panels on one thread (the last
    // short) and ranges cut mid-panel on more.
    let mut rng = Rng::new(7);
    let (rows, k, n) = (9, 8192, 300);
    for dtype in [DType::Q4_0, DType::Q4_K] {
        let w = weights(&mut rng, dtype, n, k);
        let x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
        same_bits_on(&[2, 3], dtype, &w, &x, (rows, k, n));
        check_reference(dtype, &w, &x, (rows, k, n));
    }
}

/// `linear` with `activation` through `run_with` with exact activations (the panel path) on
/// `x [rows, k]`, weight `wq` and bias `b`: every output the one-thread panel product's bits with
/// the bias and activation applied. Returns the outputs.
fn exact_linear_has_the_panel_bits(
    dtype: DType,
    wq: &[u8],
    x: &[f32],
    b: &[f32],
    (rows, k, n): (usize, usize, usize),
    activation: Activation,
) -> Vec<f32> {
    let xt = Tensor::from_f32(&[rows, k], x.to_vec()).expect("x");
    let wt = Tensor::from_raw(&[n, k], dtype, wq.to_vec()).expect("w");
    let bt = Tensor::from_f32(&[n], b.to_vec()).expect("b");
    let op = Op::Linear { activation };
    let y = run_with(&op, Direction::Forward, &[&xt, &wt, &bt], true)
        .expect("the fast path")
        .expect("a product");
    let y = y[0].as_f32().expect("f32").to_vec();
    let t = run_on(1, dtype, wq, x, (rows, k, n));
    for r in 0..rows {
        for j in 0..n {
            let want = linear::act(activation, t[j * rows + r] + b[j]);
            assert_eq!(
                y[r * n + j].to_bits(),
                want.to_bits(),
                "{dtype} {rows}x{k}x{n}: ({r}, {j})"
            );
        }
    }
    y
}

#[test]
fn the_op_takes_the_panels_and_matches_the_threaded_product() {
    // Prefill rows through `run_with` (exact activations: the panel path, each range's block
    // written straight into its columns) against the transposed product on one thread, with
    // bias and activation applied; a tail of weight rows, and ranges on more than one thread.
    let mut rng = Rng::new(11);
    for (rows, k, n) in [(12, 64, 21), (40, 64, 100), (9, 96, 200)] {
        let dtype = DType::Q8_0;
        let wq = weights(&mut rng, dtype, n, k);
        let x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.uniform() - 0.5).collect();
        exact_linear_has_the_panel_bits(dtype, &wq, &x, &b, (rows, k, n), Activation::Relu);
    }
}

#[test]
fn exact_decode_rows_take_the_panels() {
    // Decode's few rows with exact activations (f32, no integer products): the panel product's
    // bits on every format, through `linear` with a bias and tanh, with a NaN and an
    // infinity in one row landing where the reference puts them.
    let mut rng = Rng::new(2812);
    for dtype in formats() {
        for (rows, n) in [(1, 21), (2, 9), (MAX_ROWS, 17)] {
            let k = 3 * dtype.block_elems();
            let wq = weights(&mut rng, dtype, n, k);
            let mut x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
            if rows > 1 {
                x[k + 5] = f32::NAN;
                x[k + 7] = f32::INFINITY;
            }
            let b: Vec<f32> = (0..n).map(|_| rng.uniform() - 0.5).collect();
            let dims = (rows, k, n);
            let y = exact_linear_has_the_panel_bits(dtype, &wq, &x, &b, dims, Activation::Tanh);
            for (i, got) in y.iter().enumerate() {
                assert_eq!(got.is_nan(), i / n == 1, "{dtype} {rows}: output {i} {got}");
            }
            check_reference(dtype, &wq, &x[..k], (1, k, n));
        }
    }
}

#[test]
fn disagreeing_sizes_are_errors() {
    let w = vec![0u8; 34 * 2];
    let x = vec![0.0f32; 32 * 3];
    let mut t = vec![0.0f32; 6];
    let q = DType::Q8_0;
    assert!(panel_product_t(2, q, &w, 34, &x, (3, 32, 2), &mut t).is_ok());
    assert!(panel_product_t(2, q, &w, 34, &x, (3, 32, 3), &mut t).is_err());
    assert!(panel_product_t(2, q, &w, 34, &x[1..], (3, 32, 2), &mut t).is_err());
    assert!(panel_product_t(2, q, &w, 33, &x, (3, 32, 2), &mut t[1..]).is_err());
}

#[test]
fn prefill_takes_the_integer_gemm_where_it_beats_the_panels() {
    // Prefill rows through `run_with` (8-bit activations at the configured precision): the bits
    // of the integer product where `qdot::gemm::residual_prefill` (or single precision) picks
    // it, else the panels', on every format.
    let mut rng = Rng::new(2803);
    let n = 19;
    let p = config::activation_precision();
    let beyond = qdot::gemm::RESIDUAL_PREFILL_MAX_ROWS + 1;
    for (dtype, rows) in formats().flat_map(|d| [(d, MAX_ROWS + 9), (d, beyond)]) {
        let k = 3 * dtype.block_elems();
        let wq = weights(&mut rng, dtype, n, k);
        let x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
        let xt = Tensor::from_f32(&[rows, k], x.clone()).expect("x");
        let wt = Tensor::from_raw(&[n, k], dtype, wq.clone()).expect("w");
        let op = Op::Matmul {
            trans_a: false,
            trans_b: true,
        };
        let y = run_with(&op, Direction::Forward, &[&xt, &wt], false)
            .expect("the fast path")
            .expect("a product");
        let y = y[0].as_f32().expect("f32");
        let integer = p == qdot::Precision::Single
            || qdot::gemm::residual_prefill(Family::best(), dtype, rows);
        let t = if integer {
            let rb = dtype.bytes_for(k).expect("whole blocks");
            let mut t = vec![0.0f32; rows * n];
            qdot::product_t(Family::best(), p, dtype, &wq, rb, &x, (rows, k, n), &mut t)
                .expect("a product");
            t
        } else {
            run_on(1, dtype, &wq, &x, (rows, k, n))
        };
        for r in 0..rows {
            for j in 0..n {
                let want = t[j * rows + r];
                assert_eq!(y[r * n + j].to_bits(), want.to_bits(), "{dtype} ({r}, {j})");
            }
        }
    }
}

#[test]
fn transposed_operand_products_are_the_row_products_transposed() {
    // `W @ h^T` (prefill's q/k/v projections) and `a^T @ W^T` (o_proj) on a packed weight take
    // the rows' product: the bits of `h @ W^T` transposed per batch entry, on quantized, f16
    // and bf16 weights, for rows under and over MAX_ROWS; an f32 weight keeps the GEMM.
    let mut rng = Rng::new(2811);
    let (batch, n) = (2, 11);
    let dtypes = formats().chain([DType::F16, DType::BF16]);
    for (dtype, seq) in dtypes.flat_map(|d| [(d, 3), (d, MAX_ROWS + 5)]) {
        let k = 2 * dtype.block_elems().max(32);
        let wt = Tensor::from_raw(&[n, k], dtype, weights(&mut rng, dtype, n, k)).expect("w");
        let h: Vec<f32> = (0..batch * seq * k)
            .map(|_| rng.uniform() * 2.0 - 1.0)
            .collect();
        let ht = Tensor::from_f32(&[batch, seq, k], h.clone()).expect("h");
        let op = |trans_a, trans_b| Op::Matmul { trans_a, trans_b };
        let fwd = |op: Op, ins: &[&Tensor]| {
            let y = run_with(&op, Direction::Forward, ins, false)
                .expect("the fast path")
                .expect("a product");
            (y[0].shape().to_vec(), y[0].as_f32().expect("f32").to_vec())
        };
        let (rs, rows) = fwd(op(false, true), &[&ht, &wt]);
        assert_eq!(rs, [batch, seq, n]);
        // W @ h^T: [batch, n, seq].
        let (ws, wh) = fwd(op(false, true), &[&wt, &ht]);
        assert_eq!(ws, [batch, n, seq], "{dtype}");
        // a^T @ W^T with a = h^T per batch entry ([batch, k, seq]): [batch, seq, n].
        let mut a = vec![0.0f32; h.len()];
        for b in 0..batch {
            for s in 0..seq {
                for c in 0..k {
                    a[(b * k + c) * seq + s] = h[(b * seq + s) * k + c];
                }
            }
        }
        let at = Tensor::from_f32(&[batch, k, seq], a).expect("a");
        let (as_, ah) = fwd(op(true, true), &[&at, &wt]);
        assert_eq!(as_, [batch, seq, n], "{dtype}");
        for b in 0..batch {
            for s in 0..seq {
                for j in 0..n {
                    let want = rows[(b * seq + s) * n + j].to_bits();
                    assert_eq!(wh[(b * n + j) * seq + s].to_bits(), want, "{dtype} W h^T");
                    assert_eq!(ah[(b * seq + s) * n + j].to_bits(), want, "{dtype} a^T W^T");
                }
            }
        }
    }
    // An f32 weight is not this module's: the GEMM takes it.
    let w32 = Tensor::from_f32(&[3, 32], vec![0.5; 96]).expect("w");
    let h32 = Tensor::from_f32(&[1, 4, 32], vec![0.25; 128]).expect("h");
    let op = Op::Matmul {
        trans_a: false,
        trans_b: true,
    };
    assert!(run_with(&op, Direction::Forward, &[&w32, &h32], false).is_none());
}
