// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::matmul::matmul_slices;
use crate::cpu::run;
use crate::cpu::testutil::{assert_close, grad_check, rand_vec, run_as};
use crate::op::{Direction, Op};
use crate::rng::Rng;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn attn(causal: bool, scale: Option<f32>) -> Op {
    Op::Attention {
        causal,
        scale,
        kv_len: 0,
        window: 0,
    }
}

type Arg = (Vec<usize>, Vec<f64>);

/// Random q, k, v for `(b, hq, hkv, s, t, d, dv)`.
fn qkv(rng: &mut Rng, dims: (usize, usize, usize, usize, usize, usize, usize)) -> [Arg; 3] {
    let (b, hq, hkv, s, t, d, dv) = dims;
    [
        (vec![b, hq, s, d], rand_vec(rng, b * hq * s * d)),
        (vec![b, hkv, t, d], rand_vec(rng, b * hkv * t * d)),
        (vec![b, hkv, t, dv], rand_vec(rng, b * hkv * t * dv)),
    ]
}

/// Attention as matmul -> masked softmax -> matmul, per (batch, head), with the mask written
/// as a PyTorch-style bottom-right `tril(diagonal = t - s)` and GQA as a repeat of kv heads.
fn composed(causal: bool, scale: Option<f64>, args: &[Arg; 3]) -> Vec<f64> {
    let [b, hq, s, d] = args[0].0[..] else {
        unreachable!()
    };
    let [_, hkv, t, _] = args[1].0[..] else {
        unreachable!()
    };
    let dv = args[2].0[3];
    let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
    let mut out = Vec::new();
    for bi in 0..b {
        for h in 0..hq {
            let kvh = bi * hkv + h * hkv / hq;
            let q = &args[0].1[(bi * hq + h) * s * d..][..s * d];
            let k = &args[1].1[kvh * t * d..][..t * d];
            let v = &args[2].1[kvh * t * dv..][..t * dv];
            let mut scores = matmul_slices(q, k, s, d, t, false, true).unwrap();
            for i in 0..s {
                let row = &mut scores[i * t..(i + 1) * t];
                for (j, x) in row.iter_mut().enumerate() {
                    let masked = causal && (j as i64) > i as i64 + t as i64 - s as i64;
                    *x = if masked {
                        f64::NEG_INFINITY
                    } else {
                        *x * scale
                    };
                }
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    row.iter_mut().for_each(|x| *x = 0.0);
                    continue;
                }
                let z: f64 = row.iter().map(|x| (x - m).exp()).sum();
                row.iter_mut().for_each(|x| *x = (*x - m).exp() / z);
            }
            out.extend(matmul_slices(&scores, v, s, t, dv, false, false).unwrap());
        }
    }
    out
}

#[test]
fn one_key_returns_v() {
    // A single key gets probability 1 whatever the scores: out = v for every query and head.
    let mut rng = Rng::new(1);
    let args = qkv(&mut rng, (2, 4, 2, 3, 1, 5, 3));
    let out = run_as::<f64>(&attn(false, None), &args);
    assert_eq!(out[0].shape, vec![2, 4, 3, 3]);
    for bi in 0..2 {
        for h in 0..4 {
            let kvh = bi * 2 + h / 2;
            for i in 0..3 {
                let row = ((bi * 4 + h) * 3 + i) * 3;
                assert_close(
                    &out[0].floats()[row..row + 3],
                    &args[2].1[kvh * 3..kvh * 3 + 3],
                    1e-15,
                    1e-15,
                );
            }
        }
    }
}

#[test]
fn hand_checked_two_keys() {
    // q = [1, 0], k = [[1, 0], [0, 0]], scale 1: scores [1, 0], P = [e/(e+1), 1/(e+1)].
    let e = 1.0f64.exp();
    let args = [
        (vec![1, 1, 1, 2], vec![1.0, 0.0]),
        (vec![1, 1, 2, 2], vec![1.0, 0.0, 0.0, 0.0]),
        (vec![1, 1, 2, 1], vec![10.0, 20.0]),
    ];
    let out = run_as::<f64>(&attn(false, Some(1.0)), &args);
    let want = (10.0 * e + 20.0) / (e + 1.0);
    assert_close(out[0].floats(), &[want], 1e-14, 1e-14);
    // Causal with s = t = 2: row 0 sees only key 0.
    let args2 = [
        (vec![1, 1, 2, 2], vec![1.0, 0.0, 1.0, 0.0]),
        args[1].clone(),
        args[2].clone(),
    ];
    let out = run_as::<f64>(&attn(true, Some(1.0)), &args2);
    assert_close(out[0].floats(), &[10.0, want], 1e-14, 1e-14);
}

