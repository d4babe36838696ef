// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use crate::cpu::testutil::*;
use crate::gradcheck::{Options, check_op};
use crate::op::Direction;

fn rand(seed: u64, shape: &[usize]) -> Owned<f64> {
    crate::cpu::testutil::rand(seed, shape, -1., 1.)
}
fn iota(shape: &[usize]) -> Owned<f64> {
    let n: usize = shape.iter().product();
    t(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

#[test]
fn transpose_by_hand() {
    let y = run(Op::Transpose, Direction::Forward, &[&iota(&[2, 3])]).unwrap();
    assert_eq!(y[0].shape, [3, 2]);
    assert_eq!(y[0].floats(), [0., 3., 1., 4., 2., 5.]);
    // Batched: each [2, 2] matrix on its own.
    let y = run(Op::Transpose, Direction::Forward, &[&iota(&[2, 2, 2])]).unwrap();
    assert_eq!(y[0].floats(), [0., 2., 1., 3., 4., 6., 5., 7.]);
    // [1, 7] -> [7, 1] is the same data; [1, 1] too.
    let y = run(Op::Transpose, Direction::Forward, &[&iota(&[1, 7])]).unwrap();
    assert_eq!(y[0].shape, [7, 1]);
    assert_eq!(y[0].floats(), iota(&[7]).floats());
    // Transposing twice is the identity, on an awkward [2, 3, 7, 13].
    let x = rand(1, &[2, 3, 7, 13]);
    let y = run(Op::Transpose, Direction::Forward, &[&x]).unwrap();
    assert_eq!(y[0].shape, [2, 3, 13, 7]);
    let z = run(Op::Transpose, Direction::Forward, &[&y[0]]).unwrap();
    assert_eq!(z[0], x);
    // Spot check one element: x[1, 2, 5, 11] == y[1, 2, 11, 5].
    let (b0, b1, i, j) = (1, 2, 5, 11);
    let xi = ((b0 * 3 + b1) * 7 + i) * 13 + j;
    let yi = ((b0 * 3 + b1) * 13 + j) * 7 + i;
    assert_eq!(x.floats()[xi], y[0].floats()[yi]);
    // f32 moves the same bits.
    let y32 = run(Op::Transpose, Direction::Forward, &[&narrow(&x)]).unwrap();
    assert_eq!(y32[0], narrow(&y[0]));
}

#[test]
fn transpose_backward_and_gradcheck() {
    let x = iota(&[2, 3]);
    let y = run(Op::Transpose, Direction::Forward, &[&x]).unwrap();
    let g = t(&[3, 2], &[10., 11., 12., 13., 14., 15.]);
    let d = run(Op::Transpose, Direction::Backward, &[&x, &y[0], &g]).unwrap();
    assert_eq!(d[0].shape, [2, 3]);
    assert_eq!(d[0].floats(), [10., 12., 14., 11., 13., 15.]);
    for (i, shape) in [&[2usize, 3, 5][..], &[1, 1], &[7, 13], &[13, 1]]
        .into_iter()
        .enumerate()
    {
        let r = check_op(&Op::Transpose, &[rand(i as u64, shape)], Options::default()).unwrap();
        assert!(r.pass(), "{shape:?}: {r:?}");
    }
}

#[test]
fn transpose_errors() {
    let e = run(Op::Transpose, Direction::Forward, &[&iota(&[5])]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BadShape {
                op: "transpose",
                ..
            }
        ),
        "{e:?}"
    );
    let e = run(Op::Transpose, Direction::Forward, &[&t(&[3, 0], &[])]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Empty {
                op: "transpose",
                ..
            }
        ),
        "{e:?}"
    );
    // grad_out must have the transposed shape.
    let x = iota(&[2, 3]);
    let e = run(
        Op::Transpose,
        Direction::Backward,
        &[&x, &iota(&[3, 2]), &x],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("transpose", &[2, 3], &[3, 2]));
}

#[test]
fn concat_by_hand() {
    let a = iota(&[2, 1]);
    let b = t(&[2, 2], &[10., 11., 12., 13.]);
    let y = run(Op::Concat, Direction::Forward, &[&a, &b]).unwrap();
    assert_eq!(y[0].shape, [2, 3]);
    assert_eq!(y[0].floats(), [0., 10., 11., 1., 12., 13.]);
    // Rank 1.
    let y = run(Op::Concat, Direction::Forward, &[&iota(&[2]), &iota(&[3])]).unwrap();
    assert_eq!(y[0].shape, [5]);
    assert_eq!(y[0].floats(), [0., 1., 0., 1., 2.]);
    // Backward splits grad_out back.
    let g = iota(&[2, 3]);
    let d = run(Op::Concat, Direction::Backward, &[&a, &b, &g, &g]).unwrap();
    assert_eq!(d[0].shape, [2, 1]);
    assert_eq!(d[0].floats(), [0., 3.]);
    assert_eq!(d[1].shape, [2, 2]);
    assert_eq!(d[1].floats(), [1., 2., 4., 5.]);
}

