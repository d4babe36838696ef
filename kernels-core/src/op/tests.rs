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

/// A valid value for a required attribute, so every op can be built with defaults otherwise.
fn required_value(op: OpKind, attr: &str) -> &'static str {
    match (op, attr) {
        (OpKind::Scale, "factor") => "2.5",
        (OpKind::SvdLowrank, "rank") => "3",
        (OpKind::AdamwStep | OpKind::SgdStep, "lr") => "0.01",
        (OpKind::AdamwStep, "step") => "1",
        _ => panic!("{op}: no test value for required attribute {attr}"),
    }
}

/// The op with every attribute at its default and required ones from [`required_value`].
fn with_defaults(kind: OpKind) -> Op {
    let given: Vec<(&str, &str)> = kind
        .spec()
        .attrs
        .iter()
        .filter(|a| a.default == AttrDefault::Required)
        .map(|a| (a.name, required_value(kind, a.name)))
        .collect();
    Op::from_attrs(kind, &given).unwrap()
}

/// Published defaults are declared as decimals (f64), kernels take f32: compare as f32.
fn same_value(published: &AttrValue, used: &AttrValue) -> bool {
    match (published, used) {
        (AttrValue::Float(p), AttrValue::Float(u)) => *p as f32 == *u as f32,
        _ => published == used,
    }
}

/// The value every layer, optimizer and model default below must have: the published one.
fn published(kind: OpKind, attr: &str) -> AttrValue {
    match kind.spec().attrs.into_iter().find(|a| a.name == attr) {
        Some(AttrSpec {
            default: AttrDefault::Value(v),
            ..
        }) => v,
        other => panic!("{kind}.{attr} publishes no default value: {other:?}"),
    }
}

fn assert_published(kind: OpKind, attr: &str, used: AttrValue, what: &str) {
    let p = published(kind, attr);
    assert!(
        same_value(&p, &used),
        "{what} uses {kind}.{attr} = {used}, the published default is {p}"
    );
}

/// What an op built from defaults holds (what its kernel runs with) is what the spec publishes
/// (what `kernels ops`, the README and the docs say), and each published default parses back
/// through `from_attrs`, passing the attribute's checks.
#[test]
fn kernels_run_with_the_published_defaults() {
    for kind in OpKind::ALL {
        let op = with_defaults(*kind);
        let listed = op.attrs();
        for a in kind.spec().attrs {
            let used = listed.iter().find(|(n, _)| *n == a.name).map(|(_, v)| v);
            match (&a.default, used) {
                (AttrDefault::Value(p), Some(u)) => assert!(
                    same_value(p, u),
                    "{kind}.{}: published {p}, built with {u}",
                    a.name
                ),
                (AttrDefault::Value(p), None) => panic!("{kind}.{}: {p} is not listed", a.name),
                (AttrDefault::Derived(_), Some(u)) => {
                    panic!("{kind}.{}: derived, but built with {u}", a.name)
                }
                (AttrDefault::Derived(_), None) | (AttrDefault::Required, Some(_)) => {}
                (AttrDefault::Required, None) => panic!("{kind}.{}: not listed", a.name),
            }
            if let AttrDefault::Value(p) = &a.default {
                let text = format!("{p}");
                let mut given: Vec<(&str, &str)> = alloc::vec![(a.name, text.as_str())];
                given.extend(
                    kind.spec()
                        .attrs
                        .iter()
                        .filter(|r| r.default == AttrDefault::Required)
                        .map(|r| (r.name, required_value(*kind, r.name))),
                );
                assert_eq!(
                    Op::from_attrs(*kind, &given).unwrap(),
                    op,
                    "{kind}.{}={text}",
                    a.name
                );
            }
        }
    }
    // The named constants are the published defaults.
    use AttrValue::{Bool, Float, Int};
    let consts = [
        (OpKind::Softmax, "causal", Bool(SOFTMAX_CAUSAL)),
        (OpKind::LogSoftmax, "causal", Bool(LOG_SOFTMAX_CAUSAL)),
        (OpKind::LayerNorm, "eps", Float(LAYER_NORM_EPS.into())),
        (OpKind::RmsNorm, "eps", Float(RMS_NORM_EPS.into())),
        (OpKind::Rope, "theta", Float(ROPE_THETA.into())),
        (OpKind::Attention, "causal", Bool(ATTENTION_CAUSAL)),
        (
            OpKind::Sample,
            "temperature",
            Float(SAMPLE_TEMPERATURE.into()),
        ),
        (OpKind::Sample, "top_k", Int(SAMPLE_TOP_K as u64)),
        (OpKind::Sample, "top_p", Float(SAMPLE_TOP_P.into())),
        (
            OpKind::SvdLowrank,
            "power_iters",
            Int(SVD_POWER_ITERS as u64),
        ),
        (OpKind::AdamwStep, "beta1", Float(ADAMW_BETA1.into())),
        (OpKind::AdamwStep, "beta2", Float(ADAMW_BETA2.into())),
        (OpKind::AdamwStep, "eps", Float(ADAMW_EPS.into())),
        (
            OpKind::AdamwStep,
            "weight_decay",
            Float(ADAMW_WEIGHT_DECAY.into()),
        ),
        (OpKind::SgdStep, "momentum", Float(SGD_MOMENTUM.into())),
        (
            OpKind::SgdStep,
            "weight_decay",
            Float(SGD_WEIGHT_DECAY.into()),
        ),
        (OpKind::SgdStep, "nesterov", Bool(SGD_NESTEROV)),
    ];
    for (kind, attr, v) in consts {
        assert_published(kind, attr, v, "its constant");
    }
}

