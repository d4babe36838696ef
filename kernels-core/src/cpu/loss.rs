//! Losses: cross-entropy over class logits and mean squared error, forward and backward.
//! Both reduce to a rank-0 scalar (shape `[]`, one element) by the mean, as PyTorch's default
//! `reduction="mean"`; sums accumulate in f64.
//!
//! Cross-entropy takes logits `[..., c]` and integer targets of the leading shape (`[n, c]` with
//! `[n]`, or `[c]` with a rank-0 target). Each row uses a max-subtracted log-sum-exp, so large
//! logits do not overflow. A target outside `0..c` is an [`Error::IndexOutOfRange`]; there is
//! no `ignore_index` (PyTorch's `-100` is reported as out of range, not skipped).

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, int_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Op;

/// Checks logits `[..., c]` and targets `[...]`; returns `(c, targets as class indices)`.
fn ce_plan(
    name: &'static str,
    sl: &[usize],
    st: &[usize],
    targets: &[i64],
) -> Result<(usize, Vec<usize>)> {
    min_rank(name, "logits", sl, 1)?;
    non_empty(name, "logits", sl)?;
    let (c, lead) = match sl.split_last() {
        Some((&c, lead)) => (c, lead),
        None => return Err(Error::bad_shape(name, "logits", sl, "needs rank >= 1")),
    };
    if st != lead {
        return Err(Error::mismatch(name, st, lead));
    }
    let classes = targets
        .iter()
        .map(|&k| match usize::try_from(k) {
            Ok(i) if i < c => Ok(i),
            _ => Err(Error::IndexOutOfRange {
                op: name,
                tensor: "targets".into(),
                index: k,
                bound: c,
            }),
        })
        .collect::<Result<Vec<usize>>>()?;
    Ok((c, classes))
}

/// `(max, sum(exp(x - max)))` of a non-empty row; the sum in f64.
fn max_sumexp<T: Real>(row: &[T]) -> (T, f64) {
    let m = row.iter().fold(T::NEG_INFINITY, |m, &v| m.max_nan(v));
    (m, row.iter().map(|&v| (v - m).exp().to_f64()).sum())
}

/// `out = mean_rows(logsumexp(logits) - logits[target])`; logits `[..., c]`, targets `[...]`,
/// out `[]`.
pub fn cross_entropy_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::CrossEntropy.name();
    let (sl, x) = float_arg(name, args, 0, "logits")?;
    let (st, targets) = int_arg(name, args, 1, "targets")?;
    let (c, classes) = ce_plan(name, sl, st, &targets)?;
    let mut total = 0.0f64;
    for (row, &k) in x.chunks_exact(c).zip(&classes) {
        let (m, sum) = max_sumexp(row);
        // -log softmax(x)_k = ln sum exp(x - m) - (x_k - m).
        let xk = row.get(k).copied().unwrap_or(m);
        total += Real::ln(sum) - (xk - m).to_f64();
    }
    let loss = total / classes.len() as f64;
    Ok(vec![Owned::float(vec![], vec![T::from_f64(loss)])])
}

/// `[grad_logits] = (softmax(logits) - onehot(targets)) * grad_out / rows`; args
/// `(logits, targets, out, grad_out)`, `out` and `grad_out` of shape `[]`.
pub fn cross_entropy_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::CrossEntropy.name();
    let (sl, x) = float_arg(name, args, 0, "logits")?;
    let (st, targets) = int_arg(name, args, 1, "targets")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    let (c, classes) = ce_plan(name, sl, st, &targets)?;
    same_shape(name, so, &[])?;
    same_shape(name, sg, &[])?;
    let scale = g.first().map_or(0.0, |v| v.to_f64()) / classes.len() as f64;
    let mut grad = Vec::with_capacity(x.len());
    for (row, &k) in x.chunks_exact(c).zip(&classes) {
        let (m, sum) = max_sumexp(row);
        for (j, &v) in row.iter().enumerate() {
            let p = (v - m).exp().to_f64() / sum;
            let onehot = if j == k { 1.0 } else { 0.0 };
            grad.push(T::from_f64((p - onehot) * scale));
        }
    }
    Ok(vec![Owned::float(sl.to_vec(), grad)])
}

/// Checks a and b: same shape, non-empty.
fn mse_check(name: &'static str, sa: &[usize], sb: &[usize]) -> Result<()> {
    non_empty(name, "a", sa)?;
    non_empty(name, "b", sb)?;
    same_shape(name, sa, sb)
}

/// `out = mean((a - b)^2)`; a and b any (equal) shape, out `[]`.
pub fn mse_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Mse.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    mse_check(name, sa, sb)?;
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = x.to_f64() - y.to_f64();
            d * d
        })
        .sum();
    let loss = sum / a.len() as f64;
    Ok(vec![Owned::float(vec![], vec![T::from_f64(loss)])])
}

