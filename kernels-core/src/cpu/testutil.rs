//! Helpers shared by the reference kernels' unit tests: building f64 arguments, running the
//! dispatcher, comparing, and the two cross-checks every kernel file runs (finite differences
//! through [`crate::gradcheck::check_op`], and f32 against f64).

use alloc::vec::Vec;

use super::{Owned, OwnedData, View, run as dispatch};
use crate::error::Result;
use crate::gradcheck::{Options, check_op};
use crate::numerics::{Real, compare};
use crate::op::{Direction, Op};
use crate::rng::Rng;

/// An f64 argument of the given shape.
pub(crate) fn t(shape: &[usize], data: &[f64]) -> Owned<f64> {
    Owned::float(shape.to_vec(), data.to_vec())
}

/// An integer argument (ids, targets).
pub(crate) fn ints(shape: &[usize], v: &[i32]) -> Owned<f64> {
    Owned {
        shape: shape.to_vec(),
        data: OwnedData::I32(v.to_vec()),
    }
}

/// Runs `op` through the reference dispatcher.
pub(crate) fn run<T: Real>(op: Op, dir: Direction, args: &[&Owned<T>]) -> Result<Vec<Owned<T>>> {
    let v: Vec<View<T>> = args.iter().map(|a| a.view()).collect();
    dispatch(&op, dir, &v)
}

/// The first forward output's elements.
pub(crate) fn fwd(op: Op, args: &[&Owned<f64>]) -> Vec<f64> {
    run(op, Direction::Forward, args).unwrap()[0]
        .floats()
        .to_vec()
}

/// Seeded uniform values in `[lo, hi)`, drawn in f32 so [`narrow`] is exact.
pub(crate) fn rand(seed: u64, shape: &[usize], lo: f32, hi: f32) -> Owned<f64> {
    let n = shape.iter().product();
    let v = Rng::new(seed).uniform_vec(n, lo, hi);
    Owned::float(shape.to_vec(), v.iter().map(|&x| x as f64).collect())
}

/// The same argument in f32 (integer arguments unchanged).
pub(crate) fn narrow(o: &Owned<f64>) -> Owned<f32> {
    match &o.data {
        OwnedData::Float(v) => Owned::float(o.shape.clone(), v.iter().map(|&v| v as f32).collect()),
        OwnedData::I32(v) => Owned {
            shape: o.shape.clone(),
            data: OwnedData::I32(v.clone()),
        },
    }
}

/// Asserts `got` is within `tol` (absolute and relative) of `want`.
pub(crate) fn close(got: &[f64], want: &[f64], tol: f64) {
    let c = compare(got, want, tol, tol);
    assert!(c.pass, "got {got:?}\nwant {want:?}\n{c:?}");
}

/// Asserts the backward of `op` matches central differences in f64 at `inputs` (every element).
pub(crate) fn gradcheck(op: Op, inputs: &[Owned<f64>]) {
    let opts = Options {
        max_elems_per_input: usize::MAX,
        ..Options::default()
    };
    let r = check_op(&op, inputs, opts).unwrap();
    assert!(r.pass(), "{op}: {r:?}");
}

/// Asserts the f32 run of `op` (forward, and backward when it has one) agrees with the f64 run
/// within `atol + rtol * |f64|`, for seeded upstream gradients.
pub(crate) fn f32_matches_f64(op: Op, inputs: &[&Owned<f64>], atol: f64, rtol: f64) {
    let n32: Vec<Owned<f32>> = inputs.iter().map(|o| narrow(o)).collect();
    let i32s: Vec<&Owned<f32>> = n32.iter().collect();
    let o64 = run(op, Direction::Forward, inputs).unwrap();
    let o32 = run(op, Direction::Forward, &i32s).unwrap();
    let mut want: Vec<Owned<f64>> = o64.clone();
    let mut got: Vec<Owned<f32>> = o32.clone();
    if op.spec().differentiable() {
        let g64: Vec<Owned<f64>> = o64.iter().map(|o| rand(77, &o.shape, -1., 1.)).collect();
        let g32: Vec<Owned<f32>> = g64.iter().map(narrow).collect();
        let mut b64 = inputs.to_vec();
        b64.extend(o64.iter().chain(&g64));
        let mut b32 = i32s.clone();
        b32.extend(o32.iter().chain(&g32));
        want.extend(run(op, Direction::Backward, &b64).unwrap());
        got.extend(run(op, Direction::Backward, &b32).unwrap());
    }
    for (x, y) in want.iter().zip(&got) {
        let y: Vec<f64> = y.floats().iter().map(|&v| v as f64).collect();
        let c = compare(&y, x.floats(), atol, rtol);
        assert!(c.pass, "{op}: f32 vs f64 {c:?}");
    }
}

/// Seeded values in [-1, 1).
pub(crate) fn rand_vec(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n).map(|_| rng.uniform_f64() * 2.0 - 1.0).collect()
}

/// Runs `op` forward in `T` on f64 inputs (converted), returning f64 outputs.
pub(crate) fn run_as<T: Real>(op: &Op, inputs: &[(Vec<usize>, Vec<f64>)]) -> Vec<Owned<f64>> {
    let data: Vec<Vec<T>> = inputs
        .iter()
        .map(|(_, d)| d.iter().map(|&x| T::from_f64(x)).collect())
        .collect();
    let views: Vec<View<T>> = inputs
        .iter()
        .zip(data.iter())
        .map(|((s, _), d)| View::float(s, d))
        .collect();
    dispatch(op, Direction::Forward, &views)
        .unwrap()
        .into_iter()
        .map(|o| {
            let d = o.floats().iter().map(|x| x.to_f64()).collect();
            Owned::float(o.shape.clone(), d)
        })
        .collect()
}

/// [`gradcheck`] for float inputs given as `(shape, data)` pairs, with the upstream gradients
/// drawn from `seed`.
pub(crate) fn grad_check(op: &Op, inputs: &[(Vec<usize>, Vec<f64>)], seed: u64) {
    let owned: Vec<Owned<f64>> = inputs.iter().map(|(s, d)| t(s, d)).collect();
    let opts = Options {
        max_elems_per_input: usize::MAX,
        seed,
        ..Options::default()
    };
    let r = check_op(op, &owned, opts).unwrap();
    assert!(r.pass(), "{}: {r:?}", op.name());
}

/// Asserts `|got - want| <= atol + rtol |want|` elementwise.
pub(crate) fn assert_close(got: &[f64], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len(), "lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "element {i}: got {g}, want {w}"
        );
    }
}