/// The optimizers, layers and models that build ops themselves start from the published
/// defaults, so `AdamW::new(lr)` runs the same `adamw_step` as `kernels run adamw_step
/// --attr lr=... --attr step=...`.
#[test]
fn optimizers_and_models_use_the_published_defaults() {
    use crate::models::llama::{LlamaConfig, Sampling};
    use crate::optim::{AdamW, Sgd};
    use AttrValue::Float;

    let adamw = AdamW::new(0.01);
    assert_eq!(
        Op::AdamwStep {
            lr: adamw.lr,
            beta1: adamw.beta1,
            beta2: adamw.beta2,
            eps: adamw.eps,
            weight_decay: adamw.weight_decay,
            step: 1,
        },
        with_defaults(OpKind::AdamwStep),
        "AdamW::new"
    );
    let sgd = Sgd::new(0.01);
    assert_eq!(
        Op::SgdStep {
            lr: sgd.lr,
            momentum: sgd.momentum,
            weight_decay: sgd.weight_decay,
            nesterov: sgd.nesterov,
        },
        with_defaults(OpKind::SgdStep),
        "Sgd::new"
    );

    // A config.json that leaves rms_norm_eps and rope_theta out gets the ops' defaults.
    let cfg = LlamaConfig::from_json(
        r#"{"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
            "num_attention_heads": 2, "vocab_size": 11}"#,
    )
    .unwrap();
    let what = "LlamaConfig::from_json";
    assert_published(OpKind::RmsNorm, "eps", Float(cfg.rms_norm_eps.into()), what);
    assert_published(OpKind::Rope, "theta", Float(cfg.rope_theta.into()), what);

    // Greedy by default (temperature 0), otherwise sample's defaults: no top-k, no top-p cut.
    let s = Sampling::default();
    let what = "Sampling::default";
    assert_published(
        OpKind::Sample,
        "top_k",
        AttrValue::Int(s.top_k as u64),
        what,
    );
    assert_published(OpKind::Sample, "top_p", Float(s.top_p.into()), what);
}

#[test]
fn backward_arg_names_follow_the_convention() {
    let s = OpKind::GruSequence.spec();
    let names = s.arg_names(Direction::Backward);
    assert_eq!(names.len(), 6 + 2 + 2);
    assert_eq!(names[6], "output");
    assert_eq!(names[7], "h_n");
    assert_eq!(names[8], "grad_output");
    assert_eq!(names[9], "grad_h_n");
    assert_eq!(s.result_names(Direction::Backward)[2], "grad_weight_ih");
    let kind = OpKind::GruSequence;
    assert_eq!(kind.arg_count(Direction::Forward), 6);
    assert_eq!(kind.arg_name(Direction::Forward, 6), None);
    assert_eq!(kind.arg_name(Direction::Backward, 10), None);
    for kind in OpKind::ALL {
        for dir in [Direction::Forward, Direction::Backward] {
            let names = kind.spec().arg_names(dir);
            assert_eq!(names.len(), kind.arg_count(dir), "{kind:?} {dir:?}");
        }
    }
}

#[test]
fn a_wrong_dtype_is_named_by_its_slot_in_either_direction() {
    use crate::tensor::DType;
    let op = Op::Matmul {
        trans_a: false,
        trans_b: false,
    };
    let (f, i) = (DType::F32, DType::I32);
    assert!(
        op.check_signature(Direction::Backward, &[f, f, f, f])
            .is_ok()
    );
    for (dir, dtypes, slot) in [
        (Direction::Forward, &[f, i][..], "b"),
        (Direction::Backward, &[f, f, i, f][..], "out"),
        (Direction::Backward, &[f, f, f, i][..], "grad_out"),
    ] {
        match op.check_signature(dir, dtypes) {
            Err(Error::DTypeMismatch { tensor, got, .. }) => {
                assert_eq!((tensor.as_str(), got), (slot, i), "{dir:?}");
            }
            other => panic!("{dir:?} {dtypes:?}: {other:?}"),
        }
    }
    let e = op.check_signature(Direction::Forward, &[f]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Arity {
                expected: 2,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = Op::Argmax
        .check_signature(Direction::Backward, &[f, i, i])
        .unwrap_err();
    assert!(matches!(e, Error::NoBackward { .. }), "{e}");
}

#[test]
fn attr_args_split_at_the_first_equals_and_name_what_is_wrong() {
    let op = Op::from_attr_args(OpKind::Scale, &[" factor = 2.5 "]).unwrap();
    assert_eq!(op, Op::Scale { factor: 2.5 });
    let e = Op::from_attr_args(OpKind::Scale, &["factor"]).unwrap_err();
    assert!(matches!(e, Error::AttrSyntax { op: "scale", .. }), "{e}");
    let e = Op::from_attr_args(OpKind::Scale, &["factor=1", "factor=2"]).unwrap_err();
    assert!(e.to_string().contains("more than once"), "{e}");
    let e = Op::from_attr_args(OpKind::Scale, &["bogus=1"]).unwrap_err();
    assert!(matches!(e, Error::UnknownAttr { .. }), "{e}");
    // `=` inside a value stays in the value (and fails the float parse, naming it).
    let e = Op::from_attr_args(OpKind::Scale, &["factor=1=2"]).unwrap_err();
    assert!(e.to_string().contains("1=2"), "{e}");
}