/// `[grad_a, grad_b]` with `grad_a = 2 (a - b) grad_out / N = -grad_b`; args
/// `(a, b, out, grad_out)`.
pub fn mse_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let name = Op::Mse.name();
    let (sa, a) = float_arg(name, args, 0, "a")?;
    let (sb, b) = float_arg(name, args, 1, "b")?;
    let (so, _) = float_arg(name, args, 2, "out")?;
    let (sg, g) = float_arg(name, args, 3, "grad_out")?;
    mse_check(name, sa, sb)?;
    same_shape(name, so, &[])?;
    same_shape(name, sg, &[])?;
    let scale = 2.0 * g.first().map_or(0.0, |v| v.to_f64()) / a.len() as f64;
    let (ga, gb): (Vec<T>, Vec<T>) = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = (x.to_f64() - y.to_f64()) * scale;
            (T::from_f64(d), T::from_f64(-d))
        })
        .unzip();
    Ok(vec![
        Owned::float(sa.to_vec(), ga),
        Owned::float(sb.to_vec(), gb),
    ])
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::cpu::testutil::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use crate::gradcheck::{Options, check_op};

    use crate::op::Direction;
    use crate::rng::Rng;

    fn loss(op: Op, args: &[&Owned<f64>]) -> f64 {
        let y = run(op, Direction::Forward, args).unwrap();
        assert_eq!(y[0].shape, Vec::<usize>::new(), "losses are rank-0");
        y[0].floats()[0]
    }
    fn close(got: f64, want: f64, tol: f64) {
        assert!(
            (got - want).abs() <= tol * (1. + want.abs()),
            "{got} vs {want}"
        );
    }
    const CE: Op = Op::CrossEntropy;

    #[test]
    fn cross_entropy_by_hand() {
        // Uniform logits: ln(c) whatever the target.
        let x = t(&[2, 2], &[0., 0., 5., 5.]);
        close(loss(CE, &[&x, &ints(&[2], &[0, 1])]), 2f64.ln(), 1e-15);
        // -log_softmax([1, 2, 3])[2], also as rank-1 logits with a rank-0 target.
        let want = 0.4076059644443806;
        close(
            loss(CE, &[&t(&[1, 3], &[1., 2., 3.]), &ints(&[1], &[2])]),
            want,
            1e-15,
        );
        close(
            loss(CE, &[&t(&[3], &[1., 2., 3.]), &ints(&[], &[2])]),
            want,
            1e-15,
        );
        // Mean over rows: (2.4076... + 0.4076...) / 2.
        let x = t(&[2, 3], &[1., 2., 3., 1., 2., 3.]);
        close(
            loss(CE, &[&x, &ints(&[2], &[0, 2])]),
            (2.4076059644443806 + want) / 2.,
            1e-15,
        );
        // [2, 3, c] logits with [2, 3] targets: all rows uniform over 5 classes.
        let x = t(&[2, 3, 5], &[0.; 30]);
        close(
            loss(CE, &[&x, &ints(&[2, 3], &[0, 1, 2, 3, 4, 0])]),
            5f64.ln(),
            1e-15,
        );
        // One class: loss 0.
        close(
            loss(CE, &[&t(&[3, 1], &[7., -1., 0.]), &ints(&[3], &[0; 3])]),
            0.,
            0.,
        );
    }

    #[test]
    fn cross_entropy_is_stable_for_large_logits() {
        let x = t(&[2, 3], &[1001., 1002., 1003., -1e30, 0., -1e30]);
        let targets = ints(&[2], &[2, 1]);
        close(loss(CE, &[&x, &targets]), 0.4076059644443806 / 2., 1e-12);
        let y = run(CE, Direction::Forward, &[&narrow(&x), &narrow(&targets)]).unwrap();
        close(y[0].floats()[0] as f64, 0.4076059644443806 / 2., 1e-6);
        // The target at -inf-like logit: a huge but finite loss, no NaN.
        let l = loss(CE, &[&t(&[2], &[-1e30, 0.]), &ints(&[], &[0])]);
        close(l, 1e30, 1e-12);
        // NaN logits propagate.
        assert!(loss(CE, &[&t(&[2], &[f64::NAN, 0.]), &ints(&[], &[1])]).is_nan());
    }

    #[test]
    fn cross_entropy_backward_by_hand() {
        let x = t(&[2, 2], &[0., 0., 0., 0.]);
        let tgt = ints(&[2], &[0, 1]);
        let y = run(
            CE,
            Direction::Backward,
            &[&x, &tgt, &t(&[], &[0.]), &t(&[], &[2.])],
        )
        .unwrap();
        // (softmax - onehot) * 2 / 2.
        assert_eq!(y.len(), 1);
        assert_eq!(y[0].shape, [2, 2]);
        assert_eq!(y[0].floats(), [-0.5, 0.5, 0.5, -0.5]);
    }

    #[test]
    fn cross_entropy_gradcheck() {
        let mut rng = Rng::new(3);
        for (i, shape) in [
            &[2usize, 3, 5][..],
            &[1, 13],
            &[7],
            &[13, 1],
            &[1, 1],
            &[7, 13],
        ]
        .into_iter()
        .enumerate()
        {
            let (lead, c) = shape.split_at(shape.len() - 1);
            let n: usize = lead.iter().product();
            let targets: Vec<i32> = (0..n).map(|_| rng.below(c[0] as u64) as i32).collect();
            let x = rand(i as u64, shape, -4., 4.);
            let tgt = ints(lead, &targets);
            let r = check_op(&CE, &[x.clone(), tgt.clone()], Options::default()).unwrap();
            assert!(r.pass(), "{shape:?}: {r:?}");
            f32_matches_f64(CE, &[&x, &tgt], 1e-7, 1e-6);
        }
    }

    #[test]
    fn cross_entropy_errors() {
        let x = t(&[2, 3], &[0.; 6]);
        for bad in [3, -1, -100] {
            let e = run(CE, Direction::Forward, &[&x, &ints(&[2], &[0, bad])]).unwrap_err();
            assert_eq!(
                e,
                Error::IndexOutOfRange {
                    op: "cross_entropy",
                    tensor: "targets".into(),
                    index: bad as i64,
                    bound: 3
                }
            );
        }
        for st in [&[3usize][..], &[2, 1], &[1], &[]] {
            let n: usize = st.iter().product();
            let e = run(CE, Direction::Forward, &[&x, &ints(st, &vec![0; n])]).unwrap_err();
            assert_eq!(e, Error::mismatch("cross_entropy", st, &[2]), "{st:?}");
        }
        let e = run(CE, Direction::Forward, &[&t(&[], &[1.]), &ints(&[], &[0])]).unwrap_err();
        assert!(matches!(e, Error::BadShape { .. }), "{e:?}");
        let e = run(
            CE,
            Direction::Forward,
            &[&t(&[2, 0], &[]), &ints(&[2], &[0, 0])],
        )
        .unwrap_err();
        assert!(matches!(e, Error::Empty { .. }), "{e:?}");
        let e = run(
            CE,
            Direction::Forward,
            &[&t(&[0, 3], &[]), &ints(&[0], &[])],
        )
        .unwrap_err();
        assert!(matches!(e, Error::Empty { .. }), "{e:?}");
        // Float targets: dtype error.
        let e = run(CE, Direction::Forward, &[&x, &t(&[2], &[0., 1.])]).unwrap_err();
        assert!(matches!(e, Error::DTypeMismatch { .. }), "{e:?}");
        // grad_out must be rank-0.
        let s = t(&[], &[0.]);
        let g1 = t(&[1], &[1.]);
        let e = run(
            CE,
            Direction::Backward,
            &[&x, &ints(&[2], &[0, 1]), &s, &g1],
        )
        .unwrap_err();
        assert_eq!(e, Error::mismatch("cross_entropy", &[1], &[]));
    }

    #[test]
    fn mse_by_hand() {
        let a = t(&[3], &[1., 2., 3.]);
        let b = t(&[3], &[1., 0., 0.]);
        close(loss(Op::Mse, &[&a, &b]), 13. / 3., 1e-15);
        let s = t(&[], &[0.]);
        let g = t(&[], &[1.5]);
        let d = run(Op::Mse, Direction::Backward, &[&a, &b, &s, &g]).unwrap();
        // 2 (a - b) * 1.5 / 3 = (a - b).
        assert_eq!(d[0].floats(), [0., 2., 3.]);
        assert_eq!(d[1].floats(), [-0., -2., -3.]);
        assert_eq!(d[1].shape, [3]);
        // Rank-0 inputs.
        close(loss(Op::Mse, &[&t(&[], &[2.]), &t(&[], &[-1.])]), 9., 0.);
    }

    #[test]
    fn mse_gradcheck_and_errors() {
        for (i, shape) in [&[2usize, 3, 5][..], &[1], &[7], &[13, 7]]
            .into_iter()
            .enumerate()
        {
            let a = rand(i as u64, shape, -2., 2.);
            let b = rand(i as u64 + 50, shape, -2., 2.);
            let r = check_op(&Op::Mse, &[a.clone(), b.clone()], Options::default()).unwrap();
            assert!(r.pass(), "{shape:?}: {r:?}");
            f32_matches_f64(Op::Mse, &[&a, &b], 1e-7, 1e-6);
        }
        let a = t(&[2, 3], &[0.; 6]);
        let e = run(Op::Mse, Direction::Forward, &[&a, &t(&[3], &[0.; 3])]).unwrap_err();
        assert_eq!(e, Error::mismatch("mse", &[2, 3], &[3]));
        let e = run(Op::Mse, Direction::Forward, &[&t(&[0], &[]), &t(&[0], &[])]).unwrap_err();
        assert!(matches!(e, Error::Empty { op: "mse", .. }), "{e:?}");
        let g = t(&[2, 3], &[0.; 6]);
        let e = run(Op::Mse, Direction::Backward, &[&a, &a, &t(&[], &[0.]), &g]).unwrap_err();
        assert_eq!(e, Error::mismatch("mse", &[2, 3], &[]));
    }
}
