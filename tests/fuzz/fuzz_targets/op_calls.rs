//! Random op calls on the CPU backend: any op, attributes from edge-case pools, inputs of
//! arbitrary small shapes (empty ones included) holding NaN, infinities, signed zeros and
//! out-of-range ids, forward or backward. The fast CPU backend (`CpuBackend::new`) must never
//! panic and must agree with the reference kernels (`CpuBackend::reference`): both refuse, or
//! both answer with the same shapes, the same NaN and infinity positions and values within the
//! op's budget (integers exactly).
#![no_main]

use arbitrary::Arbitrary;
use kernels_core::numerics::compare;
use kernels_core::op::{AttrKind, InputKind};
use kernels_core::{Backend, CpuBackend, DType, Direction, Op, OpKind, Tensor};
use libfuzzer_sys::fuzz_target;

/// Values of float inputs: dyadic numbers (sums of a few stay exact, so summation order
/// cannot make the paths differ) and the special values.
const FLOATS: [f32; 16] = [
    0.0,
    0.5,
    -0.5,
    1.0,
    -1.0,
    2.0,
    -2.0,
    0.25,
    3.0,
    -3.0,
    0.125,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    -0.0,
    1.5,
];
/// Float attribute values, as `kernels op --attr` would be given them.
const FLOAT_ATTRS: [&str; 14] = [
    "0", "1", "-1", "0.5", "2", "0.9", "1e-5", "10000", "NaN", "inf", "-inf", "1e30", "-0", "0.999",
];
const INT_ATTRS: [&str; 12] = [
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "7",
    "8",
    "13",
    "64",
    "65",
    "4294967296",
];
/// Most input elements per call (keeps each run in microseconds).
const MAX_ELEMS: usize = 4096;

#[derive(Debug, Arbitrary)]
enum AttrPick {
    Bool(bool),
    Int(u8),
    Float(u8),
    Choice(u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    dims: Vec<u8>,
    values: Vec<u8>,
    i64_ids: bool,
}

#[derive(Debug, Arbitrary)]
struct Call {
    kind: u8,
    attrs: Vec<(u8, AttrPick)>,
    inputs: Vec<Input>,
    backward: bool,
}

fn attr_text(kind: &AttrKind, pick: &AttrPick) -> String {
    match (kind, pick) {
        (AttrKind::Bool, AttrPick::Bool(b)) => b.to_string(),
        (AttrKind::Choice(c), AttrPick::Choice(i)) => c[*i as usize % c.len()].to_string(),
        (_, AttrPick::Int(i)) => INT_ATTRS[*i as usize % INT_ATTRS.len()].to_string(),
        (_, AttrPick::Float(i)) => FLOAT_ATTRS[*i as usize % FLOAT_ATTRS.len()].to_string(),
        (_, AttrPick::Bool(b)) => b.to_string(),
        (_, AttrPick::Choice(i)) => i.to_string(),
    }
}

fn tensor(input: Option<&Input>, kind: InputKind) -> Option<Tensor> {
    let empty = Input {
        dims: Vec::new(),
        values: Vec::new(),
        i64_ids: false,
    };
    let input = input.unwrap_or(&empty);
    let shape: Vec<usize> = input
        .dims
        .iter()
        .take(5)
        .map(|d| *d as usize % 10)
        .collect();
    let n: usize = shape.iter().product();
    if n > MAX_ELEMS {
        return None;
    }
    let v = |i: usize| {
        input
            .values
            .get(i % input.values.len().max(1))
            .copied()
            .unwrap_or(0)
    };
    match kind {
        // Weight slots get f32 here (the weight dtypes are the parity suite's).
        InputKind::Float | InputKind::Weight => Tensor::from_f32(
            &shape,
            (0..n)
                .map(|i| FLOATS[v(i) as usize % FLOATS.len()])
                .collect(),
        )
        .ok(),
        // -1..=10: most ops' ids fall in range, some do not.
        InputKind::Int if input.i64_ids => {
            Tensor::from_i64(&shape, (0..n).map(|i| (v(i) % 12) as i64 - 1).collect()).ok()
        }
        InputKind::Int => {
            Tensor::from_i32(&shape, (0..n).map(|i| (v(i) % 12) as i32 - 1).collect()).ok()
        }
    }
}

fuzz_target!(|call: Call| {
    let kind = OpKind::ALL[call.kind as usize % OpKind::ALL.len()];
    let spec = kind.spec();
    let mut args = Vec::new();
    if !spec.attrs.is_empty() {
        for (i, pick) in &call.attrs {
            let a = &spec.attrs[*i as usize % spec.attrs.len()];
            let text = format!("{}={}", a.name, attr_text(&a.kind, pick));
            if !args
                .iter()
                .any(|s: &String| s.split('=').next() == Some(a.name))
            {
                args.push(text);
            }
        }
    }
    let Ok(op) = Op::from_attr_args(kind, &args) else {
        return;
    };
    let mut inputs = Vec::new();
    for (i, s) in spec.inputs.iter().enumerate() {
        let Some(t) = tensor(call.inputs.get(i), s.kind) else {
            return;
        };
        inputs.push(t);
    }
    let reference = CpuBackend::reference();
    let fast = CpuBackend::new();
    let dir = if call.backward && spec.differentiable() {
        Direction::Backward
    } else {
        Direction::Forward
    };
    if dir == Direction::Backward {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let Ok(outs) = reference.run(&op, Direction::Forward, &refs) else {
            return;
        };
        // Grad outputs of dyadic values too: seeded normal ones made a matmul backward's
        // cancelling sums depend on the summation order beyond the per-element budget (the
        // first crash this target found: an oracle too strict, not a kernel bug).
        let grads: Vec<Tensor> = outs
            .iter()
            .enumerate()
            .map(|(j, o)| {
                let v = (0..o.numel()).map(|i| FLOATS[(i * 7 + j) % 11]).collect();
                Tensor::from_f32(o.shape(), v).expect("grad output")
            })
            .collect();
        inputs.extend(outs);
        inputs.extend(grads);
    }
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = reference.run(&op, dir, &refs);
    let got = fast.run(&op, dir, &refs);
    let (want, got) = match (want, got) {
        (Err(_), Err(_)) => return,
        (Ok(w), Ok(g)) => (w, g),
        (w, g) => panic!(
            "{op} {dir:?}: the reference {:?}, the fast backend {:?}",
            w.map(|_| "answered"),
            g.map(|_| "answered")
        ),
    };
    let shapes: Vec<&[usize]> = inputs
        .iter()
        .take(spec.inputs.len())
        .map(|t| t.shape())
        .collect();
    let budget = match dir {
        Direction::Forward => spec.budget,
        Direction::Backward => spec.budget_backward,
    };
    let (atol, rtol) = budget.at(op.reduced_len(&shapes));
    assert_eq!(want.len(), got.len(), "{op}: result count");
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(w.shape(), g.shape(), "{op} {dir:?} result {i}: shape");
        assert_eq!(w.dtype(), g.dtype(), "{op} {dir:?} result {i}: dtype");
        if w.dtype() == DType::F32 {
            let c = compare(g.as_f32().unwrap(), w.as_f32().unwrap(), atol, rtol);
            assert!(
                c.pass,
                "{op} {dir:?} result {i}: {c:?}\n got {:?}\nwant {:?}",
                g.as_f32().unwrap(),
                w.as_f32().unwrap()
            );
        } else {
            assert_eq!(
                w.to_i64_vec().unwrap(),
                g.to_i64_vec().unwrap(),
                "{op} {dir:?} result {i}"
            );
        }
    }
});
