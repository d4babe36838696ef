//! Property tests of the shape rules every backend shares: suffix broadcasting of the binary
//! ops, batched matmul, and reshape. Values are small integers, so every sum and product is
//! exact and results can be compared bit for bit with a naive loop.
// proptest runs natively only (see Cargo.toml); on wasm32 this file is empty.
#![cfg(not(target_arch = "wasm32"))]
// Tests may unwrap (see the workspace lints).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kernels_core::op::BinaryOp;
use kernels_core::{Backend, CpuBackend, Direction, Error, Op, Tensor};
use proptest::prelude::*;

fn ints(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n as u64)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 7) as f32 - 3.0)
        .collect();
    Tensor::from_f32(shape, v).unwrap()
}

fn run(op: &Op, dir: Direction, args: &[&Tensor]) -> Result<Vec<Tensor>, Error> {
    let reference = CpuBackend::reference().run(op, dir, args);
    // The fast CPU paths follow the same rules: both answer or both refuse.
    let fast = CpuBackend::new().run(op, dir, args);
    assert_eq!(
        reference.is_ok(),
        fast.is_ok(),
        "{op}: {reference:?} vs {fast:?}"
    );
    if let (Ok(r), Ok(f)) = (&reference, &fast) {
        for (x, y) in r.iter().zip(f) {
            assert_eq!(x.to_f32_vec().unwrap(), y.to_f32_vec().unwrap(), "{op}");
        }
    }
    reference
}

