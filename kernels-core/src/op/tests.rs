// wasm-pack test runs these in the browser too.
use super::*;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[test]
fn names_round_trip_and_are_unique() {
    for (i, k) in OpKind::ALL.iter().enumerate() {
        assert_eq!(OpKind::from_name(k.name()).unwrap(), *k);
        for k2 in &OpKind::ALL[i + 1..] {
            assert_ne!(k.name(), k2.name());
        }
    }
    assert!(matches!(
        OpKind::from_name("conv2d"),
        Err(Error::UnknownOp { .. })
    ));
}

#[test]
fn defaults_and_attr_parsing() {
    for k in OpKind::ALL {
        let spec = k.spec();
        let required = spec
            .attrs
            .iter()
            .any(|a| a.default == AttrDefault::Required);
        let op = Op::default_for(*k);
        assert_eq!(op.is_ok(), !required, "{k}");
        if let Ok(op) = op {
            assert_eq!(op.kind(), *k);
            // Every attr the op reports round-trips through from_attrs.
            let strs: Vec<(String, String)> = op
                .attrs()
                .iter()
                .map(|(n, v)| (n.to_string(), format!("{v}")))
                .collect();
            let given: Vec<(&str, &str)> =
                strs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            assert_eq!(Op::from_attrs(*k, &given).unwrap(), op);
        }
        for g in spec.grad_inputs {
            assert!(
                spec.inputs.iter().any(|i| i.name == *g),
                "{k}: grad input {g} is not an input"
            );
        }
    }
    assert_eq!(
        Op::from_attrs(OpKind::Matmul, &[("trans_b", "true")]).unwrap(),
        Op::Matmul {
            trans_a: false,
            trans_b: true
        }
    );
    assert!(matches!(
        Op::from_attrs(OpKind::Matmul, &[("bogus", "1")]),
        Err(Error::UnknownAttr { .. })
    ));
    assert!(matches!(
        Op::from_attrs(OpKind::Scale, &[]),
        Err(Error::MissingAttr { attr: "factor", .. })
    ));
    assert!(matches!(
        Op::from_attrs(OpKind::Scale, &[("factor", "x")]),
        Err(Error::BadAttr { .. })
    ));
    assert!(matches!(
        Op::from_attrs(OpKind::Gelu, &[("approximate", "erf")]),
        Err(Error::BadAttr { .. })
    ));
    assert!(matches!(
        Op::from_attrs(OpKind::LayerNorm, &[("eps", "-1")]),
        Err(Error::BadAttr { .. })
    ));
    assert_eq!(
        Op::from_attrs(OpKind::Gelu, &[("approximate", "tanh")]).unwrap(),
        Op::Gelu {
            approximate: GeluApprox::Tanh
        }
    );
}

#[test]
fn backward_arg_names_follow_the_convention() {
    let s = OpKind::GruSequence.spec();
    let names = s.arg_names(Direction::Backward);
    assert_eq!(names.len(), 6 + 2 + 2);
    assert_eq!(names[8], "grad_output");
    assert_eq!(names[9], "grad_h_n");
    assert_eq!(s.result_names(Direction::Backward)[2], "grad_weight_ih");
}
