//! `linear`: `act(x @ weight^T + bias)`, torch's `F.linear` followed by an activation, as one op
//! so a device backend can run it as one matmul with the bias and activation in its epilogue
//! (and the backward as products that apply the activation's derivative while loading).
//!
//! The activations are the ones whose derivative is a function of the output (`none`, `relu`,
//! `tanh`, `sigmoid`), so the backward needs no pre-activation: it takes the usual
//! `inputs ++ outputs ++ grad_outputs` and forms `g' = g * act'(out)`, then
//! `grad_x = g' @ weight`, `grad_weight = g'^T @ x` (summed over every leading dim of x) and
//! `grad_bias = sum of g' over rows`.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, min_rank, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;
use crate::op::Activation;

const OP: &str = "linear";

/// Checks `x [..., in]`, `weight [out, in]`, `bias [out]`; returns `(rows, in, out)`.
pub fn check(x: &[usize], weight: &[usize], bias: &[usize]) -> Result<(usize, usize, usize)> {
    min_rank(OP, "x", x, 1)?;
    non_empty(OP, "x", x)?;
    if weight.len() != 2 {
        return Err(Error::bad_shape(
            OP,
            "weight",
            weight,
            "must be [out_features, in_features]",
        ));
    }
    non_empty(OP, "weight", weight)?;
    let (out_f, in_f) = (weight[0], weight[1]);
    let (lead, last) = x.split_at(x.len() - 1);
    if last[0] != in_f {
        return Err(Error::mismatch(OP, x, weight));
    }
    if bias != [out_f] {
        return Err(Error::mismatch(OP, weight, bias));
    }
    Ok((lead.iter().product(), in_f, out_f))
}

/// The shape of the output: `x`'s with the last dim replaced by `out`.
pub fn out_shape(x: &[usize], out_f: usize) -> Vec<usize> {
    let mut s = x.to_vec();
    if let Some(last) = s.last_mut() {
        *last = out_f;
    }
    s
}

/// The activation of a pre-activation value.
pub fn act<T: Real>(a: Activation, v: T) -> T {
    match a {
        Activation::None => v,
        Activation::Relu => {
            if v > T::ZERO {
                v
            } else {
                T::ZERO
            }
        }
        Activation::Tanh => v.tanh(),
        Activation::Sigmoid => T::ONE / (T::ONE + (-v).exp()),
    }
}

/// The activation's derivative, written in terms of its output `y`.
pub fn act_grad<T: Real>(a: Activation, y: T) -> T {
    match a {
        Activation::None => T::ONE,
        Activation::Relu => {
            if y > T::ZERO {
                T::ONE
            } else {
                T::ZERO
            }
        }
        Activation::Tanh => T::ONE - y * y,
        Activation::Sigmoid => y * (T::ONE - y),
    }
}

/// x `[..., in]`, weight `[out, in]`, bias `[out]` -> out `[..., out]`.
pub fn forward<T: Real>(a: Activation, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (bs, b) = float_arg(OP, args, 2, "bias")?;
    let (rows, in_f, out_f) = check(xs, ws, bs)?;
    let mut out = vec![T::ZERO; rows * out_f];
    for (xr, or) in x.chunks_exact(in_f).zip(out.chunks_exact_mut(out_f)) {
        for ((o, wr), &bj) in or.iter_mut().zip(w.chunks_exact(in_f)).zip(b) {
            let mut acc = T::ZERO;
            for (&xv, &wv) in xr.iter().zip(wr) {
                acc += xv * wv;
            }
            *o = act(a, acc + bj);
        }
    }
    Ok(vec![Owned::float(out_shape(xs, out_f), out)])
}

