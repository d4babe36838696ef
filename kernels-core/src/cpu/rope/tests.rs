// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::run;
use crate::cpu::testutil::{assert_close, grad_check, rand_vec, run_as};
use crate::op::{Direction, Op, ROPE_THETA, RopeScaling};
use crate::rng::Rng;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn rope(theta: f32, offset: usize, interleaved: bool) -> Op {
    Op::rope(theta, offset, interleaved)
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

#[test]
fn scaled_frequencies_match_transformers() {
    // transformers 5.23 ROPE_INIT_FUNCTIONS[rope_type] for head_dim 32, rope_theta 1e4 (f32
    // tensors): llama3 (factor 8, low 1, high 4, original context 16), yarn (factor 4,
    // beta_fast 32, beta_slow 1, original context 16), linear (factor 4).
    let llama3 = [
        0.5760563611984253,
        0.14114609360694885,
        0.03952847048640251,
        0.02222849242389202,
        0.012500000186264515,
        0.007029266096651554,
        0.0039528473280370235,
        0.002222849288955331,
        0.0012499999720603228,
        0.0007029266562312841,
        0.00039528473280370235,
        0.00022228492889553308,
        0.0001250000059371814,
        7.029266271274537e-05,
        3.9528473280370235e-05,
        2.2228492525755428e-05,
    ];
    let yarn = [
        1.0,
        0.35146331787109375,
        0.07905694097280502,
        0.04445698484778404,
        0.02500000037252903,
        0.014058532193303108,
        0.007905694656074047,
        0.004445698577910662,
        0.0024999999441206455,
        0.0014058533124625683,
        0.0007905694656074047,
        0.00044456985779106617,
        0.0002500000118743628,
        0.00014058532542549074,
        7.905694656074047e-05,
        4.4456985051510856e-05,
    ];
    let scaled = |scaling, factor, high| Freqs {
        scaling,
        factor,
        high,
        original_context: 16,
        ..Freqs::plain(ROPE_THETA)
    };
    let got = scaled(RopeScaling::Llama3, 8.0, 4.0).inv_freqs(32);
    assert_close(&got, &llama3, 0.0, 1e-6);
    let got = scaled(RopeScaling::Yarn, 4.0, 32.0).inv_freqs(32);
    assert_close(&got, &yarn, 0.0, 1e-6);
    let got = scaled(RopeScaling::Linear, 4.0, 4.0).inv_freqs(32);
    let mut linear: Vec<f64> = yarn[2..].to_vec();
    linear.insert(0, 0.14058533310890198);
    linear.insert(0, 0.25);
    assert_close(&got, &linear, 0.0, 1e-6);
    // A llama3 scaling without its original context is refused by name.
    let op = Op::Rope {
        theta: ROPE_THETA,
        offset: 0,
        interleaved: false,
        scaling: RopeScaling::Llama3,
        factor: 8.0,
        low: 1.0,
        high: 4.0,
        original_context: 0,
    };
    let x = [0.0f64; 4];
    let err = run(
        &op,
        Direction::Forward,
        &[crate::cpu::View::float(&[1, 1, 1, 4], &x)],
    );
    assert!(
        matches!(
            err,
            Err(Error::BadAttr {
                attr: "original_context",
                ..
            })
        ),
        "{err:?}"
    );
}
