//! The vector paths against the reference (the specification) on every instruction set this
//! machine runs, within each op's published budget; the vector `exp` against f64 in ulps; and
//! errors identical to the reference's. `cargo test -p kernels-core vector -- --nocapture`
//! prints the measured maximum errors.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use super::*;
use crate::cpu::{Data, run as reference};
use crate::numerics::compare;
use crate::op::GeluApprox;
use crate::rng::Rng;

/// Prints a measured figure (tests run with `--nocapture` show it; no_std builds drop it).
fn report(_line: &str) {
    #[cfg(feature = "std")]
    std::eprintln!("{_line}");
}

/// Units in the last place of the f32 nearest `exact` between `got` and `exact` (subnormals
/// count in units of the smallest subnormal).
fn ulps(got: f32, exact: f64) -> f64 {
    let e = exact as f32;
    if got.is_nan() || e.is_nan() {
        return if got.is_nan() && e.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if got.is_infinite() || e.is_infinite() {
        return if got == e { 0.0 } else { f64::INFINITY };
    }
    let ulp = if e.abs() < f32::MIN_POSITIVE {
        f64::from(f32::from_bits(1))
    } else {
        let bits = e.abs().to_bits() & 0x7F80_0000;
        f64::from(f32::from_bits(bits)) * f64::from(f32::EPSILON)
    };
    (f64::from(got) - exact).abs() / ulp
}

/// The largest error in ulps of the vector exp over `xs`, with its input.
fn worst_exp_ulps(isa: Isa, xs: &[f32]) -> (f64, f32) {
    let mut out = vec![0.0f32; xs.len()];
    exp_slice(isa, xs, &mut out);
    let mut worst = (0.0, 0.0);
    for (&x, &y) in xs.iter().zip(&out) {
        let e = ulps(y, libm::exp(f64::from(x)));
        if e > worst.0 || e.is_nan() {
            worst = (e, x);
        }
    }
    worst
}

#[test]
fn exp_is_within_two_ulps_of_f64() {
    // Every 997th bit pattern (all magnitudes and both signs), and a dense sweep of the range
    // where exp is finite and non-zero; results within 1e-4 of the overflow threshold are
    // checked on their own below (f32 rounding decides between MAX and inf there).
    let near_overflow = |x: f32| (x - 88.722_84).abs() < 1e-4;
    let mut xs: Vec<f32> = (0..u32::MAX)
        .step_by(997)
        .map(f32::from_bits)
        .filter(|x| !near_overflow(*x))
        .collect();
    let n = 1 << 20;
    xs.extend((0..=n).map(|i| -104.0 + 193.0 * (i as f32) / n as f32));
    xs.retain(|x| !near_overflow(*x));
    for isa in Isa::available() {
        let (worst, at) = worst_exp_ulps(isa, &xs);
        report(&alloc::format!(
            "exp {}: max error {worst} ulp (at x = {at:e}) over {} inputs",
            isa.name(),
            xs.len()
        ));
        assert!(worst <= 2.0, "{}: {worst} ulp at x = {at:e}", isa.name());
    }
}

#[test]
fn exp_edge_cases() {
    let max_ln = 88.722_83_f32; // largest x with exp(x) finite in f32
    let cases: [(f32, f32); 13] = [
        (0.0, 1.0),
        (-0.0, 1.0),
        (f32::INFINITY, f32::INFINITY),
        (f32::NEG_INFINITY, 0.0),
        (89.0, f32::INFINITY),
        (1e30, f32::INFINITY),
        (-1e30, 0.0),
        (-104.0, 0.0),
        (-103.972_08, 0.0),
        (f32::MIN_POSITIVE, 1.0),
        (-f32::from_bits(1), 1.0),
        (1.0, core::f32::consts::E),
        (-1.0, 1.0 / core::f32::consts::E),
    ];
    for isa in Isa::available() {
        let xs: Vec<f32> = cases
            .iter()
            .map(|c| c.0)
            .chain([f32::NAN, max_ln])
            .collect();
        let mut out = vec![0.0f32; xs.len()];
        exp_slice(isa, &xs, &mut out);
        for (&(x, want), &got) in cases.iter().zip(&out) {
            assert!(
                ulps(got, f64::from(want)) <= 1.0,
                "{isa:?} exp({x}) = {got}"
            );
        }
        assert!(out[cases.len()].is_nan(), "{isa:?} exp(NaN)");
        assert!(out[cases.len() + 1].is_finite(), "{isa:?} exp({max_ln})");
        // The subnormal range: one rounding, so within an ulp of the smallest subnormal.
        let sub: Vec<f32> = (0..2000).map(|i| -87.0 - i as f32 * 0.008).collect();
        let (worst, at) = worst_exp_ulps(isa, &sub);
        assert!(worst <= 2.0, "{isa:?} subnormal: {worst} ulp at {at}");
    }
}

/// Awkward row lengths: around every vector width and the 4-accumulator unroll.
const LENS: [usize; 10] = [1, 3, 7, 8, 15, 16, 17, 33, 64, 100];

/// Seeded data of one of several characters (`kind`): normal, wide uniform, huge, tiny, and
/// normal with NaN / +inf / -inf planted.
fn data(rng: &mut Rng, n: usize, kind: usize) -> Vec<f32> {
    let mut v = rng.normal_vec(n, 0.0, 1.0);
    match kind {
        1 => v.iter_mut().for_each(|x| *x *= 60.0),
        2 => v.iter_mut().for_each(|x| *x *= 1e20),
        3 => v.iter_mut().for_each(|x| *x *= 1e-20),
        4..=6 => {
            let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][kind - 4];
            let i = rng.below(n as u64) as usize;
            v[i] = special;
        }
        _ => {}
    }
    v
}
const KINDS: usize = 7;

