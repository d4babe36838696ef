// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::testutil::*;
use crate::cpu::{self, Data, OwnedData};
use crate::gradcheck::{Options, check_op};
use crate::op::Direction;
use crate::rng::Rng;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn run<T: Real>(dir: Direction, args: &[&Owned<T>]) -> Result<Vec<Owned<T>>> {
    let v: Vec<View<T>> = args.iter().map(|a| a.view()).collect();
    cpu::run(&Op::Embedding, dir, &v)
}
fn table() -> Owned<f64> {
    t(&[3, 2], &[0., 1., 10., 11., 20., 21.])
}

#[test]
fn lookup_by_hand() {
    let y = run(Direction::Forward, &[&ints(&[3], &[2, 0, 2]), &table()]).unwrap();
    assert_eq!(y[0].shape, [3, 2]);
    assert_eq!(y[0].floats(), [20., 21., 0., 1., 20., 21.]);
    // Rank-0 ids give one row; [2, 2] ids give [2, 2, dim].
    let y = run(Direction::Forward, &[&ints(&[], &[1]), &table()]).unwrap();
    assert_eq!(y[0].shape, [2]);
    assert_eq!(y[0].floats(), [10., 11.]);
    let y = run(
        Direction::Forward,
        &[&ints(&[2, 2], &[0, 1, 2, 1]), &table()],
    )
    .unwrap();
    assert_eq!(y[0].shape, [2, 2, 2]);
    assert_eq!(y[0].floats(), [0., 1., 10., 11., 20., 21., 10., 11.]);
}

#[test]
fn i64_ids_work_like_i32() {
    let w = table();
    let id64 = [2i64, 1];
    let args = [
        View {
            shape: &[2],
            data: Data::I64(&id64),
        },
        w.view(),
    ];
    let y = cpu::run(&Op::Embedding, Direction::Forward, &args).unwrap();
    assert_eq!(y[0].floats(), [20., 21., 10., 11.]);
    // An i64 id that does not even fit i32 is reported as it was given.
    let huge = [1i64 << 40];
    let args = [
        View {
            shape: &[1],
            data: Data::I64(&huge),
        },
        w.view(),
    ];
    let e = cpu::run(&Op::Embedding, Direction::Forward, &args).unwrap_err();
    assert_eq!(
        e,
        Error::IndexOutOfRange {
            op: "embedding",
            tensor: "ids".into(),
            index: 1 << 40,
            bound: 3
        }
    );
}

#[test]
fn bad_ids_and_shapes() {
    for bad in [-1, 3, i32::MIN, i32::MAX] {
        let e = run(Direction::Forward, &[&ints(&[2], &[0, bad]), &table()]).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfRange {
                op: "embedding",
                tensor: "ids".into(),
                index: bad as i64,
                bound: 3
            }
        );
    }
    // The backward checks too.
    let g = t(&[1, 2], &[1., 1.]);
    let e = run(Direction::Backward, &[&ints(&[1], &[5]), &table(), &g, &g]).unwrap_err();
    assert!(
        matches!(e, Error::IndexOutOfRange { index: 5, .. }),
        "{e:?}"
    );
    let e = run(Direction::Forward, &[&ints(&[1], &[0]), &t(&[6], &[0.; 6])]).unwrap_err();
    assert!(matches!(e, Error::BadShape { .. }), "{e:?}");
    let e = run(Direction::Forward, &[&ints(&[0], &[]), &table()]).unwrap_err();
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let e = run(Direction::Forward, &[&ints(&[1], &[0]), &t(&[3, 0], &[])]).unwrap_err();
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    // Float ids are a dtype error.
    let e = run(Direction::Forward, &[&t(&[1], &[0.]), &table()]).unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
    // grad_out must be ids.shape ++ [dim].
    let g = t(&[2], &[1., 1.]);
    let e = run(Direction::Backward, &[&ints(&[1], &[0]), &table(), &g, &g]).unwrap_err();
    assert_eq!(e, Error::mismatch("embedding", &[2], &[1, 2]));
}

#[test]
fn repeated_ids_accumulate() {
    let i = ints(&[4], &[2, 0, 2, 2]);
    let out = t(&[4, 2], &[0.; 8]);
    let g = t(&[4, 2], &[1., 2., 3., 4., 5., 6., 7., 8.]);
    let d = run(Direction::Backward, &[&i, &table(), &out, &g]).unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].shape, [3, 2]);
    assert_eq!(d[0].floats(), [3., 4., 0., 0., 1. + 5. + 7., 2. + 6. + 8.]);
}

#[test]
fn gradcheck_and_f32() {
    let mut rng = Rng::new(5);
    for (shape, vocab, dim) in [
        (&[2usize, 3, 5][..], 7usize, 13usize),
        (&[1], 1, 1),
        (&[13], 7, 3),
    ] {
        let n: usize = shape.iter().product();
        let id: Vec<i32> = (0..n).map(|_| rng.below(vocab as u64) as i32).collect();
        let wv = rng.uniform_vec(vocab * dim, -1., 1.);
        let w = t(
            &[vocab, dim],
            &wv.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        );
        let i = ints(shape, &id);
        let r = check_op(&Op::Embedding, &[i.clone(), w.clone()], Options::default()).unwrap();
        assert!(r.pass(), "{shape:?}: {r:?}");
        // f32 lookup moves the same values.
        let w32 = Owned::float(w.shape.clone(), wv.clone());
        let i32_ = Owned::<f32> {
            shape: shape.to_vec(),
            data: OwnedData::I32(id.clone()),
        };
        let y32 = run(Direction::Forward, &[&i32_, &w32]).unwrap();
        let y64 = run(Direction::Forward, &[&i, &w]).unwrap();
        let y32: Vec<f64> = y32[0].floats().iter().map(|&v| v as f64).collect();
        assert_eq!(y32, y64[0].floats());
    }
}
