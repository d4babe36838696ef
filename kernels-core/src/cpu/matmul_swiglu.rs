//! `matmul_swiglu`: a SwiGLU MLP's gate and up projections as one product over their weights
//! concatenated on rows, `weight = [gate; up]` `[2 n, in]`, with the gate in its epilogue:
//!
//! ```text
//! y   = x @ weight^T                 [rows, 2 n]   (the pre-activations, gate columns first)
//! out = silu(y[:, :n]) * y[:, n:]    [rows, n]
//! ```
//!
//! The backward makes `y` again (it is not an output), then
//! `dy = [grad * up * silu'(gate) | grad * silu(gate)]` (`swiglu`'s rules on the two halves),
//! `grad_x = dy @ weight` and `grad_weight = dy^T @ x` (summed over every leading dim of x).
//! `forward_with` and `backward_with` take the product as a function, so a fast path runs the
//! same arithmetic on its own GEMM.

use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, same_shape};
use super::elementwise::sigmoid;
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "matmul_swiglu";

/// Checks `x [..., in]` and `weight [2 n, in]`; returns `(rows, in, n)`.
pub fn check(x: &[usize], weight: &[usize]) -> Result<(usize, usize, usize)> {
    let (rows, in_f, out_f) = super::linear::check_x_weight(OP, x, weight)?;
    if !out_f.is_multiple_of(2) {
        return Err(Error::bad_shape(
            OP,
            "weight",
            weight,
            "needs an even number of rows (the gate rows, then as many up rows)",
        ));
    }
    Ok((rows, in_f, out_f / 2))
}

/// The shape of the output: `x`'s with the last dim replaced by `n`.
pub fn out_shape(x: &[usize], n: usize) -> Vec<usize> {
    let mut s = x.to_vec();
    if let Some(last) = s.last_mut() {
        *last = n;
    }
    s
}

/// `x [rows, in] @ w^T` with `w [cols, in]`: `[rows, cols]`, each output one dot product in
/// order over `in`.
pub fn product_rows<T: Real>(x: &[T], w: &[T], in_f: usize) -> Result<Vec<T>> {
    let cols = w.len() / in_f.max(1);
    let mut y = vec![T::ZERO; x.len() / in_f.max(1) * cols];
    for (xr, yr) in x.chunks_exact(in_f).zip(y.chunks_exact_mut(cols.max(1))) {
        for (o, wr) in yr.iter_mut().zip(w.chunks_exact(in_f)) {
            let mut acc = T::ZERO;
            for (&xv, &wv) in xr.iter().zip(wr) {
                acc += xv * wv;
            }
            *o = acc;
        }
    }
    Ok(y)
}

/// `silu(y[:, :n]) * y[:, n:]` for `y [rows, 2 n]`, as `swiglu` computes it.
pub fn gate_halves<T: Real>(y: &[T], n: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(y.len() / 2);
    for row in y.chunks_exact(2 * n) {
        let (gate, up) = row.split_at(n);
        out.extend(gate.iter().zip(up).map(|(&g, &u)| g * sigmoid(g) * u));
    }
    out
}

/// `dy [rows, 2 n]` from `y [rows, 2 n]` and `grad [rows, n]`: `swiglu`'s backward on the two
/// halves (`grad * up * silu'(gate)`, then `grad * silu(gate)`).
pub fn gate_halves_grad<T: Real>(y: &[T], grad: &[T], n: usize) -> Vec<T> {
    let mut dy = vec![T::ZERO; y.len()];
    for ((row, d), drow) in y
        .chunks_exact(2 * n)
        .zip(grad.chunks_exact(n))
        .zip(dy.chunks_exact_mut(2 * n))
    {
        let (gate, up) = row.split_at(n);
        let (dg, du) = drow.split_at_mut(n);
        for j in 0..n {
            let (g, s) = (gate[j], sigmoid(gate[j]));
            dg[j] = d[j] * up[j] * (s * (T::ONE + g * (T::ONE - s)));
            du[j] = d[j] * g * s;
        }
    }
    dy
}

/// The product `x [rows, in] @ w^T` (`w [cols, in]`) -> `[rows, cols]`.
pub type Product<'p, T> = &'p dyn Fn(&[T], &[T], usize) -> Result<Vec<T>>;
/// `dy [rows, cols]`, `w [cols, in]`, `x [rows, in]` -> `(dy @ w, dy^T @ x)`.
pub type ProductGrads<'p, T> = &'p dyn Fn(&[T], &[T], &[T], usize) -> Result<(Vec<T>, Vec<T>)>;

