//! Every implemented op, forward and backward, on wgpu against the CPU reference, on the shared
//! seeded parity cases (awkward shapes, tile sizes +/- 1, one case above 65,535 workgroups),
//! within each op's published budget.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kernels_core::numerics::compare;
use kernels_core::op::Direction;
use kernels_core::{Backend, CpuBackend, DType, Error, OpKind, Tensor, parity};

/// Elements as f64 (floats, or integer results widened).
fn values(t: &Tensor) -> Vec<f64> {
    if t.dtype().is_int() {
        t.to_i64_vec().unwrap().iter().map(|&v| v as f64).collect()
    } else {
        t.as_f32().unwrap().iter().map(|&v| f64::from(v)).collect()
    }
}

fn same_values(
    label: &str,
    got: &Tensor,
    want: &[f64],
    atol: f64,
    rtol: f64,
) -> Result<(f64, f64), String> {
    let g = values(got);
    if g.len() != want.len() {
        return Err(format!(
            "{label}: {} elements vs reference {}",
            g.len(),
            want.len()
        ));
    }
    let c = compare(&g, want, atol, rtol);
    if c.pass {
        Ok((c.max_abs_err, c.max_rel_err))
    } else {
        let w = c.worst_index.unwrap_or(0);
        Err(format!(
            "{label}: {} violations, max abs {:.3e}, max rel {:.3e}, worst index {w} (got {} want {}) (budget atol {atol:.1e} rtol {rtol:.1e})",
            c.violations,
            c.max_abs_err,
            c.max_rel_err,
            g.get(w).copied().unwrap_or(f64::NAN),
            want.get(w).copied().unwrap_or(f64::NAN)
        ))
    }
}

fn is_stub(e: &Error) -> bool {
    matches!(e, Error::UnsupportedOnBackend { .. })
}

enum Reference {
    /// The CPU reference kernels (the specification).
    Cpu(Vec<Tensor>),
    /// The test's f64 oracle, while the CPU kernel is still a stub.
    Oracle(Vec<Vec<f64>>),
}

/// The CPU reference result, else the oracle's, else `None` (no reference for this op yet).
fn reference(op: &kernels_core::Op, dir: Direction, args: &[Tensor]) -> Option<Reference> {
    let refs: Vec<&Tensor> = args.iter().collect();
    match CpuBackend::reference().run(op, dir, &refs) {
        Ok(w) => Some(Reference::Cpu(w)),
        Err(e) if is_stub(&e) => common::oracle::run(op, dir, args).map(Reference::Oracle),
        Err(e) => panic!("{op} {}: cpu reference failed: {e}", dir.name()),
    }
}

fn reference_values(r: &Reference) -> Vec<Vec<f64>> {
    match r {
        Reference::Cpu(ts) => ts.iter().map(values).collect(),
        Reference::Oracle(v) => v.clone(),
    }
}

#[test]
fn wgpu_matches_the_cpu_reference() {
    let Some(gpu) = common::backend() else { return };
    // Lavapipe has subgroups: the default run takes the subgroup path there.
    if gpu.adapter_info().name.contains("llvmpipe") {
        assert!(gpu.uses_subgroups(), "lavapipe reports subgroups");
    }
    suite(&gpu, OpKind::ALL);
    let built = gpu.pipelines_built();
    let sg = built.iter().filter(|p| p.ends_with("+subgroup")).count();
    assert_eq!(sg > 0, gpu.uses_subgroups(), "{built:?}");
}

/// The row-reduction ops again with subgroups turned off, so the workgroup-memory fallback is
/// tested on adapters that have subgroups too.
#[test]
fn row_reductions_match_without_subgroups() {
    let Some(_) = common::backend() else { return };
    let gpu = kernels_gpu::WgpuBackend::with_options(kernels_gpu::WgpuOptions {
        subgroups: false,
        ..Default::default()
    })
    .unwrap();
    assert!(!gpu.uses_subgroups());
    suite(
        &gpu,
        &[
            OpKind::Softmax,
            OpKind::LogSoftmax,
            OpKind::LayerNorm,
            OpKind::RmsNorm,
            OpKind::Sum,
            OpKind::Mean,
            OpKind::Max,
        ],
    );
    let built = gpu.pipelines_built();
    assert!(
        built.iter().any(|p| p == "softmax/softmax_forward"),
        "{built:?}"
    );
    assert!(!built.iter().any(|p| p.ends_with("+subgroup")), "{built:?}");
}

