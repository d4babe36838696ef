//! Rotary position embedding over x `[batch, heads, seq, head_dim]`.
//!
//! Position `p = offset + s`; frequency `inv_freq[i] = theta^(-2i / head_dim)` for
//! `i < head_dim / 2`; angle `p * inv_freq[i]`. Pair `i` is `(i, i + half)` in the Hugging Face
//! `rotate_half` layout, or `(2i, 2i + 1)` when interleaved (the original RoFormer / Meta layout).
//! Each pair is rotated by its angle: `(a, b) -> (a cos - b sin, b cos + a sin)`.
//!
//! Angles and their sines and cosines are computed in f64 whatever `T` is: `p * inv_freq` reaches
//! thousands of radians at long positions, where an f32 angle has already lost the low bits that
//! decide the rotation.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use super::args::{Owned, View, float_arg, non_empty, same_shape};
use crate::error::{Error, Result};
use crate::numerics::Real;

const OP: &str = "rope";

/// Validates the attributes and x's shape (every backend's checks); returns `(seq, head_dim)`.
pub fn check(theta: f32, offset: usize, shape: &[usize]) -> Result<(usize, usize)> {
    if !(theta.is_finite() && theta > 0.0) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "theta",
            value: format!("{theta}"),
            why: "must be finite and > 0".into(),
        });
    }
    let &[_, _, seq, head_dim] = shape else {
        return Err(Error::bad_shape(
            OP,
            "x",
            shape,
            "needs rank 4 [batch, heads, seq, head_dim]",
        ));
    };
    non_empty(OP, "x", shape)?;
    if head_dim % 2 != 0 {
        return Err(Error::bad_shape(OP, "x", shape, "head_dim must be even"));
    }
    // Positions must be exact in f64 (they are integers below 2^53).
    let last = offset.checked_add(seq - 1);
    if last.is_none_or(|p| p as u64 > 1u64 << 53) {
        return Err(Error::BadAttr {
            op: OP,
            attr: "offset",
            value: format!("{offset}"),
            why: format!("position offset + seq - 1 (seq = {seq}) exceeds 2^53"),
        });
    }
    Ok((seq, head_dim))
}

/// `(cos, sin)` tables `[seq, head_dim / 2]`, computed in f64 and rounded once to `T`.
fn tables<T: Real>(theta: f32, offset: usize, seq: usize, head_dim: usize) -> (Vec<T>, Vec<T>) {
    let half = head_dim / 2;
    let theta = theta as f64;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| libm::pow(theta, -((2 * i) as f64) / head_dim as f64))
        .collect();
    let mut cos = Vec::with_capacity(seq * half);
    let mut sin = Vec::with_capacity(seq * half);
    for s in 0..seq {
        let p = (offset + s) as f64;
        for &f in &inv_freq {
            let angle = p * f;
            cos.push(T::from_f64(libm::cos(angle)));
            sin.push(T::from_f64(libm::sin(angle)));
        }
    }
    (cos, sin)
}

/// Rotates every pair of `x` `[batch, heads, seq, head_dim]` by `+angle` (`inverse == false`) or
/// `-angle` (`inverse == true`, the transpose of the rotation, which is the backward).
fn rotate<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    inverse: bool,
    shape: &[usize],
    x: &[T],
) -> Result<Vec<T>> {
    let (seq, head_dim) = check(theta, offset, shape)?;
    let half = head_dim / 2;
    let (cos, sin) = tables::<T>(theta, offset, seq, head_dim);
    let mut out = vec![T::ZERO; x.len()];
    // One row is one (batch, head, position) vector of head_dim elements.
    for (row, (xr, or)) in x
        .chunks_exact(head_dim)
        .zip(out.chunks_exact_mut(head_dim))
        .enumerate()
    {
        let s = row % seq;
        for i in 0..half {
            let c = cos[s * half + i];
            let sn = if inverse {
                -sin[s * half + i]
            } else {
                sin[s * half + i]
            };
            let (ia, ib) = if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + half)
            };
            let (a, b) = (xr[ia], xr[ib]);
            or[ia] = a * c - b * sn;
            or[ib] = b * c + a * sn;
        }
    }
    Ok(out)
}

/// Forward. Args: `x [batch, heads, seq, head_dim]`. Returns `out`, same shape.
pub fn forward<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, x) = float_arg(OP, args, 0, "x")?;
    let out = rotate(theta, offset, interleaved, false, shape, x)?;
    Ok(vec![Owned::float(shape.to_vec(), out)])
}

