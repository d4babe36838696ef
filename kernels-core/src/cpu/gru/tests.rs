// wasm-pack test runs these in the browser too.
use super::*;
use crate::cpu::run;
use crate::cpu::testutil::{assert_close, grad_check, rand_vec, run_as};
use crate::op::{Direction, Op};
use crate::rng::Rng;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

type Arg = (Vec<usize>, Vec<f64>);

/// Random parameters for (input, hidden), scaled so gates are not saturated.
fn params(rng: &mut Rng, input: usize, hidden: usize) -> [Arg; 4] {
    let g = 3 * hidden;
    [
        (vec![g, input], rand_vec(rng, g * input)),
        (vec![g, hidden], rand_vec(rng, g * hidden)),
        (vec![g], rand_vec(rng, g)),
        (vec![g], rand_vec(rng, g)),
    ]
}

fn cell_args(rng: &mut Rng, batch: usize, input: usize, hidden: usize) -> Vec<Arg> {
    let mut v = vec![
        (vec![batch, input], rand_vec(rng, batch * input)),
        (vec![batch, hidden], rand_vec(rng, batch * hidden)),
    ];
    v.extend(params(rng, input, hidden));
    v
}

fn seq_args(rng: &mut Rng, seq: usize, batch: usize, input: usize, hidden: usize) -> Vec<Arg> {
    let mut v = vec![
        (vec![seq, batch, input], rand_vec(rng, seq * batch * input)),
        (vec![batch, hidden], rand_vec(rng, batch * hidden)),
    ];
    v.extend(params(rng, input, hidden));
    v
}

#[test]
fn one_step_by_hand() {
    // input 1, hidden 1, batch 1; x = 1, h = 0.5.
    // r = sigmoid(b_ir = -ln 3) = 1/4; z = sigmoid(b_hz = ln 3) = 3/4;
    // n = tanh(W_in x + b_in + r (W_hn h + b_hn)) = tanh(1 + 0.5 + 0.25 (2 * 0.5 + 1)) = tanh(2);
    // h' = (1 - z) n + z h = tanh(2) / 4 + 3/8.
    let ln3 = 3.0f64.ln();
    let args = vec![
        (vec![1, 1], vec![1.0]),
        (vec![1, 1], vec![0.5]),
        (vec![3, 1], vec![0.0, 0.0, 1.0]),
        (vec![3, 1], vec![0.0, 0.0, 2.0]),
        (vec![3], vec![-ln3, 0.0, 0.5]),
        (vec![3], vec![0.0, ln3, 1.0]),
    ];
    let out = run_as::<f64>(&Op::GruCell, &args);
    assert_eq!(out[0].shape, vec![1, 1]);
    let want = 2.0f64.tanh() / 4.0 + 0.375;
    assert_close(out[0].floats(), &[want], 1e-15, 1e-15);
    // Moving b_hn into b_in must change the answer (b_hn is gated by r, b_in is not).
    let mut moved = args.clone();
    moved[4].1[2] = 1.5;
    moved[5].1[2] = 0.0;
    let other = run_as::<f64>(&Op::GruCell, &moved);
    let want_moved = (1.0f64 + 1.5 + 0.25).tanh() / 4.0 + 0.375;
    assert_close(other[0].floats(), &[want_moved], 1e-15, 1e-15);
}

#[test]
fn batch_rows_are_independent() {
    let mut rng = Rng::new(1);
    let args = cell_args(&mut rng, 3, 7, 13);
    let out = run_as::<f64>(&Op::GruCell, &args);
    assert_eq!(out[0].shape, vec![3, 13]);
    for b in 0..3 {
        let mut one = args.clone();
        one[0] = (vec![1, 7], args[0].1[b * 7..(b + 1) * 7].to_vec());
        one[1] = (vec![1, 13], args[1].1[b * 13..(b + 1) * 13].to_vec());
        let o = run_as::<f64>(&Op::GruCell, &one);
        assert_eq!(o[0].floats(), &out[0].floats()[b * 13..(b + 1) * 13]);
    }
}

