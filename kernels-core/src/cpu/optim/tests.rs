// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::run;
use crate::op::{ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, Direction, Op};
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn views<'a>(shape: &'a [usize], xs: &'a [Vec<f64>]) -> Vec<View<'a, f64>> {
    xs.iter().map(|x| View::float(shape, x)).collect()
}

fn close(got: &[f64], want: &[f64], tol: f64) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g - w).abs() <= tol * (1.0 + w.abs()))
}

#[test]
fn adamw_first_step_by_hand() {
    // Step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2, so the update is
    // lr * g / (|g| + eps) ~ lr * sign(g). lr = 0.1, wd = 0.5: param *= 0.95 first.
    // param 2, grad 4:   2 * 0.95 - 0.1 * 4 / (4 + 1e-8)  = 1.9 - 0.1 = 1.8 (to 1e-9).
    // param -1, grad -2: -0.95 + 0.1                                    = -0.85.
    // grad 0: m = v = 0 and the update is 0/(0 + eps) = 0: param 3 -> 2.85.
    let shape = [3];
    let xs = [
        vec![2.0, -1.0, 3.0],
        vec![4.0, -2.0, 0.0],
        vec![0.0; 3],
        vec![0.0; 3],
    ];
    let out = adamw_step(0.1, 0.9, 0.999, 1e-8, 0.5, 1, &views(&shape, &xs)).unwrap();
    assert!(
        close(out[0].floats(), &[1.8, -0.85, 2.85], 1e-8),
        "{:?}",
        out[0]
    );
    assert!(
        close(out[1].floats(), &[0.4, -0.2, 0.0], 1e-7),
        "{:?}",
        out[1]
    );
    assert!(
        close(out[2].floats(), &[0.016, 0.004, 0.0], 1e-6),
        "{:?}",
        out[2]
    );
}

#[test]
fn adamw_later_step_by_hand() {
    // beta1 = beta2 = 0.5, step 2, lr 1, wd 0, eps 0: m = 0.5*2 + 0.5*4 = 3,
    // v = 0.5*8 + 0.5*16 = 12, bias1 = bias2 = 0.75, m_hat = 4, v_hat = 16, update = 1.
    let shape = [1];
    let xs = [vec![10.0], vec![4.0], vec![2.0], vec![8.0]];
    let out = adamw_step(1.0, 0.5, 0.5, 0.0, 0.0, 2, &views(&shape, &xs)).unwrap();
    assert_eq!(out[0].floats(), &[9.0]);
    assert_eq!(out[1].floats(), &[3.0]);
    assert_eq!(out[2].floats(), &[12.0]);
}

/// A straightforward f64 AdamW written from the formula (m_hat, v_hat form).
fn adamw_ref(p: &mut [f64], m: &mut [f64], v: &mut [f64], g: &[f64], step: u64) {
    let (lr, b1, b2, eps, wd) = (
        3e-2f32 as f64,
        0.8f32 as f64,
        0.99f32 as f64,
        1e-6f32 as f64,
        0.1f32 as f64,
    );
    for i in 0..p.len() {
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        let m_hat = m[i] / (1.0 - b1.powi(step as i32));
        let v_hat = v[i] / (1.0 - b2.powi(step as i32));
        p[i] -= lr * m_hat / (v_hat.sqrt() + eps);
    }
}

#[test]
fn adamw_trajectory_matches_f64_formula() {
    // Minimize sum (p - target)^2 for 30 steps, in f32 through the dispatcher, against the
    // formula in f64.
    let target = [1.0f64, -2.0, 0.5, 3.0, 0.0, -0.25, 7.0];
    let n = target.len();
    let (mut p, mut m, mut v) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
    let (mut p32, mut m32, mut v32) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
    for step in 1..=30u64 {
        let g: Vec<f64> = p.iter().zip(&target).map(|(x, t)| 2.0 * (x - t)).collect();
        adamw_ref(&mut p, &mut m, &mut v, &g, step);
        let g32: Vec<f32> = p32
            .iter()
            .zip(&target)
            .map(|(&x, &t)| 2.0 * (x - t as f32))
            .collect();
        let op = Op::AdamwStep {
            lr: 3e-2,
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.1,
            step,
        };
        let shape = [n];
        let args = [
            View::float(&shape, &p32),
            View::float(&shape, &g32),
            View::float(&shape, &m32),
            View::float(&shape, &v32),
        ];
        let out = run::<f32>(&op, Direction::Forward, &args).unwrap();
        p32 = out[0].floats().to_vec();
        m32 = out[1].floats().to_vec();
        v32 = out[2].floats().to_vec();
    }
    let p32: Vec<f64> = p32.iter().map(|&x| x as f64).collect();
    assert!(close(&p32, &p, 1e-5), "{p32:?} vs {p:?}");
    // And it moved: 30 steps of ~lr each.
    assert!((p[0] - 0.0).abs() > 0.5, "{p:?}");
}