/// Backward. Args: `x`, `out`, `grad_out`. Returns `[grad_x]`: the rotation is orthogonal, so
/// the gradient is `grad_out` rotated back by the same angles.
pub fn backward<T: Real>(
    theta: f32,
    offset: usize,
    interleaved: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    let (shape, _) = float_arg(OP, args, 0, "x")?;
    let (out_shape, _) = float_arg(OP, args, 1, "out")?;
    let (g_shape, g) = float_arg(OP, args, 2, "grad_out")?;
    check(theta, offset, shape)?;
    same_shape(OP, shape, out_shape)?;
    same_shape(OP, shape, g_shape)?;
    let grad = rotate(theta, offset, interleaved, true, shape, g)?;
    Ok(vec![Owned::float(shape.to_vec(), grad)])
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::cpu::run;
    use crate::cpu::testutil::{assert_close, grad_check, rand_vec, run_as};
    use crate::op::{Direction, Op, ROPE_THETA};
    use crate::rng::Rng;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn rope(theta: f32, offset: usize, interleaved: bool) -> Op {
        Op::Rope {
            theta,
            offset,
            interleaved,
        }
    }

    #[test]
    fn position_zero_is_identity() {
        let mut rng = Rng::new(1);
        let x = rand_vec(&mut rng, 2 * 3 * 8);
        for inter in [false, true] {
            let out = run_as::<f64>(
                &rope(ROPE_THETA, 0, inter),
                &[(vec![2, 3, 1, 8], x.clone())],
            );
            assert_eq!(out[0].floats(), x.as_slice());
        }
    }

    #[test]
    fn hand_checked_rotation() {
        // head_dim 4, theta 100: inv_freq = [1, 100^(-1/2)] = [1, 0.1]. Position 1 (offset 1).
        // rotate_half pairs (0, 2) and (1, 3); x = [1, 2, 3, 4].
        let x = vec![1.0, 2.0, 3.0, 4.0];
        let (c0, s0) = (1.0f64.cos(), 1.0f64.sin());
        let (c1, s1) = (0.1f64.cos(), 0.1f64.sin());
        let want = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            3.0 * c0 + 1.0 * s0,
            4.0 * c1 + 2.0 * s1,
        ];
        let out = run_as::<f64>(&rope(100.0, 1, false), &[(vec![1, 1, 1, 4], x.clone())]);
        assert_close(out[0].floats(), &want, 1e-15, 1e-14);
        // Interleaved pairs (0, 1) and (2, 3).
        let want = [
            1.0 * c0 - 2.0 * s0,
            2.0 * c0 + 1.0 * s0,
            3.0 * c1 - 4.0 * s1,
            4.0 * c1 + 3.0 * s1,
        ];
        let out = run_as::<f64>(&rope(100.0, 1, true), &[(vec![1, 1, 1, 4], x)]);
        assert_close(out[0].floats(), &want, 1e-15, 1e-14);
    }

    #[test]
    fn positions_follow_seq_and_offset() {
        // Same vector at every position: row s must equal the single-row result at offset + s,
        // for every batch and head.
        let mut rng = Rng::new(2);
        let v = rand_vec(&mut rng, 6);
        let (b, h, s, d) = (3, 2, 7, 6);
        let x: Vec<f64> = (0..b * h * s).flat_map(|_| v.clone()).collect();
        for inter in [false, true] {
            let out = run_as::<f64>(&rope(500.0, 5, inter), &[(vec![b, h, s, d], x.clone())]);
            for row in 0..b * h * s {
                let one = run_as::<f64>(
                    &rope(500.0, 5 + row % s, inter),
                    &[(vec![1, 1, 1, d], v.clone())],
                );
                assert_eq!(&out[0].floats()[row * d..(row + 1) * d], one[0].floats());
            }
        }
    }

    #[test]
    fn interleaved_is_a_permutation_of_rotate_half() {
        // Moving element 2i to i and 2i+1 to i+half turns interleaved into rotate_half.
        let mut rng = Rng::new(3);
        let d = 10;
        let x = rand_vec(&mut rng, 2 * 13 * d);
        let perm = |v: &[f64]| -> Vec<f64> {
            v.chunks(d)
                .flat_map(|r| {
                    (0..d / 2)
                        .map(|i| r[2 * i])
                        .chain((0..d / 2).map(|i| r[2 * i + 1]))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let inter = run_as::<f64>(
            &rope(ROPE_THETA, 3, true),
            &[(vec![1, 2, 13, d], x.clone())],
        );
        let half = run_as::<f64>(
            &rope(ROPE_THETA, 3, false),
            &[(vec![1, 2, 13, d], perm(&x))],
        );
        assert_eq!(perm(inter[0].floats()), half[0].floats());
    }

    #[test]
    fn preserves_norm_and_backward_inverts() {
        let mut rng = Rng::new(4);
        let shape = vec![2, 3, 7, 8];
        let x = rand_vec(&mut rng, 2 * 3 * 7 * 8);
        for inter in [false, true] {
            let op = rope(ROPE_THETA, 11, inter);
            let out = run_as::<f64>(&op, &[(shape.clone(), x.clone())]);
            for (xr, or) in x.chunks(8).zip(out[0].floats().chunks(8)) {
                let nx: f64 = xr.iter().map(|v| v * v).sum();
                let no: f64 = or.iter().map(|v| v * v).sum();
                assert!((nx - no).abs() < 1e-12);
            }
            // Feeding the output as grad_out must give back x.
            let back = run(
                &op,
                Direction::Backward,
                &[
                    View::float(&shape, &x),
                    out[0].view(),
                    View::float(&shape, out[0].floats()),
                ],
            )
            .unwrap();
            assert_close(back[0].floats(), &x, 1e-12, 1e-12);
        }
    }

    #[test]
    fn large_positions_are_accurate_in_f32() {
        // At position 100000 the angle is 1e5 rad; computing it in f32 would be off by ~4e-3 rad.
        let x = vec![1.0, 0.0];
        let out = run_as::<f32>(&rope(ROPE_THETA, 100_000, false), &[(vec![1, 1, 1, 2], x)]);
        let want = [libm::cos(1e5), libm::sin(1e5)];
        assert_close(out[0].floats(), &want, 1e-7, 0.0);
    }

    #[test]
    fn backward_matches_finite_differences() {
        let mut rng = Rng::new(5);
        for (i, shape) in [vec![1, 1, 1, 2], vec![2, 3, 7, 4], vec![1, 2, 5, 6]]
            .iter()
            .enumerate()
        {
            for inter in [false, true] {
                let x = rand_vec(&mut rng, shape.iter().product());
                grad_check(
                    &rope(ROPE_THETA, 3, inter),
                    &[(shape.clone(), x)],
                    i as u64 * 2 + inter as u64,
                );
            }
        }
    }

    #[test]
    fn f32_agrees_with_f64() {
        let mut rng = Rng::new(6);
        let x = rand_vec(&mut rng, 3 * 2 * 13 * 16);
        for inter in [false, true] {
            let op = rope(ROPE_THETA, 2047, inter);
            let lo = run_as::<f32>(&op, &[(vec![3, 2, 13, 16], x.clone())]);
            let hi = run_as::<f64>(&op, &[(vec![3, 2, 13, 16], x.clone())]);
            assert_close(lo[0].floats(), hi[0].floats(), 1e-6, 1e-5);
        }
    }

    #[test]
    fn errors() {
        let x = [0.0f32; 24];
        let fwd = |op: Op, shape: &[usize], data: &[f32]| {
            run(&op, Direction::Forward, &[View::float(shape, data)]).unwrap_err()
        };
        let e = fwd(rope(ROPE_THETA, 0, false), &[2, 3, 4], &x);
        assert!(matches!(e, Error::BadShape { op: "rope", .. }), "{e:?}");
        let e = fwd(rope(ROPE_THETA, 0, false), &[1, 2, 4, 3], &x);
        assert!(
            matches!(&e, Error::BadShape { why, .. } if why.contains("even")),
            "{e:?}"
        );
        let e = fwd(rope(ROPE_THETA, 0, false), &[1, 0, 4, 2], &[]);
        assert!(matches!(e, Error::Empty { op: "rope", .. }), "{e:?}");
        let e = fwd(rope(0.0, 0, false), &[1, 1, 4, 6], &x);
        assert!(matches!(e, Error::BadAttr { attr: "theta", .. }), "{e:?}");
        let e = fwd(rope(f32::NAN, 0, false), &[1, 1, 4, 6], &x);
        assert!(matches!(e, Error::BadAttr { attr: "theta", .. }), "{e:?}");
        let e = fwd(rope(ROPE_THETA, usize::MAX, false), &[1, 1, 4, 6], &x);
        assert!(matches!(e, Error::BadAttr { attr: "offset", .. }), "{e:?}");
        let e = run(
            &rope(ROPE_THETA, 0, false),
            Direction::Backward,
            &[
                View::float(&[1, 1, 4, 6], &x),
                View::float(&[1, 1, 4, 6], &x),
                View::float(&[1, 1, 6, 4], &x),
            ],
        )
        .unwrap_err();
        assert_eq!(e, Error::mismatch("rope", &[1, 1, 4, 6], &[1, 1, 6, 4]));
    }
}