#[test]
fn matches_matmul_softmax_matmul() {
    let mut rng = Rng::new(2);
    let shapes = [
        // (b, hq, hkv, s, t, d, dv)
        (1, 1, 1, 1, 1, 1, 1),
        (2, 4, 2, 7, 7, 8, 8),   // GQA, square
        (3, 2, 2, 5, 13, 4, 3),  // MHA, s < t, dv != d
        (1, 6, 1, 1, 13, 7, 5),  // MQA decode step
        (2, 4, 4, 13, 7, 3, 2),  // s > t: early causal rows see nothing
        (1, 3, 3, 2, 2, 16, 16), // MHA
    ];
    for &(b, hq, hkv, s, t, d, dv) in &shapes {
        let args = qkv(&mut rng, (b, hq, hkv, s, t, d, dv));
        for causal in [false, true] {
            for scale in [None, Some(0.3f32)] {
                let out = run_as::<f64>(&attn(causal, scale), &args);
                assert_eq!(out[0].shape, vec![b, hq, s, dv]);
                let want = composed(causal, scale.map(|x| x as f64), &args);
                assert_close(out[0].floats(), &want, 1e-13, 1e-12);
            }
        }
    }
}

#[test]
fn decode_step_sees_all_keys() {
    // s = 1 with a cache of t keys: causal equals non-causal.
    let mut rng = Rng::new(3);
    let args = qkv(&mut rng, (2, 4, 2, 1, 13, 8, 8));
    let c = run_as::<f64>(&attn(true, None), &args);
    let n = run_as::<f64>(&attn(false, None), &args);
    assert_eq!(c[0].floats(), n[0].floats());
    // And a causal prefill's last row equals that decode step when q matches.
    let q_full = (vec![2, 4, 3, 8], rand_vec(&mut rng, 2 * 4 * 3 * 8));
    let prefill = run_as::<f64>(
        &attn(true, None),
        &[q_full.clone(), args[1].clone(), args[2].clone()],
    );
    let q_last: Vec<f64> = q_full
        .1
        .chunks(8)
        .enumerate()
        .filter(|(r, _)| r % 3 == 2)
        .flat_map(|(_, x)| x.to_vec())
        .collect();
    let step = run_as::<f64>(
        &attn(true, None),
        &[(vec![2, 4, 1, 8], q_last), args[1].clone(), args[2].clone()],
    );
    let last_rows: Vec<f64> = prefill[0]
        .floats()
        .chunks(8)
        .enumerate()
        .filter(|(r, _)| r % 3 == 2)
        .flat_map(|(_, x)| x.to_vec())
        .collect();
    assert_eq!(last_rows, step[0].floats());
}

#[test]
fn fully_masked_rows_are_zero() {
    // s = 5 > t = 2: rows 0..3 see no key.
    let mut rng = Rng::new(4);
    let args = qkv(&mut rng, (1, 1, 1, 5, 2, 3, 3));
    let out = run_as::<f64>(&attn(true, None), &args);
    assert!(out[0].floats()[..9].iter().all(|&x| x == 0.0));
    assert!(out[0].floats()[9..].iter().all(|&x| x != 0.0));
}

#[test]
fn gqa_equals_mha_with_repeated_kv() {
    let mut rng = Rng::new(5);
    let args = qkv(&mut rng, (2, 4, 2, 3, 5, 4, 4));
    let repeat = |a: &Arg| -> Arg {
        let [b, h, t, d] = a.0[..] else {
            unreachable!()
        };
        let mut v = Vec::new();
        for bi in 0..b {
            for hh in 0..2 * h {
                let src = bi * h + hh / 2;
                v.extend_from_slice(&a.1[src * t * d..(src + 1) * t * d]);
            }
        }
        (vec![b, 2 * h, t, d], v)
    };
    let gqa = run_as::<f64>(&attn(true, None), &args);
    let mha = run_as::<f64>(
        &attn(true, None),
        &[args[0].clone(), repeat(&args[1]), repeat(&args[2])],
    );
    assert_eq!(gqa[0].floats(), mha[0].floats());
}