/// The largest `|got - want| / (atol + rtol |want|)` over finite pairs: the fraction of the
/// budget used (1 is the limit).
fn budget_used(got: &Owned<f32>, want: &Owned<f32>, atol: f64, rtol: f64) -> f64 {
    let pairs = got.floats().iter().zip(want.floats());
    pairs
        .filter(|(g, w)| g.is_finite() && w.is_finite())
        .map(|(&g, &w)| {
            let (g, w) = (f64::from(g), f64::from(w));
            let room = atol + rtol * w.abs();
            if room > 0.0 {
                (g - w).abs() / room
            } else if g == w {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}

/// Runs `op` on every instruction set and on the reference; asserts both succeed with the same
/// shapes and agree within the op's budget, or fail with the same error. Returns the largest
/// relative error over finite pairs and the largest fraction of the budget used.
fn agree(op: Op, inputs: &[(Vec<usize>, Vec<f32>)]) -> (f64, f64) {
    let views: Vec<View<f32>> = inputs.iter().map(|(s, d)| View::float(s, d)).collect();
    let shapes: Vec<&[usize]> = inputs.iter().map(|(s, _)| s.as_slice()).collect();
    let want = reference(&op, Direction::Forward, &views);
    let (atol, rtol) = op.spec().budget.at(op.reduced_len(&shapes));
    let mut worst = (0.0f64, 0.0f64);
    for isa in Isa::available() {
        let got = forward_with(isa, &op, &views).expect("op has a vector path");
        let (got, want) = match (got, &want) {
            (Ok(g), Ok(w)) => (g, w),
            (g, w) => {
                assert_eq!(&g, w, "{op:?} {shapes:?} on {isa:?}");
                continue;
            }
        };
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.shape, w.shape, "{op:?} {shapes:?}");
            let c = compare(g.floats(), w.floats(), atol, rtol);
            assert!(c.pass, "{op:?} {shapes:?} on {isa:?}: {c:?}");
            worst = (
                worst.0.max(c.max_rel_err),
                worst.1.max(budget_used(g, w, atol, rtol)),
            );
        }
    }
    worst
}

/// Folds a case's errors into the running maxima.
fn fold(acc: &mut (f64, f64), e: (f64, f64)) {
    *acc = (acc.0.max(e.0), acc.1.max(e.1));
}

fn summary(what: &str, worst: (f64, f64)) {
    report(&alloc::format!(
        "{what}: max rel error {:.3e}, max {:.3} of the budget (vs reference)",
        worst.0,
        worst.1
    ));
}

#[test]
fn activations_match_the_reference() {
    let mut rng = Rng::new(1);
    for u in [UnaryOp::Exp, UnaryOp::Sigmoid, UnaryOp::Silu] {
        let mut worst = (0.0, 0.0);
        for &n in &LENS {
            for kind in 0..KINDS {
                let x = data(&mut rng, n, kind);
                fold(&mut worst, agree(Op::Unary(u), &[(vec![n], x)]));
            }
        }
        summary(Op::Unary(u).name(), worst);
    }
    let mut worst = (0.0, 0.0);
    for &n in &LENS {
        for kind in 0..KINDS {
            let g = data(&mut rng, n, kind);
            let u = data(&mut rng, n, (kind + 3) % KINDS);
            fold(
                &mut worst,
                agree(Op::Swiglu, &[(vec![1, n], g), (vec![1, n], u)]),
            );
        }
    }
    summary("swiglu", worst);
}

#[test]
fn softmax_matches_the_reference() {
    let mut rng = Rng::new(2);
    for log in [false, true] {
        let mut worst = (0.0, 0.0);
        for causal in [false, true] {
            for &t in LENS.iter().chain(&[257, 1000]) {
                for (kind, s) in (0..KINDS).zip([1, 3, 5, 2, 4, 1, 7]) {
                    let rows = if causal { s } else { 3 };
                    let x = data(&mut rng, 2 * rows * t, kind);
                    let op = if log {
                        Op::LogSoftmax { causal }
                    } else {
                        Op::Softmax { causal }
                    };
                    fold(&mut worst, agree(op, &[(vec![2, rows, t], x)]));
                }
            }
        }
        summary(if log { "log_softmax" } else { "softmax" }, worst);
    }
}

#[test]
fn rms_norm_matches_the_reference() {
    let mut rng = Rng::new(3);
    let mut worst = (0.0, 0.0);
    for eps in [1e-5, 0.0] {
        for &n in LENS.iter().chain(&[288, 4096]) {
            for kind in 0..KINDS {
                let x = data(&mut rng, 3 * n, kind);
                let w = rng.normal_vec(n, 1.0, 0.5);
                let op = Op::RmsNorm { eps };
                fold(&mut worst, agree(op, &[(vec![3, n], x), (vec![n], w)]));
            }
        }
    }
    // A row of subnormals and a row whose squares overflow f32 (the f64 fallback rows).
    let x = [1e-40f32, -3e-41, 2e-39, 3e20, -2e25, 1e24];
    let w = [1.0f32, 2.0, -0.5];
    fold(
        &mut worst,
        agree(
            Op::RmsNorm { eps: 0.0 },
            &[(vec![2, 3], x.to_vec()), (vec![3], w.to_vec())],
        ),
    );
    summary("rms_norm", worst);
}

#[test]
fn layer_norm_matches_the_reference() {
    let mut rng = Rng::new(6);
    let mut worst = (0.0, 0.0);
    for eps in [1e-5, 0.0] {
        for &n in LENS.iter().chain(&[288, 4096]) {
            for kind in 0..KINDS + 1 {
                let mut x = data(&mut rng, 3 * n, kind % KINDS);
                if kind == KINDS {
                    // Offset rows (mean far from the spread): the f64 fallback.
                    x.iter_mut().for_each(|v| *v += 10000.0);
                }
                let w = rng.normal_vec(n, 1.0, 0.5);
                let b = rng.normal_vec(n, 0.0, 0.5);
                let op = Op::LayerNorm { eps };
                let inputs = [(vec![3, n], x), (vec![n], w), (vec![n], b)];
                fold(&mut worst, agree(op, &inputs));
            }
        }
    }
    // [10000, 10001, 10002] normalizes as accurately as [0, 1, 2] (the reference's promise);
    // a row with a modest offset stays on the f32 path.
    let x = [10000.0f32, 10001.0, 10002.0, 3.0, 4.0, 5.5];
    let w = [1.0f32, 2.0, -0.5];
    let b = [0.0f32, 0.1, 0.2];
    let inputs = [
        (vec![2, 3], x.to_vec()),
        (vec![3], w.to_vec()),
        (vec![3], b.to_vec()),
    ];
    fold(&mut worst, agree(Op::LayerNorm { eps: 0.0 }, &inputs));
    summary("layer_norm", worst);
}

#[test]
fn rope_matches_the_reference() {
    let mut rng = Rng::new(4);
    let mut worst = (0.0, 0.0);
    for interleaved in [false, true] {
        for &head_dim in &[2usize, 6, 32, 34, 48, 64] {
            for &(seq, offset) in &[(1usize, 0usize), (1, 399), (5, 7), (40, 0), (33, 1_000_000)] {
                let shape = vec![2, 3, seq, head_dim];
                let x = data(&mut rng, 6 * seq * head_dim, (seq + head_dim) % KINDS);
                let op = Op::rope(10000.0, offset, interleaved);
                fold(&mut worst, agree(op, &[(shape, x)]));
            }
        }
    }
    summary("rope", worst);
}

#[test]
fn attention_matches_the_reference() {
    let mut rng = Rng::new(5);
    let mut worst = (0.0, 0.0);
    // (batch, hq, hkv, s, t, d, dv): decode over a 400-position cache with llama-like heads,
    // GQA, prefill, s > t (rows that see no key), awkward head dims.
    let shapes = [
        (1, 6, 6, 1, 400, 48, 48),
        (1, 8, 2, 1, 33, 64, 64),
        (1, 6, 6, 32, 32, 48, 48),
        (2, 4, 2, 5, 17, 15, 17),
        (1, 2, 1, 7, 3, 3, 1),
        (1, 1, 1, 1, 1, 1, 1),
    ];
    for (i, &(b, hq, hkv, s, t, d, dv)) in shapes.iter().enumerate() {
        for causal in [false, true] {
            for scale in [None, Some(0.3)] {
                let kind = (i + usize::from(causal)) % KINDS;
                // Scores stay moderate (|logit| up to ~30): with q scaled by 60 the softmax is so
                // ill-conditioned that any change of summation order leaves a fixed budget.
                let mut q = data(&mut rng, b * hq * s * d, 0);
                if kind % 2 == 1 {
                    q.iter_mut().for_each(|x| *x *= 4.0);
                }
                let k = data(&mut rng, b * hkv * t * d, if kind == 4 { 4 } else { 0 });
                let v = data(&mut rng, b * hkv * t * dv, if kind >= 5 { kind } else { 0 });
                let inputs = [
                    (vec![b, hq, s, d], q),
                    (vec![b, hkv, t, d], k),
                    (vec![b, hkv, t, dv], v),
                ];
                fold(
                    &mut worst,
                    agree(
                        Op::Attention {
                            causal,
                            scale,
                            kv_len: 0,
                            window: 0,
                        },
                        &inputs,
                    ),
                );
            }
        }
    }
    summary("attention", worst);
}

/// Invalid arguments give exactly the reference's error on every instruction set.
#[test]
fn errors_are_the_references_errors() {
    let x = [1.0f32; 24];
    let ints = [1i32; 24];
    let f = |shape: &'static [usize], n: usize| View::float(shape, &x[..n]);
    let int = |shape: &'static [usize]| View {
        shape,
        data: Data::I32(&ints[..shape.iter().product::<usize>()]),
    };
    let attn = Op::Attention {
        causal: true,
        scale: None,
        kv_len: 0,
        window: 0,
    };
    let cases: Vec<(Op, Vec<View<f32>>)> = vec![
        (Op::Unary(UnaryOp::Exp), vec![]),
        (Op::Unary(UnaryOp::Silu), vec![f(&[0], 0)]),
        (Op::Unary(UnaryOp::Sigmoid), vec![int(&[2])]),
        (Op::Unary(UnaryOp::Exp), vec![f(&[3], 2)]),
        (Op::Swiglu, vec![f(&[2, 3], 6), f(&[3, 2], 6)]),
        (Op::Swiglu, vec![f(&[2, 3], 6)]),
        (Op::Softmax { causal: false }, vec![f(&[], 1)]),
        (Op::Softmax { causal: true }, vec![f(&[4], 4)]),
        (Op::LogSoftmax { causal: false }, vec![f(&[2, 0], 0)]),
        (Op::RmsNorm { eps: -1.0 }, vec![f(&[2, 3], 6), f(&[3], 3)]),
        (
            Op::RmsNorm { eps: f32::NAN },
            vec![f(&[2, 3], 6), f(&[3], 3)],
        ),
        (Op::RmsNorm { eps: 1e-5 }, vec![f(&[2, 3], 6), f(&[2], 2)]),
        (Op::RmsNorm { eps: 1e-5 }, vec![f(&[2, 3], 6), int(&[3])]),
        (
            Op::LayerNorm { eps: -1.0 },
            vec![f(&[2, 3], 6), f(&[3], 3), f(&[3], 3)],
        ),
        (
            Op::LayerNorm { eps: 1e-5 },
            vec![f(&[2, 3], 6), f(&[3], 3), f(&[2], 2)],
        ),
        (Op::LayerNorm { eps: 1e-5 }, vec![f(&[2, 3], 6), f(&[3], 3)]),
        (Op::rope(0.0, 0, false), vec![f(&[1, 1, 2, 4], 8)]),
        (Op::rope(1e4, 0, false), vec![f(&[1, 2, 3], 6)]),
        (Op::rope(1e4, usize::MAX, true), vec![f(&[1, 1, 2, 4], 8)]),
        (Op::rope(1e4, 0, false), vec![f(&[1, 1, 2, 3], 6)]),
        (attn, vec![f(&[1, 2, 1, 4], 8), f(&[1, 1, 3, 4], 12)]),
        (
            attn,
            vec![
                f(&[1, 2, 1, 4], 8),
                f(&[1, 1, 3, 2], 6),
                f(&[1, 1, 3, 2], 6),
            ],
        ),
        (
            attn,
            vec![
                f(&[1, 3, 1, 4], 12),
                f(&[1, 2, 3, 4], 24),
                f(&[1, 2, 3, 4], 24),
            ],
        ),
        (
            attn,
            vec![
                f(&[1, 2, 1, 4], 8),
                f(&[1, 1, 3, 4], 12),
                f(&[1, 1, 2, 4], 8),
            ],
        ),
        (
            Op::Attention {
                causal: false,
                scale: Some(f32::INFINITY),
                kv_len: 0,
                window: 0,
            },
            vec![
                f(&[1, 1, 1, 4], 4),
                f(&[1, 1, 3, 4], 12),
                f(&[1, 1, 3, 4], 12),
            ],
        ),
        (
            attn,
            vec![f(&[1, 1, 4], 4), f(&[1, 3, 4], 12), f(&[1, 3, 4], 12)],
        ),
    ];
    for (op, args) in &cases {
        let want = reference(op, Direction::Forward, args);
        assert!(want.is_err(), "{op:?} should be rejected");
        for isa in Isa::available() {
            let got = forward_with(isa, op, args).expect("op has a vector path");
            assert_eq!(got, want, "{op:?} on {isa:?}");
        }
    }
}