#[test]
fn sgd_by_hand() {
    // lr 0.1, momentum 0.9, wd 0.5, buf 1: g = 2 + 0.5 * 4 = 4, buf = 0.9 + 4 = 4.9.
    // plain:    param = 4 - 0.1 * 4.9           = 3.51
    // nesterov: param = 4 - 0.1 * (4 + 0.9*4.9) = 4 - 0.841 = 3.159
    let shape = [1];
    let xs = [vec![4.0], vec![2.0], vec![1.0]];
    let out = sgd_step(0.1, 0.9, 0.5, false, &views(&shape, &xs)).unwrap();
    assert!(close(out[0].floats(), &[3.51], 1e-7), "{:?}", out[0]);
    assert!(close(out[1].floats(), &[4.9], 1e-7), "{:?}", out[1]);
    let out = sgd_step(0.1, 0.9, 0.5, true, &views(&shape, &xs)).unwrap();
    assert!(close(out[0].floats(), &[3.159], 1e-7), "{:?}", out[0]);
    assert!(close(out[1].floats(), &[4.9], 1e-7), "{:?}", out[1]);
    // No momentum: plain gradient step (lr 0.25 is exact in f32), buffer passes through.
    let out = sgd_step(0.25, 0.0, 0.0, false, &views(&shape, &xs)).unwrap();
    assert_eq!(out[0].floats(), &[3.5]);
    assert_eq!(out[1].floats(), &[1.0]);
    // Zero buffer on the first step: buf = g, exactly torch's `clone(grad)`.
    let xs = [vec![1.0, -3.0], vec![0.25, 0.5], vec![0.0, 0.0]];
    let out = sgd_step(1.0, 0.9, 0.0, false, &views(&[2], &xs)).unwrap();
    assert_eq!(out[1].floats(), &[0.25, 0.5]);
    assert_eq!(out[0].floats(), &[0.75, -3.5]);
}

#[test]
fn sgd_trajectory_matches_f64_formula() {
    // Quadratic bowl with per-coordinate curvature, 25 steps, both nesterov settings.
    let curv = [1.0f64, 0.5, 2.0, 0.1, 3.0];
    let n = curv.len();
    for nesterov in [false, true] {
        let (lr, mu, wd) = (0.05f32, 0.9f32, 0.01f32);
        let (lr64, mu64, wd64) = (lr as f64, mu as f64, wd as f64);
        let mut p = vec![1.0f64, -1.0, 2.0, 5.0, -0.5];
        let mut b = vec![0.0f64; n];
        let mut p32: Vec<f32> = p.iter().map(|&x| x as f32).collect();
        let mut b32 = vec![0.0f32; n];
        for _ in 0..25 {
            for i in 0..n {
                let mut g = curv[i] * p[i] + wd64 * p[i];
                b[i] = mu64 * b[i] + g;
                g = if nesterov { g + mu64 * b[i] } else { b[i] };
                p[i] -= lr64 * g;
            }
            let g32: Vec<f32> = p32.iter().zip(&curv).map(|(&x, &c)| c as f32 * x).collect();
            let shape = [n];
            let op = Op::SgdStep {
                lr,
                momentum: mu,
                weight_decay: wd,
                nesterov,
            };
            let args = [
                View::float(&shape, &p32),
                View::float(&shape, &g32),
                View::float(&shape, &b32),
            ];
            let out = run::<f32>(&op, Direction::Forward, &args).unwrap();
            p32 = out[0].floats().to_vec();
            b32 = out[1].floats().to_vec();
        }
        let p32: Vec<f64> = p32.iter().map(|&x| x as f64).collect();
        assert!(
            close(&p32, &p, 1e-5),
            "nesterov {nesterov}: {p32:?} vs {p:?}"
        );
    }
}

#[test]
fn shapes_must_match_and_step_counts_from_one() {
    let a = vec![1.0f64; 6];
    let s23 = [2, 3];
    let s32 = [3, 2];
    let ok = View::float(&s23, &a);
    let bad = View::float(&s32, &a);
    for args in [[ok, bad, ok, ok], [ok, ok, bad, ok], [ok, ok, ok, bad]] {
        let e = adamw_step(0.1, ADAMW_BETA1, ADAMW_BETA2, ADAMW_EPS, 0.0, 1, &args).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ShapeMismatch {
                    op: "adamw_step",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    for args in [[ok, bad, ok], [ok, ok, bad], [bad, ok, ok]] {
        let e = sgd_step(0.1, 0.9, 0.0, false, &args).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { op: "sgd_step", .. }),
            "{e:?}"
        );
    }
    let e = adamw_step(
        0.1,
        ADAMW_BETA1,
        ADAMW_BETA2,
        ADAMW_EPS,
        0.0,
        0,
        &[ok, ok, ok, ok],
    )
    .unwrap_err();
    assert!(matches!(e, Error::BadAttr { attr: "step", .. }), "{e:?}");
    let e = sgd_step(0.1, 0.9, 0.0, false, &[ok, ok]).unwrap_err();
    assert!(matches!(e, Error::Arity { .. }), "{e:?}");
}

#[test]
fn empty_parameters_are_a_no_op() {
    let shape = [0, 4];
    let e: Vec<f64> = Vec::new();
    let v = View::float(&shape, &e);
    let out = adamw_step(
        0.1,
        ADAMW_BETA1,
        ADAMW_BETA2,
        ADAMW_EPS,
        0.0,
        1,
        &[v, v, v, v],
    )
    .unwrap();
    assert!(
        out.iter()
            .all(|o| o.shape == [0, 4] && o.floats().is_empty())
    );
    let out = sgd_step(0.1, 0.9, 0.0, true, &[v, v, v]).unwrap();
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|o| o.shape == [0, 4]));
}

#[test]
fn nan_gradients_propagate() {
    let shape = [2];
    let xs = [
        vec![1.0, 1.0],
        vec![f64::NAN, 1.0],
        vec![0.0; 2],
        vec![0.0; 2],
    ];
    let out = adamw_step(
        0.1,
        ADAMW_BETA1,
        ADAMW_BETA2,
        ADAMW_EPS,
        0.0,
        1,
        &views(&shape, &xs),
    )
    .unwrap();
    assert!(out[0].floats()[0].is_nan() && out[0].floats()[1].is_finite());
}