#[test]
fn backward_matches_finite_differences() {
    let mut rng = Rng::new(6);
    let shapes = [
        (1, 1, 1, 1, 1, 1, 1),
        (2, 4, 2, 3, 3, 4, 4), // GQA
        (1, 2, 2, 2, 5, 3, 2), // MHA, s < t
        (1, 2, 1, 1, 4, 3, 3), // MQA decode
        (1, 2, 2, 4, 2, 2, 3), // s > t: masked rows
    ];
    for (i, &(b, hq, hkv, s, t, d, dv)) in shapes.iter().enumerate() {
        let args = qkv(&mut rng, (b, hq, hkv, s, t, d, dv));
        for causal in [false, true] {
            grad_check(&attn(causal, None), &args, i as u64);
            grad_check(&attn(causal, Some(1.7)), &args, 50 + i as u64);
        }
    }
}

#[test]
fn large_scores_are_stable() {
    // Scores of +-1000 would overflow a naive exp.
    let args = [
        (vec![1, 1, 1, 1], vec![100.0]),
        (vec![1, 1, 3, 1], vec![10.0, -10.0, 9.0]),
        (vec![1, 1, 3, 1], vec![1.0, 2.0, 3.0]),
    ];
    let out = run_as::<f32>(&attn(false, Some(1.0)), &args);
    let e = (-100.0f64).exp();
    let want = (1.0 + 3.0 * e) / (1.0 + e);
    assert_close(out[0].floats(), &[want], 1e-6, 1e-6);
}

#[test]
fn f32_agrees_with_f64() {
    let mut rng = Rng::new(7);
    let args = qkv(&mut rng, (3, 4, 2, 7, 13, 16, 8));
    for causal in [false, true] {
        let lo = run_as::<f32>(&attn(causal, None), &args);
        let hi = run_as::<f64>(&attn(causal, None), &args);
        assert_close(lo[0].floats(), hi[0].floats(), 1e-6, 1e-5);
    }
}

#[test]
fn errors() {
    let x = [0.0f32; 64];
    let fwd = |q: &[usize], k: &[usize], v: &[usize], scale: Option<f32>| {
        let n = |s: &[usize]| s.iter().product::<usize>();
        run(
            &attn(true, scale),
            Direction::Forward,
            &[
                View::float(q, &x[..n(q)]),
                View::float(k, &x[..n(k)]),
                View::float(v, &x[..n(v)]),
            ],
        )
        .unwrap_err()
    };
    let e = fwd(&[1, 2, 3], &[1, 1, 3, 4], &[1, 1, 3, 4], None);
    assert!(
        matches!(&e, Error::BadShape { tensor, .. } if tensor == "q"),
        "{e:?}"
    );
    // head_dim mismatch q vs k.
    let e = fwd(&[1, 2, 3, 4], &[1, 1, 3, 5], &[1, 1, 3, 4], None);
    assert_eq!(
        e,
        Error::mismatch("attention", &[1, 2, 3, 4], &[1, 1, 3, 5])
    );
    // batch mismatch.
    let e = fwd(&[2, 2, 3, 4], &[1, 1, 3, 4], &[1, 1, 3, 4], None);
    assert_eq!(
        e,
        Error::mismatch("attention", &[2, 2, 3, 4], &[1, 1, 3, 4])
    );
    // k and v disagree on length.
    let e = fwd(&[1, 2, 3, 4], &[1, 1, 3, 4], &[1, 1, 2, 4], None);
    assert_eq!(
        e,
        Error::mismatch("attention", &[1, 1, 3, 4], &[1, 1, 2, 4])
    );
    // hq not a multiple of hkv.
    let e = fwd(&[1, 3, 2, 4], &[1, 2, 3, 4], &[1, 2, 3, 4], None);
    assert!(
        matches!(&e, Error::BadShape { why, .. } if why.contains("multiple")),
        "{e:?}"
    );
    // Empty.
    let e = fwd(&[1, 2, 0, 4], &[1, 1, 3, 4], &[1, 1, 3, 4], None);
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    // Non-finite scale.
    let e = fwd(
        &[1, 2, 3, 4],
        &[1, 1, 3, 4],
        &[1, 1, 3, 4],
        Some(f32::INFINITY),
    );
    assert!(matches!(e, Error::BadAttr { attr: "scale", .. }), "{e:?}");
    // Backward grad_out of the wrong shape.
    let e = run(
        &attn(false, None),
        Direction::Backward,
        &[
            View::float(&[1, 1, 2, 4], &x[..8]),
            View::float(&[1, 1, 3, 4], &x[..12]),
            View::float(&[1, 1, 3, 2], &x[..6]),
            View::float(&[1, 1, 2, 2], &x[..4]),
            View::float(&[1, 1, 2, 4], &x[..8]),
        ],
    )
    .unwrap_err();
    assert_eq!(
        e,
        Error::mismatch("attention", &[1, 1, 2, 2], &[1, 1, 2, 4])
    );
}