#[test]
fn other_ops_have_no_vector_path() {
    let x = [1.0f32];
    let args = [View::float(&[1], &x)];
    for op in [
        Op::Unary(UnaryOp::Tanh),
        Op::Unary(UnaryOp::Relu),
        Op::Gelu {
            approximate: GeluApprox::None,
        },
        Op::Transpose,
    ] {
        assert!(forward(&op, &args).is_none(), "{op:?}");
    }
    let _: String = Isa::selected().name().into();
}

/// `dot4` is four `dot`s bit for bit (attention's scores take either), on every instruction
/// set, at lengths around the vector widths, with NaN and inf planted.
#[test]
fn four_interleaved_dots_are_four_dots() {
    let mut rng = Rng::new(41);
    for isa in Isa::available() {
        for len in [1, 3, 4, 7, 8, 15, 16, 17, 31, 64, 65, 128] {
            let a = data(&mut rng, len, 0);
            let b: Vec<Vec<f32>> = (0..4)
                .map(|i| data(&mut rng, len, [0, 1, 4, 5][i]))
                .collect();
            let (got, want) = with_simd!(isa, s => {
                let got = math::dot4(s, &a, [&b[0], &b[1], &b[2], &b[3]]);
                let want: Vec<f32> = b.iter().map(|bi| math::dot(s, &a, bi)).collect();
                (got, want)
            });
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{isa:?} len {len}: {g} != {w}"
                );
            }
        }
    }
}