#[test]
fn concat_awkward_shapes_and_gradcheck() {
    for (i, (sa, sb)) in [
        (&[2usize, 3, 5][..], &[2usize, 3, 7][..]),
        (&[1], &[1]),
        (&[13, 1], &[13, 7]),
        (&[7], &[13]),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (rand(i as u64, sa), rand(i as u64 + 9, sb));
        let y = run(Op::Concat, Direction::Forward, &[&a, &b]).unwrap();
        let (p, q) = (sa[sa.len() - 1], sb[sb.len() - 1]);
        for (r, row) in y[0].floats().chunks(p + q).enumerate() {
            assert_eq!(row[..p], a.floats()[r * p..(r + 1) * p]);
            assert_eq!(row[p..], b.floats()[r * q..(r + 1) * q]);
        }
        let r = check_op(&Op::Concat, &[a.clone(), b.clone()], Options::default()).unwrap();
        assert!(r.pass(), "{sa:?} {sb:?}: {r:?}");
        let y32 = run(Op::Concat, Direction::Forward, &[&narrow(&a), &narrow(&b)]).unwrap();
        assert_eq!(y32[0], narrow(&y[0]));
    }
}

#[test]
fn concat_errors() {
    let a = iota(&[2, 3]);
    for sb in [&[3usize, 3][..], &[3], &[1, 2, 3]] {
        let e = run(Op::Concat, Direction::Forward, &[&a, &iota(sb)]).unwrap_err();
        assert_eq!(e, Error::mismatch("concat", &[2, 3], sb), "{sb:?}");
    }
    let e = run(
        Op::Concat,
        Direction::Forward,
        &[&t(&[], &[1.]), &iota(&[1])],
    )
    .unwrap_err();
    assert!(matches!(e, Error::BadShape { op: "concat", .. }), "{e:?}");
    let e = run(Op::Concat, Direction::Forward, &[&a, &t(&[2, 0], &[])]).unwrap_err();
    assert_eq!(
        e,
        Error::Empty {
            op: "concat",
            tensor: "b".into()
        }
    );
    let b = iota(&[2, 1]);
    let g = iota(&[2, 3]);
    let e = run(
        Op::Concat,
        Direction::Backward,
        &[&a, &b, &iota(&[2, 4]), &g],
    )
    .unwrap_err();
    assert_eq!(e, Error::mismatch("concat", &[2, 3], &[2, 4]));
}

#[test]
fn kv_write_by_hand_and_backward() {
    // cache [2, 3, 2] (two heads of three positions), rows [2, 1, 2] at position 1.
    let cache = iota(&[2, 3, 2]);
    let rows = t(&[2, 1, 2], &[-1., -2., -3., -4.]);
    let op = Op::KvWrite { pos: 1 };
    let y = run(op, Direction::Forward, &[&cache, &rows]).unwrap();
    assert_eq!(y[0].shape, [2, 3, 2]);
    assert_eq!(
        y[0].floats(),
        [0., 1., -1., -2., 4., 5., 6., 7., -3., -4., 10., 11.]
    );
    let g = iota(&[2, 3, 2]);
    let d = run(op, Direction::Backward, &[&cache, &rows, &y[0], &g]).unwrap();
    assert_eq!(
        d[0].floats(),
        [0., 1., 0., 0., 4., 5., 6., 7., 0., 0., 10., 11.]
    );
    assert_eq!(d[1].shape, [2, 1, 2]);
    assert_eq!(d[1].floats(), [2., 3., 8., 9.]);
    let r = check_op(
        &Op::KvWrite { pos: 2 },
        &[rand(1, &[2, 3, 5, 4]), rand(2, &[2, 3, 2, 4])],
        Options::default(),
    )
    .unwrap();
    assert!(r.pass(), "{r:?}");
    // NaN moves like any other value.
    let rows = t(&[2, 1, 2], &[f64::NAN, 1., 2., 3.]);
    let y = run(op, Direction::Forward, &[&cache, &rows]).unwrap();
    assert!(y[0].floats()[2].is_nan());
}

#[test]
fn kv_write_rejects_what_does_not_fit() {
    let cache = iota(&[2, 3, 2]);
    let fwd = |pos: usize, rows: &Owned<f64>| {
        run(Op::KvWrite { pos }, Direction::Forward, &[&cache, rows])
    };
    let e = fwd(2, &iota(&[2, 2, 2])).unwrap_err();
    assert!(matches!(e, Error::BadAttr { attr: "pos", .. }), "{e:?}");
    assert!(fwd(usize::MAX, &iota(&[2, 1, 2])).is_err());
    assert!(fwd(0, &iota(&[2, 1, 3])).is_err());
    assert!(fwd(0, &iota(&[1, 1, 2])).is_err());
    assert!(fwd(0, &iota(&[2, 2])).is_err());
}