/// Args `x, weight, bias, out, grad_out` -> `grad_x, grad_weight, grad_bias`.
pub fn backward<T: Real>(a: Activation, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (bs, _) = float_arg(OP, args, 2, "bias")?;
    let (ys, y) = float_arg(OP, args, 3, "out")?;
    let (gs, g) = float_arg(OP, args, 4, "grad_out")?;
    let (_, in_f, out_f) = check(xs, ws, bs)?;
    let want = out_shape(xs, out_f);
    same_shape(OP, &want, ys)?;
    same_shape(OP, &want, gs)?;
    // g' [rows, out] = g * act'(out)
    let gp: Vec<T> = g
        .iter()
        .zip(y)
        .map(|(&gv, &yv)| gv * act_grad(a, yv))
        .collect();
    let mut gx = vec![T::ZERO; x.len()];
    let mut gw = vec![T::ZERO; w.len()];
    let mut gb = vec![T::ZERO; out_f];
    for ((gr, xr), gxr) in gp
        .chunks_exact(out_f)
        .zip(x.chunks_exact(in_f))
        .zip(gx.chunks_exact_mut(in_f))
    {
        for (j, (&gv, wr)) in gr.iter().zip(w.chunks_exact(in_f)).enumerate() {
            gb[j] += gv;
            // grad_x row += g'_j * weight[j]; grad_weight[j] += g'_j * x row
            for ((gxv, &wv), (gwv, &xv)) in gxr
                .iter_mut()
                .zip(wr)
                .zip(gw[j * in_f..(j + 1) * in_f].iter_mut().zip(xr))
            {
                *gxv += gv * wv;
                *gwv += gv * xv;
            }
        }
    }
    Ok(vec![
        Owned::float(xs.to_vec(), gx),
        Owned::float(ws.to_vec(), gw),
        Owned::float(bs.to_vec(), gb),
    ])
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::cpu::testutil::{f32_matches_f64, fwd, gradcheck, rand, run, t};
    use crate::op::{Direction, Op};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    const ALL: [Activation; 4] = [
        Activation::None,
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
    ];

    fn lin(activation: Activation) -> Op {
        Op::Linear { activation }
    }

    #[test]
    fn by_hand() {
        // x [1, 2] = [1, 2]; weight [[1, -1], [2, 0.5]]; bias [0.5, -4]
        // pre = [1 - 2 + 0.5, 2 + 1 - 4] = [-0.5, -1]
        let x = t(&[1, 2], &[1.0, 2.0]);
        let w = t(&[2, 2], &[1.0, -1.0, 2.0, 0.5]);
        let b = t(&[2], &[0.5, -4.0]);
        let args = [&x, &w, &b];
        assert_eq!(fwd(lin(Activation::None), &args), [-0.5, -1.0]);
        assert_eq!(fwd(lin(Activation::Relu), &args), [0.0, 0.0]);
        assert_eq!(
            fwd(lin(Activation::Tanh), &args),
            [libm::tanh(-0.5), libm::tanh(-1.0)]
        );
        let sig = fwd(lin(Activation::Sigmoid), &args);
        assert!((sig[0] - 1.0 / (1.0 + libm::exp(0.5))).abs() < 1e-15);
        // Backward by hand, relu with pre = [2, -1]: only unit 0 passes the gradient.
        let b2 = t(&[2], &[3.0, -4.0]); // pre = [-1 + 3, 3 - 4] = [2, -1]
        let op = lin(Activation::Relu);
        let y = run(op, Direction::Forward, &[&x, &w, &b2])
            .unwrap()
            .remove(0);
        assert_eq!(y.floats(), &[2.0, 0.0]);
        let g = t(&[1, 2], &[10.0, 100.0]);
        let grads = run(op, Direction::Backward, &[&x, &w, &b2, &y, &g]).unwrap();
        assert_eq!(grads[0].floats(), &[10.0, -10.0]); // 10 * weight[0]
        assert_eq!(grads[1].floats(), &[10.0, 20.0, 0.0, 0.0]); // 10 * x in row 0
        assert_eq!(grads[2].floats(), &[10.0, 0.0]);
    }

    #[test]
    fn equals_matmul_then_add_then_activation() {
        let (rows, in_f, out_f) = (7, 13, 5);
        let x = rand(1, &[rows, in_f], -1.0, 1.0);
        let w = rand(2, &[out_f, in_f], -1.0, 1.0);
        let b = rand(3, &[out_f], -1.0, 1.0);
        let mm = fwd(
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            &[&x, &w],
        );
        for a in ALL {
            let got = fwd(lin(a), &[&x, &w, &b]);
            for (i, (&g, &m)) in got.iter().zip(&mm).enumerate() {
                let want = act(a, m + b.floats()[i % out_f]);
                assert!((g - want).abs() < 1e-12, "{a:?} {i}: {g} vs {want}");
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for (seed, shape, out_f) in [
            (1u64, &[1usize, 1][..], 1usize),
            (2, &[2, 3, 7][..], 5),
            (3, &[13][..], 4),
        ] {
            let in_f = shape[shape.len() - 1];
            let x = rand(seed, shape, -1.0, 1.0);
            let w = rand(seed + 10, &[out_f, in_f], -1.0, 1.0);
            // Biases away from 0 keep most relu pre-activations off the kink.
            let b = rand(seed + 20, &[out_f], 0.4, 1.0);
            for a in ALL {
                gradcheck(lin(a), &[x.clone(), w.clone(), b.clone()]);
            }
        }
    }

    #[test]
    fn f32_agrees_with_f64() {
        let x = rand(4, &[3, 17], -1.0, 1.0);
        let w = rand(5, &[6, 17], -1.0, 1.0);
        let b = rand(6, &[6], -1.0, 1.0);
        for a in ALL {
            f32_matches_f64(lin(a), &[&x, &w, &b], 1e-5, 1e-5);
        }
    }

    #[test]
    fn bad_shapes_are_errors_naming_the_op() {
        let x = t(&[2, 3], &[0.0; 6]);
        let cases = [
            (t(&[4, 2], &[0.0; 8]), t(&[4], &[0.0; 4])),
            (t(&[4, 3], &[0.0; 12]), t(&[3], &[0.0; 3])),
            (t(&[12], &[0.0; 12]), t(&[4], &[0.0; 4])),
            (t(&[0, 3], &[]), t(&[0], &[])),
        ];
        for (w, b) in cases {
            let e = run(lin(Activation::None), Direction::Forward, &[&x, &w, &b]).unwrap_err();
            assert!(alloc::format!("{e}").contains("linear"), "{e}");
        }
    }
}