/// The reference's gradients of a product: `(dy @ w, dy^T @ x)`, each sum in order over rows
/// of `dy`.
pub fn product_grads<T: Real>(dy: &[T], w: &[T], x: &[T], in_f: usize) -> Result<(Vec<T>, Vec<T>)> {
    let cols = w.len() / in_f.max(1);
    let mut gx = vec![T::ZERO; x.len()];
    let mut gw = vec![T::ZERO; w.len()];
    for ((dr, xr), gxr) in dy
        .chunks_exact(cols.max(1))
        .zip(x.chunks_exact(in_f))
        .zip(gx.chunks_exact_mut(in_f))
    {
        for (j, (&d, wr)) in dr.iter().zip(w.chunks_exact(in_f)).enumerate() {
            for ((gxv, &wv), (gwv, &xv)) in gxr
                .iter_mut()
                .zip(wr)
                .zip(gw[j * in_f..(j + 1) * in_f].iter_mut().zip(xr))
            {
                *gxv += d * wv;
                *gwv += d * xv;
            }
        }
    }
    Ok((gx, gw))
}

/// Forward with `product` making `y`. Args `x [..., in]`, `weight [2 n, in]` -> `out [..., n]`.
pub fn forward_with<T: Real>(args: &[View<T>], product: Product<'_, T>) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (_, in_f, n) = check(xs, ws)?;
    let y = product(x, w, in_f)?;
    Ok(vec![Owned::float(out_shape(xs, n), gate_halves(&y, n))])
}

/// Backward with `product` making `y` again and `grads` the products of the gradients. Args
/// `x, weight, out, grad_out` -> `grad_x, grad_weight`.
pub fn backward_with<T: Real>(
    args: &[View<T>],
    product: Product<'_, T>,
    grads: ProductGrads<'_, T>,
) -> Result<Vec<Owned<T>>> {
    let (xs, x) = float_arg(OP, args, 0, "x")?;
    let (ws, w) = float_arg(OP, args, 1, "weight")?;
    let (ys, _) = float_arg(OP, args, 2, "out")?;
    let (gs, g) = float_arg(OP, args, 3, "grad_out")?;
    let (_, in_f, n) = check(xs, ws)?;
    let want = out_shape(xs, n);
    same_shape(OP, &want, ys)?;
    same_shape(OP, &want, gs)?;
    let y = product(x, w, in_f)?;
    let dy = gate_halves_grad(&y, g, n);
    let (gx, gw) = grads(&dy, w, x, in_f)?;
    Ok(vec![
        Owned::float(xs.to_vec(), gx),
        Owned::float(ws.to_vec(), gw),
    ])
}

/// The reference forward (plain loops).
pub fn forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    forward_with(args, &product_rows)
}

/// The reference backward (plain loops).
pub fn backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    backward_with(args, &product_rows, &product_grads)
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;
    use crate::cpu::{self, View};
    use crate::op::{Direction, Op};

    /// The fused op is `swiglu` of the two halves of one `matmul`: the same values, in f64 too.
    #[test]
    fn is_swiglu_of_the_two_halves_of_one_product() {
        let (rows, in_f, n) = (3usize, 5usize, 4usize);
        let x: Vec<f64> = (0..rows * in_f).map(|i| (i as f64 * 0.37).sin()).collect();
        let w: Vec<f64> = (0..2 * n * in_f).map(|i| (i as f64 * 0.11).cos()).collect();
        let xs = [rows, in_f];
        let ws = [2 * n, in_f];
        let args = [View::float(&xs, &x), View::float(&ws, &w)];
        let out = cpu::run(&Op::MatmulSwiglu, Direction::Forward, &args).unwrap();
        let mm = Op::Matmul {
            trans_a: false,
            trans_b: true,
        };
        let y = cpu::run(&mm, Direction::Forward, &args).unwrap();
        let y = y[0].floats();
        let (mut gate, mut up) = (Vec::new(), Vec::new());
        for r in y.chunks_exact(2 * n) {
            gate.extend_from_slice(&r[..n]);
            up.extend_from_slice(&r[n..]);
        }
        let hs = [rows, n];
        let sw = cpu::run(
            &Op::Swiglu,
            Direction::Forward,
            &[View::float(&hs, &gate), View::float(&hs, &up)],
        )
        .unwrap();
        assert_eq!(out[0].shape, hs);
        assert_eq!(out[0].floats(), sw[0].floats());
    }

    #[test]
    fn refuses_an_odd_weight_and_a_mismatch() {
        let e = check(&[2, 3], &[5, 3]).unwrap_err().to_string();
        assert!(e.contains("matmul_swiglu") && e.contains("even"), "{e}");
        let e = check(&[2, 4], &[6, 3]).unwrap_err().to_string();
        assert!(e.contains("matmul_swiglu"), "{e}");
        assert_eq!(check(&[2, 7, 3], &[6, 3]).unwrap(), (14, 3, 3));
    }
}