fn shape(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 1..=max_rank)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// `b` broadcasts over `a` exactly when its shape is a suffix of `a`'s: the result has
    /// `a`'s shape, element `i` is `a[i] op b[i % |b|]`, and `grad_b` sums over the copies.
    #[test]
    fn a_suffix_broadcasts(a_shape in shape(4), cut in 0usize..4, seed in any::<u64>()) {
        let cut = cut.min(a_shape.len() - 1);
        let b_shape = a_shape[cut..].to_vec();
        let (a, b) = (ints(&a_shape, seed), ints(&b_shape, !seed));
        let op = Op::Binary(BinaryOp::Mul);
        let out = run(&op, Direction::Forward, &[&a, &b]).unwrap().remove(0);
        prop_assert_eq!(out.shape(), &a_shape[..]);
        let (av, bv, ov) = (a.to_f32_vec().unwrap(), b.to_f32_vec().unwrap(), out.to_f32_vec().unwrap());
        for i in 0..av.len() {
            prop_assert_eq!(ov[i], av[i] * bv[i % bv.len()]);
        }
        let g = Tensor::from_f32(&a_shape, vec![1.0; av.len()]).unwrap();
        let grads = run(&op, Direction::Backward, &[&a, &b, &out, &g]).unwrap();
        prop_assert_eq!(grads[1].shape(), &b_shape[..]);
        let gb = grads[1].to_f32_vec().unwrap();
        for (j, x) in gb.iter().enumerate() {
            let want: f32 = (j..av.len()).step_by(bv.len()).map(|i| av[i]).sum();
            prop_assert_eq!(*x, want);
        }
    }

    /// Any `b` whose shape is not a suffix of `a`'s is refused with a shape mismatch naming
    /// the op, never broadcast some other way (numpy-style size-1 dims included).
    #[test]
    fn a_non_suffix_is_refused(a_shape in shape(4), b_shape in shape(4)) {
        let is_suffix = b_shape.len() <= a_shape.len()
            && a_shape[a_shape.len() - b_shape.len()..] == b_shape[..];
        prop_assume!(!is_suffix);
        let (a, b) = (ints(&a_shape, 1), ints(&b_shape, 2));
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            let e = run(&Op::Binary(op), Direction::Forward, &[&a, &b]).unwrap_err();
            prop_assert!(matches!(e, Error::ShapeMismatch { .. }), "{}", e);
        }
    }

    /// Batched matmul: leading dims equal, or one operand 2-D and shared; each batch entry is
    /// the 2-D product of its slices (transposes included).
    #[test]
    fn batched_matmul_is_the_product_of_each_batch_entry(
        batch in prop::collection::vec(1usize..4, 0..3),
        (m, k, n) in (1usize..6, 1usize..6, 1usize..6),
        (trans_a, trans_b) in (any::<bool>(), any::<bool>()),
        shared in 0u8..3,
        seed in any::<u64>(),
    ) {
        let mat = |r: usize, c: usize, t: bool| if t { vec![c, r] } else { vec![r, c] };
        let with = |lead: bool, mut tail: Vec<usize>| {
            if lead { let mut s = batch.clone(); s.append(&mut tail); s } else { tail }
        };
        // shared 1: a is 2-D; 2: b is 2-D; 0: both batched.
        let a_shape = with(shared != 1, mat(m, k, trans_a));
        let b_shape = with(shared != 2, mat(k, n, trans_b));
        let (a, b) = (ints(&a_shape, seed), ints(&b_shape, seed ^ 5));
        let op = Op::Matmul { trans_a, trans_b };
        let out = run(&op, Direction::Forward, &[&a, &b]).unwrap().remove(0);
        let lead = if a_shape.len() > 2 || b_shape.len() > 2 { batch.clone() } else { vec![] };
        let mut want_shape = lead.clone();
        want_shape.extend([m, n]);
        prop_assert_eq!(out.shape(), &want_shape[..]);
        let count: usize = lead.iter().product();
        let (av, bv, ov) = (a.to_f32_vec().unwrap(), b.to_f32_vec().unwrap(), out.to_f32_vec().unwrap());
        let a_step = if a_shape.len() > 2 { m * k } else { 0 };
        let b_step = if b_shape.len() > 2 { k * n } else { 0 };
        for e in 0..count {
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0.0f32;
                    for p in 0..k {
                        let x = av[e * a_step + if trans_a { p * m + i } else { i * k + p }];
                        let y = bv[e * b_step + if trans_b { j * k + p } else { p * n + j }];
                        s += x * y;
                    }
                    prop_assert_eq!(ov[(e * m + i) * n + j], s);
                }
            }
        }
    }

    /// Inner dims that differ, or leading dims that differ with both operands batched, are
    /// refused with a shape mismatch.
    #[test]
    fn mismatched_matmul_is_refused(
        lead_a in prop::collection::vec(1usize..4, 1..3),
        lead_b in prop::collection::vec(1usize..4, 1..3),
        (m, k, k2, n) in (1usize..5, 1usize..5, 1usize..5, 1usize..5),
    ) {
        prop_assume!(k != k2 || lead_a != lead_b);
        let mut a_shape = lead_a.clone();
        a_shape.extend([m, k]);
        let mut b_shape = lead_b.clone();
        b_shape.extend([k2, n]);
        let op = Op::Matmul { trans_a: false, trans_b: false };
        let e = run(&op, Direction::Forward, &[&ints(&a_shape, 3), &ints(&b_shape, 4)]).unwrap_err();
        prop_assert!(matches!(e, Error::ShapeMismatch { .. } | Error::BadShape { .. }), "{}", e);
    }

    /// Reshape keeps the elements in order exactly when the element count is kept, and refuses
    /// any other count (overflowing ones included) without panicking.
    #[test]
    fn reshape_keeps_elements_exactly_when_counts_match(
        from in shape(4),
        to in prop::collection::vec(0usize..7, 0..5),
        huge in any::<bool>(),
    ) {
        let x = ints(&from, 9);
        let n: usize = from.iter().product();
        let mut to = to;
        if huge {
            to.push(usize::MAX);
        }
        let count = to.iter().try_fold(1usize, |acc, d| acc.checked_mul(*d));
        match x.reshape(&to) {
            Ok(y) => {
                prop_assert_eq!(count, Some(n));
                prop_assert_eq!(y.shape(), &to[..]);
                prop_assert_eq!(y.to_f32_vec().unwrap(), x.to_f32_vec().unwrap());
                prop_assert!(y.reshape(&from).unwrap().bit_eq(&x));
            }
            Err(e) => {
                prop_assert_ne!(count, Some(n));
                prop_assert!(matches!(e, Error::ShapeMismatch { .. }), "{}", e);
            }
        }
        // A factorization of the same count always reshapes.
        let mut flat = vec![n];
        if n.is_multiple_of(2) && n > 0 {
            flat = vec![2, n / 2];
        }
        prop_assert!(x.reshape(&flat).is_ok());
    }
}
