//! Finite-difference gradient checks for every differentiable op, in f64 on the reference
//! kernels, over the ops' parity cases (the same inputs the backend parity tests use).

// wasm-pack test runs these in the browser too.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::BTreeSet;

use kernels_core::gradcheck::{self, Options};
use kernels_core::op::OpKind;
use kernels_core::parity;

#[test]
fn every_differentiable_op_passes_gradcheck_on_its_parity_cases() {
    let mut checked: BTreeSet<OpKind> = BTreeSet::new();
    let mut failures = Vec::new();
    for &kind in OpKind::ALL {
        if kind.spec().grad_inputs.is_empty() {
            continue;
        }
        for seed in [0u64, 1] {
            let cases = parity::cases(kind, seed).unwrap();
            for (ci, case) in cases.iter().enumerate().filter(|(_, c)| !c.large) {
                let inputs: Vec<_> = case
                    .inputs
                    .iter()
                    .map(|t| gradcheck::to_f64(t).unwrap())
                    .collect();
                let opts = Options {
                    seed: seed * 1000 + ci as u64,
                    ..Options::default()
                };
                match gradcheck::check_op(&case.op, &inputs, opts) {
                    Ok(r) if r.pass() => {
                        checked.insert(kind);
                    }
                    Ok(r) => failures.push(format!(
                        "{} {} (seed {seed}): {} of {} elements off, worst {:?}",
                        case.op,
                        case.shape_label(),
                        r.failures,
                        r.checked,
                        r.worst
                    )),
                    Err(e) => failures.push(format!(
                        "{} {} (seed {seed}): error {e}",
                        case.op,
                        case.shape_label()
                    )),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "gradcheck failures:\n{}",
        failures.join("\n")
    );
    // Coverage: every differentiable op was checked at least once.
    let missing: Vec<&str> = OpKind::ALL
        .iter()
        .filter(|k| !k.spec().grad_inputs.is_empty() && !checked.contains(k))
        .map(|k| k.name())
        .collect();
    assert!(missing.is_empty(), "ops never gradchecked: {missing:?}");
}

#[test]
fn non_differentiable_ops_are_refused_by_the_checker() {
    for &kind in OpKind::ALL {
        if !kind.spec().grad_inputs.is_empty() {
            continue;
        }
        let cases = parity::cases(kind, 0).unwrap();
        let case = &cases[0];
        let inputs: Vec<_> = case
            .inputs
            .iter()
            .map(|t| gradcheck::to_f64(t).unwrap())
            .collect();
        assert!(
            gradcheck::check_op(&case.op, &inputs, Options::default()).is_err(),
            "{kind}"
        );
    }
}