/// `kv_len` reads a prefix of a longer cache: the same output and q gradient as k and v cut to
/// that prefix, and zero gradient for the keys past it.
#[test]
fn kv_len_reads_a_prefix() {
    let mut rng = Rng::new(7);
    for (causal, (b, hq, hkv, s, t, d, dv), len) in [
        (true, (2, 4, 2, 3, 11, 5, 4), 6),
        (false, (1, 3, 1, 1, 9, 4, 4), 1),
        (true, (1, 2, 2, 1, 5, 3, 3), 5),
    ] {
        let full = qkv(&mut rng, (b, hq, hkv, s, t, d, dv));
        let prefix = |(shape, data): &Arg, w: usize| -> Arg {
            let heads = shape[0] * shape[1];
            let cut: Vec<f64> = (0..heads)
                .flat_map(|h| data[h * t * w..][..len * w].to_vec())
                .collect();
            (vec![shape[0], shape[1], len, w], cut)
        };
        let cut = [full[0].clone(), prefix(&full[1], d), prefix(&full[2], dv)];
        let op = Op::Attention {
            causal,
            scale: None,
            kv_len: len,
            window: 0,
        };
        let got = run_as::<f64>(&op, &full);
        let want = run_as::<f64>(&attn(causal, None), &cut);
        assert_eq!(got[0].floats(), want[0].floats());
        grad_check(&op, &full, 3);
    }
    let args = qkv(&mut rng, (1, 1, 1, 1, 3, 2, 2));
    let views: Vec<View<f64>> = args.iter().map(|(s, v)| View::float(s, v)).collect();
    let e = forward(true, None, 4, 0, &views).unwrap_err();
    assert!(matches!(e, Error::BadAttr { attr: "kv_len", .. }), "{e:?}");
}

#[test]
fn sliding_window_is_a_band_of_the_causal_mask() {
    // Window w: query i (of s = t) sees keys i - w + 1..=i. Checked against attention over
    // exactly those keys, row by row, in f64; and the window needs causal.
    let mut rng = Rng::new(21);
    let (s, d, w) = (9usize, 4usize, 3usize);
    let q = rand_vec(&mut rng, s * d);
    let k = rand_vec(&mut rng, s * d);
    let v = rand_vec(&mut rng, s * d);
    let op = Op::Attention {
        causal: true,
        scale: None,
        kv_len: 0,
        window: w,
    };
    let shape = vec![1, 1, s, d];
    let got = run_as::<f64>(
        &op,
        &[
            (shape.clone(), q.clone()),
            (shape.clone(), k.clone()),
            (shape.clone(), v.clone()),
        ],
    );
    for i in 0..s {
        let lo = (i + 1).saturating_sub(w);
        let n = i + 1 - lo;
        let one = run_as::<f64>(
            &attn(false, None),
            &[
                (vec![1, 1, 1, d], q[i * d..(i + 1) * d].to_vec()),
                (vec![1, 1, n, d], k[lo * d..(i + 1) * d].to_vec()),
                (vec![1, 1, n, d], v[lo * d..(i + 1) * d].to_vec()),
            ],
        );
        assert_close(
            &got[0].floats()[i * d..(i + 1) * d],
            one[0].floats(),
            1e-12,
            1e-12,
        );
    }
    let non_causal = Op::Attention {
        causal: false,
        scale: None,
        kv_len: 0,
        window: w,
    };
    let views = [
        crate::cpu::View::float(&shape, &q),
        crate::cpu::View::float(&shape, &k),
        crate::cpu::View::float(&shape, &v),
    ];
    let err = crate::cpu::run(&non_causal, Direction::Forward, &views);
    assert!(
        matches!(
            err,
            Err(crate::error::Error::BadAttr { attr: "window", .. })
        ),
        "{err:?}"
    );
}