#[test]
fn one_step_sequence_equals_cell() {
    let mut rng = Rng::new(2);
    let args = seq_args(&mut rng, 1, 3, 7, 5);
    let seq = run_as::<f64>(&Op::GruSequence, &args);
    let mut cell_in = args.clone();
    cell_in[0].0 = vec![3, 7];
    let cell = run_as::<f64>(&Op::GruCell, &cell_in);
    assert_eq!(seq[0].shape, vec![1, 3, 5]);
    assert_eq!(seq[1].shape, vec![3, 5]);
    assert_eq!(seq[0].floats(), cell[0].floats());
    assert_eq!(seq[1].floats(), cell[0].floats());
}

#[test]
fn sequence_chains_cells() {
    let mut rng = Rng::new(3);
    let (s, b, i, h) = (7, 2, 3, 4);
    let args = seq_args(&mut rng, s, b, i, h);
    let out = run_as::<f64>(&Op::GruSequence, &args);
    let mut hcur = args[1].1.clone();
    for t in 0..s {
        let mut cell_in = args.clone();
        cell_in[0] = (vec![b, i], args[0].1[t * b * i..(t + 1) * b * i].to_vec());
        cell_in[1] = (vec![b, h], hcur.clone());
        hcur = run_as::<f64>(&Op::GruCell, &cell_in)[0].floats().to_vec();
        assert_eq!(
            &out[0].floats()[t * b * h..(t + 1) * b * h],
            hcur.as_slice()
        );
    }
    assert_eq!(out[1].floats(), hcur.as_slice());
}

#[test]
fn cell_backward_matches_finite_differences() {
    let mut rng = Rng::new(4);
    for (i, &(b, inp, hid)) in [(1, 1, 1), (3, 7, 5), (2, 2, 13)].iter().enumerate() {
        let args = cell_args(&mut rng, b, inp, hid);
        grad_check(&Op::GruCell, &args, i as u64);
    }
}

#[test]
fn sequence_backward_matches_finite_differences() {
    let mut rng = Rng::new(5);
    for (i, &(s, b, inp, hid)) in [(1, 1, 1, 1), (3, 2, 3, 4), (7, 3, 2, 3)]
        .iter()
        .enumerate()
    {
        let args = seq_args(&mut rng, s, b, inp, hid);
        grad_check(&Op::GruSequence, &args, 10 + i as u64);
    }
}

#[test]
fn grad_h_n_adds_to_last_step() {
    // With grad_output zero except the last step, passing that gradient as grad_h_n instead
    // must give identical gradients.
    let mut rng = Rng::new(6);
    let (s, b, i, h) = (4, 2, 3, 5);
    let args = seq_args(&mut rng, s, b, i, h);
    let out = run_as::<f64>(&Op::GruSequence, &args);
    let g_last = rand_vec(&mut rng, b * h);
    let mut g_out = vec![0.0; s * b * h];
    g_out[(s - 1) * b * h..].copy_from_slice(&g_last);
    let zeros_out = vec![0.0; s * b * h];
    let zeros_h = vec![0.0; b * h];
    let bw = |go: &[f64], ghn: &[f64]| {
        let mut v: Vec<View<f64>> = args.iter().map(|(s, d)| View::float(s, d)).collect();
        v.push(out[0].view());
        v.push(out[1].view());
        v.push(View::float(&out[0].shape, go));
        v.push(View::float(&out[1].shape, ghn));
        run(&Op::GruSequence, Direction::Backward, &v).unwrap()
    };
    let a = bw(&g_out, &zeros_h);
    let c = bw(&zeros_out, &g_last);
    assert_eq!(a, c);
    assert!(a[3].floats().iter().any(|&x| x != 0.0));
}

#[test]
fn f32_agrees_with_f64() {
    let mut rng = Rng::new(7);
    let args = seq_args(&mut rng, 13, 3, 7, 16);
    let lo = run_as::<f32>(&Op::GruSequence, &args);
    let hi = run_as::<f64>(&Op::GruSequence, &args);
    assert_close(lo[0].floats(), hi[0].floats(), 1e-5, 1e-5);
    assert_close(lo[1].floats(), hi[1].floats(), 1e-5, 1e-5);
}

