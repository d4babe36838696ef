// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::cpu::testutil::*;
use crate::gradcheck::{Options, check_op};
use crate::numerics::compare;
use crate::op::Direction;

fn fwd(op: Op, x: &Owned<f64>) -> Owned<f64> {
    run(op, Direction::Forward, &[x]).unwrap().remove(0)
}
fn bwd(op: Op, x: &Owned<f64>, g: &[f64]) -> Vec<f64> {
    let y = fwd(op, x);
    let g = t(&y.shape, g);
    run(op, Direction::Backward, &[x, &y, &g]).unwrap()[0]
        .floats()
        .to_vec()
}
fn argmax_of(x: &Owned<f64>) -> (Vec<usize>, Vec<i32>) {
    let o = fwd(Op::Argmax, x);
    match o.data {
        OwnedData::I32(v) => (o.shape, v),
        OwnedData::Float(_) => panic!("argmax must return i32"),
    }
}
const SUM: Op = Op::Reduce(ReduceOp::Sum);
const MEAN: Op = Op::Reduce(ReduceOp::Mean);
const MAX: Op = Op::Reduce(ReduceOp::Max);

#[test]
fn forward_by_hand() {
    let x = t(&[2, 3], &[1., 5., 3., -1., -1., -2.]);
    let s = fwd(SUM, &x);
    assert_eq!(s.shape, [2]);
    assert_eq!(s.floats(), [9., -4.]);
    assert_eq!(fwd(MEAN, &x).floats(), [3., -4. / 3.]);
    assert_eq!(fwd(MAX, &x).floats(), [5., -1.]);
    assert_eq!(argmax_of(&x), (vec![2], vec![1, 0]));
    // [2, 3, 5] batch keeps the two leading dims.
    let x = rand(1, &[2, 3, 5], -1., 1.);
    let s = fwd(SUM, &x);
    assert_eq!(s.shape, [2, 3]);
    let want: Vec<f64> = x.floats().chunks(5).map(|r| r.iter().sum()).collect();
    assert_eq!(s.floats(), want);
    // Rank 1 gives a rank-0 scalar; a single element is itself.
    let s = fwd(SUM, &t(&[4], &[1., 2., 3., 4.]));
    assert_eq!(s.shape, Vec::<usize>::new());
    assert_eq!(s.floats(), [10.]);
    for op in [SUM, MEAN, MAX] {
        assert_eq!(fwd(op, &t(&[1], &[-7.5])).floats(), [-7.5]);
    }
    assert_eq!(argmax_of(&t(&[1], &[3.])), (vec![], vec![0]));
}

#[test]
fn sum_accumulates_without_f32_cancellation() {
    // Sequential f32 addition would lose the 1 against 1e8.
    let x = narrow(&t(&[3], &[1e8, 1., -1e8]));
    let s = run(SUM, Direction::Forward, &[&x]).unwrap();
    assert_eq!(s[0].floats(), [1.0f32]);
    // 13 copies of 0.1 (not exact in binary): within one f32 rounding of 1.3.
    let x = narrow(&t(&[13], &[0.1; 13]));
    let s = run(SUM, Direction::Forward, &[&x]).unwrap();
    assert_eq!(s[0].floats(), [(0.1f32 as f64 * 13.) as f32]);
}