fn suite(gpu: &kernels_gpu::WgpuBackend, kinds: &[OpKind]) {
    let mut failures = Vec::new();
    let mut passed = Vec::new();
    let mut by_oracle = Vec::new();
    let mut no_reference = Vec::new();
    let mut unsupported = Vec::new();
    // Op kinds with at least one GPU case compared against a reference, per direction.
    let mut ran_forward = std::collections::BTreeSet::new();
    let mut ran_backward = std::collections::BTreeSet::new();
    for kind in kinds {
        let spec = kind.spec();
        for (ci, case) in parity::cases(*kind, 7).unwrap().into_iter().enumerate() {
            let label = format!("{} {}", case.op, case.shape_label());
            let shapes: Vec<&[usize]> = case.inputs.iter().map(|t| t.shape()).collect();
            let k = case.op.reduced_len(&shapes);
            let dev: Vec<Tensor> = case.inputs.iter().map(|t| gpu.upload(t).unwrap()).collect();
            let dev_refs: Vec<&Tensor> = dev.iter().collect();
            let got = match gpu.run(&case.op, Direction::Forward, &dev_refs) {
                Ok(g) => g,
                Err(e) if is_stub(&e) => {
                    unsupported.push(kind.name());
                    break;
                }
                Err(e) => {
                    failures.push(format!("{label} forward: {e}"));
                    continue;
                }
            };
            let got: Vec<Tensor> = got
                .iter()
                .map(|g| gpu.download_blocking(g).unwrap())
                .collect();
            let Some(want) = reference(&case.op, Direction::Forward, &case.inputs) else {
                no_reference.push(kind.name());
                break;
            };
            let src = match &want {
                Reference::Cpu(_) => "cpu",
                Reference::Oracle(_) => {
                    by_oracle.push(kind.name());
                    "oracle"
                }
            };
            let (atol, rtol) = spec.budget.at(k);
            let want_v = reference_values(&want);
            ran_forward.insert(kind.name());
            assert_eq!(got.len(), want_v.len(), "{label}: output count");
            for (g, w) in got.iter().zip(&want_v) {
                match same_values(&label, g, w, atol, rtol) {
                    Ok((abs, rel)) => passed.push(format!(
                        "{label} forward vs {src}: abs {abs:.2e} rel {rel:.2e}"
                    )),
                    Err(e) => failures.push(format!("{e} [forward vs {src}]")),
                }
            }
            if !spec.differentiable() {
                continue;
            }
            // Backward on the same arguments for both: inputs ++ outputs ++ grads, with the
            // reference's outputs when it has tensors, else the GPU's own.
            let outs = match &want {
                Reference::Cpu(ts) => ts.clone(),
                Reference::Oracle(_) => got.clone(),
            };
            let grads = parity::grad_outputs(&outs, 100 + ci as u64).unwrap();
            let mut bargs: Vec<Tensor> = case.inputs.clone();
            bargs.extend(outs);
            bargs.extend(grads);
            let dev_b: Vec<Tensor> = bargs.iter().map(|t| gpu.upload(t).unwrap()).collect();
            let dev_b_refs: Vec<&Tensor> = dev_b.iter().collect();
            let got_b = match gpu.run(&case.op, Direction::Backward, &dev_b_refs) {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{label} backward: {e}"));
                    continue;
                }
            };
            let Some(want_b) = reference(&case.op, Direction::Backward, &bargs) else {
                continue;
            };
            let src = match &want_b {
                Reference::Cpu(_) => "cpu",
                Reference::Oracle(_) => "oracle",
            };
            let (atol, rtol) = spec.budget_backward.at(k);
            let want_b = reference_values(&want_b);
            ran_backward.insert(kind.name());
            assert_eq!(got_b.len(), want_b.len(), "{label}: gradient count");
            for (i, (g, w)) in got_b.iter().zip(&want_b).enumerate() {
                let g = gpu.download_blocking(g).unwrap();
                match same_values(&label, &g, w, atol, rtol) {
                    Ok((abs, rel)) => passed.push(format!(
                        "{label} backward[{}] vs {src}: abs {abs:.2e} rel {rel:.2e}",
                        spec.grad_inputs[i]
                    )),
                    Err(e) => {
                        failures.push(format!("{e} [backward {} vs {src}]", spec.grad_inputs[i]))
                    }
                }
            }
        }
    }
    by_oracle.dedup();
    no_reference.dedup();
    unsupported.dedup();
    println!("passed {}:\n  {}", passed.len(), passed.join("\n  "));
    println!("checked against the test oracle (CPU reference not landed): {by_oracle:?}");
    println!("no reference yet: {no_reference:?}");
    println!("unsupported on wgpu: {unsupported:?}");
    println!("counters: {:?}", gpu.counters());
    // Coverage: every op ran on wgpu forward and, if differentiable, backward.
    let missing: Vec<String> = kinds
        .iter()
        .flat_map(|kind| {
            let name = kind.name();
            let mut m = Vec::new();
            if !ran_forward.contains(name) {
                m.push(format!("{name} forward"));
            }
            if kind.spec().differentiable() && !ran_backward.contains(name) {
                m.push(format!("{name} backward"));
            }
            m
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a wgpu parity case run: {missing:?}"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Hand-checked values, independent of the CPU reference.
#[test]
fn hand_checked_values() {
    use kernels_core::op::{BinaryOp, Op, ReduceOp, UnaryOp};
    let Some(gpu) = common::backend() else { return };
    let run = |op: Op, dir: Direction, xs: &[Tensor]| -> Vec<Tensor> {
        let dev: Vec<Tensor> = xs.iter().map(|t| gpu.upload(t).unwrap()).collect();
        let refs: Vec<&Tensor> = dev.iter().collect();
        gpu.run(&op, dir, &refs)
            .unwrap()
            .iter()
            .map(|t| gpu.download_blocking(t).unwrap())
            .collect()
    };
    let a = Tensor::from_f32(&[2, 3], vec![1., 2., 3., 4., 5., 6.]).unwrap();
    let b = Tensor::from_f32(&[3], vec![10., 20., 30.]).unwrap();
    let out = run(
        Op::Binary(BinaryOp::Add),
        Direction::Forward,
        &[a.clone(), b.clone()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[11., 22., 33., 14., 25., 36.]);
    // grad_b of mul sums g * a over the broadcast rows.
    let g = Tensor::full(&[2, 3], 1.0).unwrap();
    let y = Tensor::zeros(&[2, 3]).unwrap();
    let out = run(
        Op::Binary(BinaryOp::Mul),
        Direction::Backward,
        &[a.clone(), b.clone(), y, g],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[10., 20., 30., 10., 20., 30.]);
    assert_eq!(out[1].as_f32().unwrap(), &[5., 7., 9.]);
    let x = Tensor::from_f32(&[4], vec![-1., 0., 2., -3.]).unwrap();
    let out = run(
        Op::Unary(UnaryOp::Relu),
        Direction::Forward,
        std::slice::from_ref(&x),
    );
    assert_eq!(out[0].as_f32().unwrap(), &[0., 0., 2., 0.]);
    // [2,3] @ [3,2]
    let m = Tensor::from_f32(&[3, 2], vec![1., 0., 0., 1., 1., 1.]).unwrap();
    let out = run(
        Op::Matmul {
            trans_a: false,
            trans_b: false,
        },
        Direction::Forward,
        &[a.clone(), m],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[4., 5., 10., 11.]);
    // a^T @ a with trans_a: [3,2] @ [2,3]
    let out = run(
        Op::Matmul {
            trans_a: true,
            trans_b: false,
        },
        Direction::Forward,
        &[a.clone(), a.clone()],
    );
    assert_eq!(
        out[0].as_f32().unwrap(),
        &[17., 22., 27., 22., 29., 36., 27., 36., 45.]
    );
    let out = run(
        Op::Reduce(ReduceOp::Sum),
        Direction::Forward,
        std::slice::from_ref(&a),
    );
    assert_eq!(out[0].as_f32().unwrap(), &[6., 15.]);
    let t = Tensor::from_f32(&[2, 3], vec![1., 7., 7., 9., 2., 9.]).unwrap();
    let out = run(Op::Argmax, Direction::Forward, &[t]);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![1, 0]);
    assert_eq!(out[0].dtype(), DType::I32);
    let out = run(Op::Transpose, Direction::Forward, std::slice::from_ref(&a));
    assert_eq!(out[0].as_f32().unwrap(), &[1., 4., 2., 5., 3., 6.]);
    let out = run(
        Op::Concat,
        Direction::Forward,
        &[
            a.clone(),
            Tensor::from_f32(&[2, 1], vec![-1., -2.]).unwrap(),
        ],
    );
    assert_eq!(
        out[0].as_f32().unwrap(),
        &[1., 2., 3., -1., 4., 5., 6., -2.]
    );
    let out = run(
        Op::Softmax { causal: true },
        Direction::Forward,
        &[Tensor::zeros(&[2, 2]).unwrap()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[1., 0., 0.5, 0.5]);
    let ids = Tensor::from_i32(&[3], vec![2, 0, 2]).unwrap();
    let out = run(
        Op::Embedding,
        Direction::Forward,
        &[ids.clone(), a.reshape(&[3, 2]).unwrap()],
    );
    assert_eq!(out[0].as_f32().unwrap(), &[5., 6., 1., 2., 5., 6.]);
    let bad = Tensor::from_i32(&[1], vec![3]).unwrap();
    let dev = [
        gpu.upload(&bad).unwrap(),
        gpu.upload(&a.reshape(&[3, 2]).unwrap()).unwrap(),
    ];
    assert!(matches!(
        gpu.run(&Op::Embedding, Direction::Forward, &[&dev[0], &dev[1]]),
        Err(Error::IndexOutOfRange { .. })
    ));
    // Shape errors name the op, as on the CPU.
    let dev = [
        gpu.upload(&a).unwrap(),
        gpu.upload(&Tensor::zeros(&[2]).unwrap()).unwrap(),
    ];
    assert!(matches!(
        gpu.run(
            &Op::Binary(BinaryOp::Add),
            Direction::Forward,
            &[&dev[0], &dev[1]]
        ),
        Err(Error::ShapeMismatch { op: "add", .. })
    ));
    // Host tensors are refused rather than silently copied.
    assert!(matches!(
        gpu.run(&Op::Unary(UnaryOp::Neg), Direction::Forward, &[&a]),
        Err(Error::DeviceMismatch { .. })
    ));
}
