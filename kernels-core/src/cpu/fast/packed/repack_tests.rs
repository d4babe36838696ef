//! A weight in the CPU backend's interleaved layout ([`qdot::interleave`]) through the op
//! paths: decode and prefill products (8-bit and exact activations, the integer GEMM and the
//! f32 panels), the swiglu halves, embedding rows and the reference's dequantize give the
//! plain weight's bits; its plain bytes are not handed out as if they were plain.

use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::cpu::fast::qdot::tests::weights;
use crate::rng::Rng;

/// The op's outputs on the plain and on the repacked weight, bit for bit.
fn same(op: &Op, inputs: &[&Tensor], w_at: usize, wr: &Tensor, exact: bool, what: &str) {
    let want = run_with(op, Direction::Forward, inputs, exact);
    let mut with_r: Vec<&Tensor> = inputs.to_vec();
    with_r[w_at] = wr;
    let got = run_with(op, Direction::Forward, &with_r, exact);
    let (want, got) = match (want, got) {
        (Some(w), Some(g)) => (w.expect("plain"), g.expect("repacked")),
        (None, None) => return,
        (w, g) => panic!(
            "{what}: fast path plain {} repacked {}",
            w.is_some(),
            g.is_some()
        ),
    };
    let (w, g) = (
        want[0].as_f32().expect("f32"),
        got[0].as_f32().expect("f32"),
    );
    assert_eq!(w.len(), g.len(), "{what}");
    for (i, (a, b)) in w.iter().zip(g).enumerate() {
        assert!(
            a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
            "{what} output {i}: plain {a} repacked {b}"
        );
    }
}

#[test]
fn repacked_weights_give_the_plain_bits_on_every_path() {
    let mut rng = Rng::new(41);
    for dtype in [DType::Q4_0, DType::Q5_0, DType::Q8_0] {
        for (n, k) in [(8, 32), (21, 64), (40, 96)] {
            let rb = dtype.bytes_for(k).expect("whole blocks");
            let wq = weights(&mut rng, dtype, n, k);
            let w = Tensor::from_raw(&[n, k], dtype, wq.clone()).expect("w");
            let packed = interleave::repack(dtype, &wq, rb, n).expect("repack");
            let wr = Tensor::from_raw_in(&[n, k], dtype, packed, Layout::Rows8).expect("w8");
            assert!(
                wr.packed_bytes().is_err(),
                "interleaved bytes are not plain"
            );
            assert_eq!(interleave::plain_bytes(&wr).expect("plain"), wq);
            let (a, b) = (w.dequantize().expect("f32"), wr.dequantize().expect("f32"));
            assert_eq!(a.as_f32().expect("f32"), b.as_f32().expect("f32"));
            let bias =
                Tensor::from_f32(&[n], (0..n).map(|i| i as f32 * 0.1).collect()).expect("bias");
            for rows in [1, 2, 5, 12, 33] {
                let mut x: Vec<f32> = (0..rows * k).map(|_| rng.uniform() * 2.0 - 1.0).collect();
                if rows == 5 {
                    x[k + 2] = f32::NAN;
                }
                let xt = Tensor::from_f32(&[rows, k], x).expect("x");
                let lin = Op::Linear {
                    activation: Activation::Relu,
                };
                let mm = Op::Matmul {
                    trans_a: false,
                    trans_b: true,
                };
                for exact in [false, true] {
                    let what = alloc::format!("{dtype} n {n} k {k} rows {rows} exact {exact}");
                    same(&lin, &[&xt, &w, &bias], 1, &wr, exact, &what);
                    same(&mm, &[&xt, &w], 1, &wr, exact, &what);
                    if n % 2 == 0 {
                        same(&Op::MatmulSwiglu, &[&xt, &w], 1, &wr, exact, &what);
                    }
                }
            }
            let ids = Tensor::from_i32(&[5], vec![0, 7, (n - 1) as i32, 3, 0]).expect("ids");
            same(&Op::Embedding, &[&ids, &w], 1, &wr, false, "embedding");
        }
    }
    // Only matrices of the three formats take the layout.
    let q = weights(&mut rng, DType::Q4_1, 8, 32);
    assert!(Tensor::from_raw_in(&[8, 32], DType::Q4_1, q, Layout::Rows8).is_err());
}

#[test]
fn an_embedding_row_past_the_bytes_is_an_error_not_a_panic() {
    let mut rng = Rng::new(43);
    let (dtype, n, k) = (DType::Q8_0, 16, 64);
    let rb = dtype.bytes_for(k).expect("whole blocks");
    let wq = weights(&mut rng, dtype, n, k);
    let packed = interleave::repack(dtype, &wq, rb, n).expect("repack");
    let mut cache = (0, Vec::new());
    for layout in [Layout::Plain, Layout::Rows8] {
        let bytes = if layout == Layout::Plain {
            &wq
        } else {
            &packed
        };
        // The bytes of 16 rows, short of the 24 the caller claims: rows 16-23 are not there.
        for j in [3, 12] {
            let row = plain_row(dtype, (bytes, layout), rb, 24, j, &mut cache).expect("row");
            assert_eq!(row, &wq[j * rb..(j + 1) * rb], "{layout:?} row {j}");
        }
        for j in [16, 23, usize::MAX / 2] {
            let got = plain_row(dtype, (bytes, layout), rb, 24, j, &mut cache);
            assert!(got.is_err(), "{layout:?} row {j} past the bytes");
        }
    }
}