#[test]
fn ties_nan_and_infinities() {
    // Ties: first maximum, and only it gets the gradient.
    let x = t(&[2, 3], &[2., 7., 7., -3., -3., -3.]);
    assert_eq!(argmax_of(&x).1, [1, 0]);
    assert_eq!(bwd(MAX, &x, &[10., 20.]), [0., 10., 0., 20., 0., 0.]);
    // NaN anywhere: max is NaN, argmax the first NaN, gradient to that NaN.
    let x = t(
        &[3, 4],
        &[
            1.,
            f64::NAN,
            3.,
            f64::NAN,
            f64::NAN,
            9.,
            1.,
            2.,
            1.,
            2.,
            3.,
            4.,
        ],
    );
    let m = fwd(MAX, &x);
    assert!(m.floats()[0].is_nan() && m.floats()[1].is_nan());
    assert_eq!(m.floats()[2], 4.);
    assert_eq!(argmax_of(&x).1, [1, 0, 3]);
    let g = bwd(MAX, &x, &[1., 1., 1.]);
    assert_eq!(g, [0., 1., 0., 0., 1., 0., 0., 0., 0., 0., 0., 1.]);
    // NaN propagates through sum and mean.
    assert!(fwd(SUM, &x).floats()[0].is_nan());
    assert!(fwd(MEAN, &x).floats()[1].is_nan());
    // All -inf: max -inf at index 0; +inf wins.
    let x = t(
        &[2, 2],
        &[f64::NEG_INFINITY, f64::NEG_INFINITY, 1., f64::INFINITY],
    );
    assert_eq!(fwd(MAX, &x).floats(), [f64::NEG_INFINITY, f64::INFINITY]);
    assert_eq!(argmax_of(&x).1, [0, 1]);
}

#[test]
fn backward_by_hand() {
    let x = t(&[2, 2], &[1., 4., 3., 2.]);
    assert_eq!(bwd(SUM, &x, &[1., -2.]), [1., 1., -2., -2.]);
    assert_eq!(bwd(MEAN, &x, &[1., -2.]), [0.5, 0.5, -1., -1.]);
    assert_eq!(bwd(MAX, &x, &[1., -2.]), [0., 1., -2., 0.]);
}

#[test]
fn gradcheck_and_dtype_agreement() {
    let shapes: [&[usize]; 5] = [&[2, 3, 5], &[1], &[7], &[13], &[13, 1]];
    for (i, shape) in shapes.into_iter().enumerate() {
        // Continuous random values: no ties in max.
        let x = rand(i as u64, shape, -3., 3.);
        for op in [SUM, MEAN, MAX] {
            let r = check_op(&op, core::slice::from_ref(&x), Options::default()).unwrap();
            assert!(r.pass(), "{op} {shape:?}: {r:?}");
            let y64 = fwd(op, &x);
            let y32 = run(op, Direction::Forward, &[&narrow(&x)]).unwrap();
            let y32: Vec<f64> = y32[0].floats().iter().map(|&v| v as f64).collect();
            let c = compare(&y32, y64.floats(), 1e-7, 1e-6);
            assert!(c.pass, "{op}: f32 vs f64 {c:?}");
        }
        let x32 = narrow(&x);
        let a32 = run(Op::Argmax, Direction::Forward, &[&x32]).unwrap();
        assert_eq!(a32[0].data, OwnedData::I32(argmax_of(&x).1));
    }
}

#[test]
fn shape_errors() {
    let scalar = t(&[], &[1.]);
    let empty_last = t(&[2, 0], &[]);
    let empty_lead = t(&[0, 3], &[]);
    for op in [SUM, MEAN, MAX, Op::Argmax] {
        let e = run(op, Direction::Forward, &[&scalar]).unwrap_err();
        assert!(matches!(e, Error::BadShape { .. }), "{op}: {e:?}");
        for x in [&empty_last, &empty_lead] {
            let e = run(op, Direction::Forward, &[x]).unwrap_err();
            assert_eq!(
                e,
                Error::Empty {
                    op: op.name(),
                    tensor: "x".into()
                }
            );
        }
    }
    let x = t(&[2, 3], &[1.; 6]);
    let y = t(&[2], &[3.; 2]);
    let bad = t(&[3], &[1.; 3]);
    let e = run(SUM, Direction::Backward, &[&x, &y, &bad]).unwrap_err();
    assert_eq!(e, Error::mismatch("sum", &[3], &[2]));
    let e = run(MAX, Direction::Backward, &[&x, &bad, &y]).unwrap_err();
    assert_eq!(e, Error::mismatch("max", &[3], &[2]));
    let e = run(Op::Argmax, Direction::Backward, &[&x, &y, &y]).unwrap_err();
    assert!(matches!(e, Error::NoBackward { op: "argmax" }), "{e:?}");
}