/// `weighted_rows` (whole-vector blocks of 8, then of every count 1 to 7, then a short tail) gives each output
/// the plain chain `fma(p[j], rows[j][c], acc)` over `j`, bit for bit, on every instruction set,
/// at widths around the vector widths, with NaN and inf planted.
#[test]
fn weighted_rows_is_one_chain_per_output() {
    let mut rng = Rng::new(43);
    for isa in Isa::available() {
        for w in [
            1, 3, 8, 9, 16, 17, 24, 31, 33, 40, 48, 56, 64, 65, 72, 80, 100, 112, 130, 200,
        ] {
            for (n, kind) in [(0, 0), (1, 0), (5, 4), (17, 5), (40, 0)] {
                let p = data(&mut rng, n, 0);
                let rows = data(&mut rng, n * w, kind);
                let (got, want) = with_simd!(isa, s => {
                    let mut got = vec![0.0f32; w];
                    math::weighted_rows(s, &p, &rows, &mut got);
                    let want: Vec<f32> = (0..w)
                        .map(|c| {
                            let mut acc = s.splat(0.0);
                            for (j, &pj) in p.iter().enumerate() {
                                acc = s.mul_add(s.splat(pj), s.splat(rows[j * w + c]), acc);
                            }
                            let mut lane = [0.0f32];
                            s.store(acc, &mut lane);
                            lane[0]
                        })
                        .collect();
                    (got, want)
                });
                for (c, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == e.to_bits() || (g.is_nan() && e.is_nan()),
                        "{isa:?} width {w}, {n} rows, column {c}: {g} != {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn ops_split_over_the_pool_give_the_bits_of_their_parts() {
    // Large enough that swiglu, silu and rms_norm split over the pool (`POOL_GRAIN` values a
    // range): the whole against each part run alone (a part short of the grain stays on one
    // thread), bit for bit, NaN and infinity included, on every instruction set.
    let mut rng = Rng::new(23);
    let (rows, n) = (37, 1000);
    let mut x = data(&mut rng, rows * n, 0);
    let up = data(&mut rng, rows * n, 0);
    let w = data(&mut rng, n, 0);
    x[5 * n + 7] = f32::NAN;
    x[20 * n + 1] = f32::INFINITY;
    let bits = |o: &Owned<f32>| o.floats().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for isa in Isa::available() {
        let run = |op: &Op, args: &[View<f32>]| {
            let out = forward_with(isa, op, args).expect("a vector path");
            bits(&out.expect("valid")[0])
        };
        // Element-wise: parts of 1024 values (a multiple of every vector width).
        let len = rows * n;
        let shape = [len];
        let silu = Op::Unary(UnaryOp::Silu);
        let whole_silu = run(&silu, &[View::float(&shape, &x)]);
        let whole_swiglu = run(
            &Op::Swiglu,
            &[View::float(&shape, &x), View::float(&shape, &up)],
        );
        for p0 in (0..len).step_by(1024) {
            let p1 = (p0 + 1024).min(len);
            let sh = [p1 - p0];
            let part = run(&silu, &[View::float(&sh, &x[p0..p1])]);
            assert_eq!(part, whole_silu[p0..p1], "silu on {isa:?} at {p0}");
            let args = [View::float(&sh, &x[p0..p1]), View::float(&sh, &up[p0..p1])];
            let part = run(&Op::Swiglu, &args);
            assert_eq!(part, whole_swiglu[p0..p1], "swiglu on {isa:?} at {p0}");
        }
        // rms_norm: each row alone.
        let norm = Op::RmsNorm { eps: 1e-6 };
        let shape = [rows, n];
        let whole = run(&norm, &[View::float(&shape, &x), View::float(&[n], &w)]);
        for r in 0..rows {
            let row = &x[r * n..(r + 1) * n];
            let part = run(&norm, &[View::float(&[1, n], row), View::float(&[n], &w)]);
            assert_eq!(
                part,
                whole[r * n..(r + 1) * n],
                "rms_norm on {isa:?} row {r}"
            );
        }
    }
}
