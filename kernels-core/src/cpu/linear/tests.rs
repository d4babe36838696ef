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