#[test]
fn saturated_gates_stay_finite() {
    // Huge pre-activations must saturate, not overflow into NaN.
    let args = vec![
        (vec![1, 1], vec![1.0]),
        (vec![1, 1], vec![0.5]),
        (vec![3, 1], vec![1e4, -1e4, 1e4]),
        (vec![3, 1], vec![0.0, 0.0, 0.0]),
        (vec![3], vec![0.0; 3]),
        (vec![3], vec![0.0; 3]),
    ];
    // z = 0, n = 1: h' = 1.
    let out = run_as::<f32>(&Op::GruCell, &args);
    assert_eq!(out[0].floats(), &[1.0]);
}

#[test]
fn errors() {
    let z = [0.0f32; 64];
    let call = |op: Op, shapes: &[&[usize]]| {
        let v: Vec<View<f32>> = shapes
            .iter()
            .map(|s| View::float(s, &z[..s.iter().product::<usize>()]))
            .collect();
        run(&op, Direction::Forward, &v).unwrap_err()
    };
    // Good shapes for batch 2, input 3, hidden 2: [2,3] [2,2] [6,3] [6,2] [6] [6].
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[3, 2], &[6, 3], &[6, 2], &[6], &[6]],
    );
    assert_eq!(e, Error::mismatch("gru_cell", &[2, 3], &[3, 2]));
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[2, 2], &[6, 2], &[6, 2], &[6], &[6]],
    );
    assert!(
        matches!(&e, Error::BadShape { tensor, .. } if tensor == "weight_ih"),
        "{e:?}"
    );
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[2, 2], &[6, 3], &[6, 3], &[6], &[6]],
    );
    assert!(
        matches!(&e, Error::BadShape { tensor, .. } if tensor == "weight_hh"),
        "{e:?}"
    );
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[2, 2], &[6, 3], &[6, 2], &[4], &[6]],
    );
    assert!(
        matches!(&e, Error::BadShape { tensor, .. } if tensor == "bias_ih"),
        "{e:?}"
    );
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[2, 2], &[6, 3], &[6, 2], &[6], &[2, 3]],
    );
    assert!(
        matches!(&e, Error::BadShape { tensor, .. } if tensor == "bias_hh"),
        "{e:?}"
    );
    let e = call(Op::GruCell, &[&[6], &[2, 2], &[6, 3], &[6, 2], &[6], &[6]]);
    assert!(
        matches!(&e, Error::BadShape { op: "gru_cell", tensor, .. } if tensor == "x"),
        "{e:?}"
    );
    let e = call(
        Op::GruCell,
        &[&[2, 0], &[2, 2], &[6, 0], &[6, 2], &[6], &[6]],
    );
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let e = call(
        Op::GruCell,
        &[&[2, 3], &[2, 0], &[0, 3], &[0, 0], &[0], &[0]],
    );
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    // Sequence: x must be rank 3; seq 0 is empty; h0 batch must match.
    let e = call(
        Op::GruSequence,
        &[&[2, 3], &[2, 2], &[6, 3], &[6, 2], &[6], &[6]],
    );
    assert!(
        matches!(
            &e,
            Error::BadShape {
                op: "gru_sequence",
                ..
            }
        ),
        "{e:?}"
    );
    let e = call(
        Op::GruSequence,
        &[&[0, 2, 3], &[2, 2], &[6, 3], &[6, 2], &[6], &[6]],
    );
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let e = call(
        Op::GruSequence,
        &[&[4, 2, 3], &[1, 2], &[6, 3], &[6, 2], &[6], &[6]],
    );
    assert_eq!(e, Error::mismatch("gru_sequence", &[4, 2, 3], &[1, 2]));
    // Backward: grad_h_n of the wrong shape.
    let shapes: [&[usize]; 10] = [
        &[4, 2, 3],
        &[2, 2],
        &[6, 3],
        &[6, 2],
        &[6],
        &[6],
        &[4, 2, 2],
        &[2, 2],
        &[4, 2, 2],
        &[1, 2, 2],
    ];
    let v: Vec<View<f32>> = shapes
        .iter()
        .map(|s| View::float(s, &z[..s.iter().product::<usize>()]))
        .collect();
    let e = run(&Op::GruSequence, Direction::Backward, &v).unwrap_err();
    assert_eq!(e, Error::mismatch("gru_sequence", &[2, 2], &[1, 2, 2]));
}
