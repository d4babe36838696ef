// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[test]
fn every_op_has_cases_and_they_are_deterministic() {
    for k in OpKind::ALL {
        let a = cases(*k, 1).unwrap();
        assert!(!a.is_empty(), "{k} has no parity case");
        let b = cases(*k, 1).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.op, y.op);
            for (t, u) in x.inputs.iter().zip(&y.inputs) {
                assert!(t.bit_eq(u), "{k}: not deterministic");
            }
            assert_eq!(x.op.kind(), *k);
            assert_eq!(
                x.inputs.len(),
                k.spec().inputs.len(),
                "{k}: wrong input count"
            );
        }
    }
    assert!(
        cases(OpKind::Add, 0)
            .unwrap()
            .iter()
            .any(|c| c.large && c.inputs[0].numel() > 65_535 * 256)
    );
}

#[test]
fn ops_that_reject_non_finite_inputs_do_so_in_the_reference() {
    use crate::backend::{Backend, CpuBackend};
    use crate::error::Error;
    use crate::op::{Direction, InputKind};
    let mut checked = 0;
    for k in OpKind::ALL.iter().filter(|k| k.rejects_non_finite()) {
        let case = cases(*k, 0).unwrap().remove(0);
        let spec = k.spec();
        for (i, input) in spec.inputs.iter().enumerate() {
            if input.kind != InputKind::Float {
                continue;
            }
            let mut inputs = case.inputs.clone();
            let mut v = inputs[i].to_f32_vec().unwrap();
            v[0] = f32::NAN;
            inputs[i] = Tensor::from_f32(inputs[i].shape(), v).unwrap();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let e = CpuBackend::reference()
                .run(&case.op, Direction::Forward, &refs)
                .unwrap_err();
            assert!(matches!(e, Error::NonFinite { .. }), "{k}: {e}");
            checked += 1;
        }
    }
    assert!(checked > 0);
}
