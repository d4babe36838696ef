//! Reverse-mode automatic differentiation on a tape, written once against `dyn Backend`.
//!
//! A [`Graph`] records every op applied to its [`Var`]s. [`Graph::backward`] walks the tape in
//! reverse and runs each recorded op's *backward direction* on the same backend
//! (`backend.run(op, Direction::Backward, inputs ++ outputs ++ grad_outputs)`, see
//! [`crate::op`]), so training runs wherever the forward ran and no backward rule is written
//! twice. Gradients of a value used several times are summed with the `add` op on the backend;
//! an op output that received no gradient gets `backend.zeros(shape)`.
//!
//! Only ops with at least one input that requires a gradient are recorded, and backward only
//! runs the recorded ops whose outputs lead to the value being differentiated: nodes on a path
//! from a parameter to the loss. [`Graph::inference`] records nothing at all.
//!
//! Mixing devices is an error ([`Error::DeviceMismatch`]), never a silent copy.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::op::{Activation, BinaryOp, Direction, GeluApprox, Op, ReduceOp, UnaryOp};
use crate::tensor::{DType, Tensor};

/// The attributes of [`Graph::attention_with`] (the `attention` op's, by name).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionAttrs {
    pub causal: bool,
    /// `None`: `1/sqrt(head_dim)`.
    pub scale: Option<f32>,
    /// Valid keys of a preallocated cache (0: all).
    pub kv_len: usize,
    /// Sliding window (0: none).
    pub window: usize,
}

/// Graph identities, so a [`Var`] of one graph is refused by another.
static NEXT_GRAPH: AtomicUsize = AtomicUsize::new(1);

/// A value in a [`Graph`]: a tensor on the graph's device plus its place on the tape.
///
/// Cloning is cheap (the tensor's storage is shared).
#[derive(Debug, Clone)]
pub struct Var {
    graph: usize,
    id: usize,
    tensor: Tensor,
    requires_grad: bool,
}

impl Var {
    /// The value.
    pub fn tensor(&self) -> &Tensor {
        &self.tensor
    }
    /// The value's shape.
    pub fn shape(&self) -> &[usize] {
        self.tensor.shape()
    }
    /// The value's element type.
    pub fn dtype(&self) -> DType {
        self.tensor.dtype()
    }
    /// True when gradients flow to this value (it is a parameter or depends on one).
    pub fn requires_grad(&self) -> bool {
        self.requires_grad
    }
    /// Identity within its graph (stable for the graph's lifetime).
    pub fn id(&self) -> usize {
        self.id
    }
}

/// The key of a [`Var`] in [`Gradients`]: (graph, var).
pub type VarKey = (usize, usize);

/// One recorded step of the tape.
#[derive(Debug)]
enum Node {
    /// An op application. `inputs` and `outputs` keep the values the backward needs.
    Op {
        op: Op,
        inputs: Vec<Var>,
        outputs: Vec<Var>,
    },
    /// A reshape view: the gradient is reshaped back to the input's shape.
    Reshape { input: Var, output: Var },
}

#[derive(Debug, Default)]
struct Tape {
    nodes: Vec<Node>,
    /// Names of parameters bound by name (from a parameter store), by var id.
    names: BTreeMap<usize, String>,
    next_id: usize,
}

/// A tape of ops on one backend. See the module docs.
pub struct Graph {
    backend: Rc<dyn Backend>,
    id: usize,
    recording: bool,
    tape: RefCell<Tape>,
}

impl core::fmt::Debug for Graph {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Graph")
            .field("backend", &self.backend.name())
            .field("id", &self.id)
            .field("recording", &self.recording)
            .field("nodes", &self.tape.borrow().nodes.len())
            .finish()
    }
}

impl Graph {
    fn with_mode(backend: Rc<dyn Backend>, recording: bool) -> Graph {
        Graph {
            backend,
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            recording,
            tape: RefCell::new(Tape::default()),
        }
    }

    /// A graph that records ops for [`Graph::backward`].
    pub fn new(backend: Rc<dyn Backend>) -> Graph {
        Graph::with_mode(backend, true)
    }

    /// A graph that records nothing (no tape growth); [`Graph::backward`] is an error.
    /// Parameters behave as constants.
    pub fn inference(backend: Rc<dyn Backend>) -> Graph {
        Graph::with_mode(backend, false)
    }

    /// The backend every op of this graph runs on.
    pub fn backend(&self) -> &Rc<dyn Backend> {
        &self.backend
    }

    /// True for [`Graph::new`], false for [`Graph::inference`].
    pub fn is_recording(&self) -> bool {
        self.recording
    }

    /// Number of recorded tape entries (always 0 in inference mode).
    pub fn tape_len(&self) -> usize {
        self.tape.borrow().nodes.len()
    }

    fn fresh(&self, tensor: Tensor, requires_grad: bool) -> Var {
        let mut tape = self.tape.borrow_mut();
        let id = tape.next_id;
        tape.next_id += 1;
        Var {
            graph: self.id,
            id,
            tensor,
            requires_grad,
        }
    }

    fn check_device(&self, op: &'static str, t: &Tensor) -> Result<()> {
        t.check_device(op, self.backend.device())
    }

    fn check_var(&self, op: &'static str, v: &Var) -> Result<()> {
        if v.graph != self.id {
            return Err(Error::Autograd {
                why: format!(
                    "{op}: var {} belongs to graph {}, not to this graph {}",
                    v.id, v.graph, self.id
                ),
            });
        }
        self.check_device(op, &v.tensor)
    }

    /// A leaf that receives a gradient (a constant in inference mode).
    pub fn param(&self, tensor: Tensor) -> Result<Var> {
        self.check_device("param", &tensor)?;
        let recording = self.recording && !tensor.dtype().is_int();
        Ok(self.fresh(tensor, recording))
    }

    /// A parameter bound by name: its gradient is also reported by that name
    /// ([`Gradients::get_named`]).
    pub fn param_named(&self, name: &str, tensor: Tensor) -> Result<Var> {
        let v = self.param(tensor)?;
        if v.requires_grad {
            self.tape.borrow_mut().names.insert(v.id, name.into());
        }
        Ok(v)
    }

    /// A leaf without gradient (inputs, targets, ids).
    pub fn constant(&self, tensor: Tensor) -> Result<Var> {
        self.check_device("constant", &tensor)?;
        Ok(self.fresh(tensor, false))
    }

    /// The same value as a constant: gradients stop here.
    pub fn detach(&self, v: &Var) -> Result<Var> {
        self.check_var("detach", v)?;
        Ok(self.fresh(v.tensor.clone(), false))
    }

    /// Applies `op` to `inputs` (in the op's input order) and returns its outputs.
    pub fn apply(&self, op: &Op, inputs: &[&Var]) -> Result<Vec<Var>> {
        for v in inputs {
            self.check_var(op.name(), v)?;
        }
        let tensors: Vec<&Tensor> = inputs.iter().map(|v| &v.tensor).collect();
        let outs = self.backend.run(op, Direction::Forward, &tensors)?;
        for t in &outs {
            self.check_device(op.name(), t)?;
        }
        let kind = op.kind();
        let needs_grad = self.recording
            && kind.grad_inputs().iter().any(|g| {
                kind.inputs()
                    .iter()
                    .position(|s| s.name == *g)
                    .and_then(|i| inputs.get(i))
                    .is_some_and(|v| v.requires_grad)
            });
        let outputs: Vec<Var> = outs
            .into_iter()
            .map(|t| {
                let rg = needs_grad && !t.dtype().is_int();
                self.fresh(t, rg)
            })
            .collect();
        if needs_grad {
            self.tape.borrow_mut().nodes.push(Node::Op {
                op: *op,
                inputs: inputs.iter().map(|v| (*v).clone()).collect(),
                outputs: outputs.clone(),
            });
        }
        Ok(outputs)
    }

    fn apply1(&self, op: Op, inputs: &[&Var]) -> Result<Var> {
        let mut outs = self.apply(&op, inputs)?;
        match (outs.pop(), outs.is_empty()) {
            (Some(v), true) => Ok(v),
            _ => Err(Error::Autograd {
                why: format!("{}: expected one output", op.name()),
            }),
        }
    }

    /// A view of `x` with a new shape (same element count). Not an op: its backward reshapes
    /// the gradient back.
    pub fn reshape(&self, x: &Var, shape: &[usize]) -> Result<Var> {
        self.check_var("reshape", x)?;
        let t = x.tensor.reshape(shape)?;
        let rg = self.recording && x.requires_grad;
        let out = self.fresh(t, rg);
        if rg {
            self.tape.borrow_mut().nodes.push(Node::Reshape {
                input: x.clone(),
                output: out.clone(),
            });
        }
        Ok(out)
    }

    // ---- one convenience method per op of the vocabulary ----

    /// `a @ b` (batched over leading dims).
    pub fn matmul(&self, a: &Var, b: &Var) -> Result<Var> {
        self.matmul_t(a, b, false, false)
    }
    /// `op(a) @ op(b)` where `op` transposes the last two dims when asked.
    pub fn matmul_t(&self, a: &Var, b: &Var, trans_a: bool, trans_b: bool) -> Result<Var> {
        self.apply1(Op::Matmul { trans_a, trans_b }, &[a, b])
    }
    /// `act(x @ weight^T + bias)` as one op (one fused kernel on a device).
    pub fn linear(&self, x: &Var, weight: &Var, bias: &Var, activation: Activation) -> Result<Var> {
        self.apply1(Op::Linear { activation }, &[x, weight, bias])
    }
    /// `a + b` (`b` broadcasts over `a`'s leading dims).
    pub fn add(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Binary(BinaryOp::Add), &[a, b])
    }
    /// `a - b` (`b` broadcasts over `a`'s leading dims).
    pub fn sub(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Binary(BinaryOp::Sub), &[a, b])
    }
    /// `a * b` (`b` broadcasts over `a`'s leading dims).
    pub fn mul(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Binary(BinaryOp::Mul), &[a, b])
    }
    /// `a / b` (`b` broadcasts over `a`'s leading dims).
    pub fn div(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Binary(BinaryOp::Div), &[a, b])
    }
    /// `x * factor`.
    pub fn scale(&self, x: &Var, factor: f32) -> Result<Var> {
        self.apply1(Op::Scale { factor }, &[x])
    }
    fn unary(&self, u: UnaryOp, x: &Var) -> Result<Var> {
        self.apply1(Op::Unary(u), &[x])
    }
    /// `-x`.
    pub fn neg(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Neg, x)
    }
    /// `exp(x)`.
    pub fn exp(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Exp, x)
    }
    /// `ln(x)`.
    pub fn log(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Log, x)
    }
    /// `sqrt(x)`.
    pub fn sqrt(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Sqrt, x)
    }
    /// `max(x, 0)`.
    pub fn relu(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Relu, x)
    }
    /// `1 / (1 + exp(-x))`.
    pub fn sigmoid(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Sigmoid, x)
    }
    /// `tanh(x)`.
    pub fn tanh(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Tanh, x)
    }
    /// `x * sigmoid(x)`.
    pub fn silu(&self, x: &Var) -> Result<Var> {
        self.unary(UnaryOp::Silu, x)
    }
    /// `silu(gate) * up` as one op (`swiglu`).
    pub fn swiglu(&self, gate: &Var, up: &Var) -> Result<Var> {
        self.apply1(Op::Swiglu, &[gate, up])
    }
    /// `F.gelu(x)` (exact erf form).
    pub fn gelu(&self, x: &Var) -> Result<Var> {
        self.gelu_with(x, GeluApprox::None)
    }
    /// `F.gelu(x, approximate=...)`.
    pub fn gelu_with(&self, x: &Var, approximate: GeluApprox) -> Result<Var> {
        self.apply1(Op::Gelu { approximate }, &[x])
    }
    /// Softmax over the last dim, optionally causal.
    pub fn softmax(&self, x: &Var, causal: bool) -> Result<Var> {
        self.apply1(Op::Softmax { causal }, &[x])
    }
    /// Log-softmax over the last dim, optionally causal.
    pub fn log_softmax(&self, x: &Var, causal: bool) -> Result<Var> {
        self.apply1(Op::LogSoftmax { causal }, &[x])
    }
    /// `F.layer_norm` over the last dim.
    pub fn layer_norm(&self, x: &Var, weight: &Var, bias: &Var, eps: f32) -> Result<Var> {
        self.apply1(Op::LayerNorm { eps }, &[x, weight, bias])
    }
    /// RMS norm over the last dim.
    pub fn rms_norm(&self, x: &Var, weight: &Var, eps: f32) -> Result<Var> {
        self.apply1(Op::RmsNorm { eps }, &[x, weight])
    }
    /// Rotary position embedding with the attributes of `op` (a `rope` op: scaled frequencies).
    pub fn rope_with(&self, x: &Var, op: Op) -> Result<Var> {
        if !matches!(op, Op::Rope { .. }) {
            return Err(Error::Autograd {
                why: format!("rope_with: `{}` is not a rope op", op.name()),
            });
        }
        self.apply1(op, &[x])
    }
    /// Rotary position embedding of x `[batch, heads, seq, head_dim]`.
    pub fn rope(&self, x: &Var, theta: f32, offset: usize, interleaved: bool) -> Result<Var> {
        self.apply1(Op::rope(theta, offset, interleaved), &[x])
    }
    /// Rows of `weight` picked by integer `ids`.
    pub fn embedding(&self, ids: &Var, weight: &Var) -> Result<Var> {
        self.apply1(Op::Embedding, &[ids, weight])
    }
    /// Sum over the last dim.
    pub fn sum(&self, x: &Var) -> Result<Var> {
        self.apply1(Op::Reduce(ReduceOp::Sum), &[x])
    }
    /// Mean over the last dim.
    pub fn mean(&self, x: &Var) -> Result<Var> {
        self.apply1(Op::Reduce(ReduceOp::Mean), &[x])
    }
    /// Max over the last dim (gradient to the first maximum).
    pub fn max(&self, x: &Var) -> Result<Var> {
        self.apply1(Op::Reduce(ReduceOp::Max), &[x])
    }
    /// Swaps the last two dims.
    pub fn transpose(&self, x: &Var) -> Result<Var> {
        self.apply1(Op::Transpose, &[x])
    }
    /// Concatenates on the last dim.
    pub fn concat(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Concat, &[a, b])
    }
    /// Scaled dot-product attention (GQA when `k`, `v` have fewer heads than `q`);
    /// `scale` `None` means `1/sqrt(head_dim)`.
    pub fn attention(
        &self,
        q: &Var,
        k: &Var,
        v: &Var,
        causal: bool,
        scale: Option<f32>,
    ) -> Result<Var> {
        self.apply1(
            Op::Attention {
                causal,
                scale,
                kv_len: 0,
                window: 0,
            },
            &[q, k, v],
        )
    }
    /// The `attention` op with every attribute given: the first `kv_len` keys of `k` and `v`
    /// (0: all; a preallocated KV cache), each query seeing its last `window` keys (0: all).
    pub fn attention_with(&self, q: &Var, k: &Var, v: &Var, attrs: AttentionAttrs) -> Result<Var> {
        self.apply1(
            Op::Attention {
                causal: attrs.causal,
                scale: attrs.scale,
                kv_len: attrs.kv_len,
                window: attrs.window,
            },
            &[q, k, v],
        )
    }
    /// Attention over the first `kv_len` keys of `k` and `v` (a preallocated KV cache holding
    /// `kv_len` positions; 0 reads them all).
    pub fn attention_prefix(
        &self,
        q: &Var,
        k: &Var,
        v: &Var,
        causal: bool,
        kv_len: usize,
    ) -> Result<Var> {
        self.apply1(
            Op::Attention {
                causal,
                scale: None,
                kv_len,
                window: 0,
            },
            &[q, k, v],
        )
    }
    /// `cache` with `rows` written at positions `pos..` of its second-to-last dim (`kv_write`).
    ///
    /// `cache` is taken by value: in an inference graph it is donated
    /// ([`Backend::run_donated`]), so when no other tensor shares its storage the rows are
    /// written in place and the result shares that storage (no copy of the cache). In a
    /// recording graph the op is applied like any other (out of place) and is differentiable.
    pub fn kv_write(&self, cache: Var, rows: &Var, pos: usize) -> Result<Var> {
        self.apply_donated(Op::KvWrite { pos }, cache, &[rows])
    }
    /// `silu(x @ gate^T) * (x @ up^T)` for `weight = [gate; up]` `[2 n, in]` (`matmul_swiglu`:
    /// a SwiGLU MLP's gate and up projections as one product, gated in its epilogue).
    pub fn matmul_swiglu(&self, x: &Var, weight: &Var) -> Result<Var> {
        self.apply1(Op::MatmulSwiglu, &[x, weight])
    }

    /// `residual + op(a) @ op(b)` (`matmul_add`: the residual add in the product's epilogue).
    ///
    /// `residual` is taken by value, as `kv_write`'s cache: in an inference graph it is donated,
    /// so when no other tensor shares its storage the product is accumulated into it (one
    /// kernel, no separate add). In a recording graph it is an ordinary differentiable op.
    pub fn matmul_add(
        &self,
        residual: Var,
        a: &Var,
        b: &Var,
        trans_a: bool,
        trans_b: bool,
    ) -> Result<Var> {
        self.apply_donated(Op::MatmulAdd { trans_a, trans_b }, residual, &[a, b])
    }
    /// An op whose first input may be donated ([`crate::op::OpKind::donated_inputs`]):
    /// [`Backend::run_donated`] in an inference graph, [`Graph::apply1`] in a recording one.
    fn apply_donated(&self, op: Op, first: Var, rest: &[&Var]) -> Result<Var> {
        let mut outs = self.apply_donating(op, alloc::vec![first], rest)?;
        match (outs.pop(), outs.is_empty()) {
            (Some(v), true) => Ok(v),
            _ => Err(Error::Autograd {
                why: format!("{}: expected one output", op.name()),
            }),
        }
    }
    /// An op whose leading inputs may be donated ([`crate::op::OpKind::donated_inputs`]): all
    /// its outputs.
    fn apply_donating(&self, op: Op, donated: Vec<Var>, rest: &[&Var]) -> Result<Vec<Var>> {
        if self.recording {
            let mut all: Vec<&Var> = donated.iter().collect();
            all.extend_from_slice(rest);
            return self.apply(&op, &all);
        }
        for v in donated.iter().chain(rest.iter().copied()) {
            self.check_var(op.name(), v)?;
        }
        let rest: Vec<&Tensor> = rest.iter().map(|v| &v.tensor).collect();
        let donated = donated.into_iter().map(|v| v.tensor).collect();
        let outs = self.backend.run_donated(&op, donated, &rest)?;
        outs.into_iter()
            .map(|t| {
                self.check_device(op.name(), &t)?;
                Ok(self.fresh(t, false))
            })
            .collect()
    }
    /// `rope_kv_write` (see [`Op::RopeKvWrite`]; `op` is one): the caches are taken by value, as
    /// `kv_write`'s, so in an inference graph they are written in place when nothing else
    /// holds them. Returns `(k_cache, v_cache, q)`.
    pub fn rope_kv_write(
        &self,
        k_cache: Var,
        v_cache: Var,
        qkv: &Var,
        op: Op,
    ) -> Result<(Var, Var, Var)> {
        if !matches!(op, Op::RopeKvWrite { .. }) {
            return Err(Error::Autograd {
                why: format!("rope_kv_write: given the op {}", op.name()),
            });
        }
        let mut outs = self
            .apply_donating(op, alloc::vec![k_cache, v_cache], &[qkv])?
            .into_iter();
        match (outs.next(), outs.next(), outs.next(), outs.next()) {
            (Some(k), Some(v), Some(q), None) => Ok((k, v, q)),
            _ => Err(Error::Autograd {
                why: "rope_kv_write: expected three outputs".into(),
            }),
        }
    }
    /// One `torch.nn.GRUCell` step.
    pub fn gru_cell(
        &self,
        x: &Var,
        h: &Var,
        weight_ih: &Var,
        weight_hh: &Var,
        bias_ih: &Var,
        bias_hh: &Var,
    ) -> Result<Var> {
        self.apply1(Op::GruCell, &[x, h, weight_ih, weight_hh, bias_ih, bias_hh])
    }
    /// A one-layer `torch.nn.GRU` over x `[seq, batch, input]`: `(output, h_n)`.
    pub fn gru_sequence(
        &self,
        x: &Var,
        h0: &Var,
        weight_ih: &Var,
        weight_hh: &Var,
        bias_ih: &Var,
        bias_hh: &Var,
    ) -> Result<(Var, Var)> {
        self.apply2(
            &Op::GruSequence,
            &[x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
        )
    }
    /// `op`'s two outputs.
    fn apply2(&self, op: &Op, inputs: &[&Var]) -> Result<(Var, Var)> {
        let mut outs = self.apply(op, inputs)?;
        let second = outs.pop();
        let first = outs.pop();
        match (first, second, outs.is_empty()) {
            (Some(a), Some(b), true) => Ok((a, b)),
            _ => Err(Error::Autograd {
                why: format!("{}: expected two outputs", op.name()),
            }),
        }
    }
    /// An ensemble of one-layer GRUs over stacked weights (a leading member axis on every
    /// input; x `[members, seq, batch, input]`): `(output [members, seq, batch, hidden],
    /// h_n [members, batch, hidden])`.
    pub fn gru_ensemble(
        &self,
        x: &Var,
        h0: &Var,
        weight_ih: &Var,
        weight_hh: &Var,
        bias_ih: &Var,
        bias_hh: &Var,
    ) -> Result<(Var, Var)> {
        self.apply2(
            &Op::GruEnsemble,
            &[x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
        )
    }
    /// `F.cross_entropy(logits, targets)`, mean over rows.
    pub fn cross_entropy(&self, logits: &Var, targets: &Var) -> Result<Var> {
        self.apply1(Op::CrossEntropy, &[logits, targets])
    }
    /// `F.mse_loss(a, b)`, mean.
    pub fn mse(&self, a: &Var, b: &Var) -> Result<Var> {
        self.apply1(Op::Mse, &[a, b])
    }
    /// Index of the first maximum over the last dim (i32; no gradient).
    pub fn argmax(&self, x: &Var) -> Result<Var> {
        self.apply1(Op::Argmax, &[x])
    }

    // ---- backward ----

    /// Gradients of a one-element `loss` (seed 1.0) with respect to every parameter it
    /// depends on.
    pub fn backward(&self, loss: &Var) -> Result<Gradients> {
        if loss.tensor.numel() != 1 {
            return Err(Error::Autograd {
                why: format!(
                    "backward needs a one-element loss, got shape {:?}; use backward_with",
                    loss.shape()
                ),
            });
        }
        let seed = self.backend.upload(&Tensor::full(loss.shape(), 1.0)?)?;
        self.backward_with(loss, seed)
    }

    /// Gradients of `<grad, var>` with respect to every parameter `var` depends on: `grad` is
    /// the gradient flowing into `var`, shaped like it, on this graph's device.
    pub fn backward_with(&self, var: &Var, grad: Tensor) -> Result<Gradients> {
        if !self.recording {
            return Err(Error::Autograd {
                why: "backward on an inference graph (it records nothing)".into(),
            });
        }
        self.check_var("backward", var)?;
        self.check_device("backward", &grad)?;
        if grad.shape() != var.shape() {
            return Err(Error::mismatch("backward", var.shape(), grad.shape()));
        }
        if grad.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op: "backward",
                tensor: "grad".into(),
                expected: "f32",
                got: grad.dtype(),
            });
        }
        let tape = self.tape.borrow();
        let mut out = Gradients::new(self.backend.clone());
        if !var.requires_grad {
            // Nothing on the tape leads here: every gradient is absent (zero).
            return Ok(out);
        }
        let mut pending: BTreeMap<usize, Tensor> = BTreeMap::new();
        pending.insert(var.id, grad);
        let backend = &*self.backend;
        // Tape order is a topological order; outputs always have larger ids than inputs, so
        // nodes created after `var` cannot lead to it.
        for node in tape.nodes.iter().rev() {
            match node {
                Node::Reshape { input, output } => {
                    if let Some(g) = pending.remove(&output.id) {
                        let g = g.reshape(input.shape())?;
                        accumulate(backend, &mut pending, input.id, g)?;
                    }
                }
                Node::Op {
                    op,
                    inputs,
                    outputs,
                } => {
                    let received: Vec<Option<Tensor>> =
                        outputs.iter().map(|o| pending.remove(&o.id)).collect();
                    if received.iter().all(Option::is_none) {
                        continue;
                    }
                    // Outputs that received no gradient contribute zeros.
                    let grad_outs = received
                        .into_iter()
                        .zip(outputs)
                        .map(|(g, o)| match g {
                            Some(g) => Ok(g),
                            None => backend.zeros(o.shape()),
                        })
                        .collect::<Result<Vec<Tensor>>>()?;
                    let mut args: Vec<&Tensor> = inputs.iter().map(|v| &v.tensor).collect();
                    args.extend(outputs.iter().map(|v| &v.tensor));
                    args.extend(grad_outs.iter());
                    let grads = backend.run(op, Direction::Backward, &args)?;
                    let spec = op.spec();
                    if grads.len() != spec.grad_inputs.len() {
                        return Err(Error::Autograd {
                            why: format!(
                                "{}: backward returned {} gradients, expected {}",
                                op.name(),
                                grads.len(),
                                spec.grad_inputs.len()
                            ),
                        });
                    }
                    for (g, name) in grads.into_iter().zip(spec.grad_inputs) {
                        let input = spec
                            .inputs
                            .iter()
                            .position(|s| s.name == *name)
                            .and_then(|i| inputs.get(i));
                        if let Some(input) = input.filter(|v| v.requires_grad) {
                            if g.shape() != input.shape() {
                                return Err(Error::Autograd {
                                    why: format!(
                                        "{}: grad_{name} has shape {:?}, input has {:?}",
                                        op.name(),
                                        g.shape(),
                                        input.shape()
                                    ),
                                });
                            }
                            accumulate(backend, &mut pending, input.id, g)?;
                        }
                    }
                }
            }
        }
        // What is left are the leaves reached: the parameters.
        for (id, g) in pending {
            let key = (self.id, id);
            if let Some(name) = tape.names.get(&id) {
                out.by_name.insert(name.clone(), g.clone());
            }
            out.by_var.insert(key, g);
        }
        Ok(out)
    }
}

/// `pending[id] += g`, summing with the backend's `add` op.
fn accumulate(
    backend: &dyn Backend,
    pending: &mut BTreeMap<usize, Tensor>,
    id: usize,
    g: Tensor,
) -> Result<()> {
    let sum = match pending.remove(&id) {
        Some(prev) => add(backend, &prev, &g)?,
        None => g,
    };
    pending.insert(id, sum);
    Ok(())
}

fn add(backend: &dyn Backend, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.shape() != b.shape() {
        return Err(Error::mismatch(
            "gradient accumulation",
            a.shape(),
            b.shape(),
        ));
    }
    backend
        .run(&Op::Binary(BinaryOp::Add), Direction::Forward, &[a, b])?
        .pop()
        .ok_or_else(|| Error::Autograd {
            why: "add returned no output".into(),
        })
}

/// Gradients of one or more backward passes: by [`Var`] and, for parameters bound by name, by
/// name. They live on the graph's device.
#[derive(Clone)]
pub struct Gradients {
    backend: Rc<dyn Backend>,
    by_var: BTreeMap<VarKey, Tensor>,
    by_name: BTreeMap<String, Tensor>,
}

impl core::fmt::Debug for Gradients {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gradients")
            .field("backend", &self.backend.name())
            .field("vars", &self.by_var.len())
            .field("names", &self.by_name.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Gradients {
    /// No gradients yet, on `backend` (start of an accumulation).
    pub fn new(backend: Rc<dyn Backend>) -> Gradients {
        Gradients {
            backend,
            by_var: BTreeMap::new(),
            by_name: BTreeMap::new(),
        }
    }
    /// Gradients by parameter name only, already on `backend` (e.g. an all-reduced gradient
    /// uploaded for an optimizer step; see [`crate::parallel`]). By var it holds none.
    pub fn from_named(backend: Rc<dyn Backend>, by_name: BTreeMap<String, Tensor>) -> Gradients {
        Gradients {
            backend,
            by_var: BTreeMap::new(),
            by_name,
        }
    }
    /// The gradient of `v`, or `None` when no gradient reached it (it is zero).
    pub fn get(&self, v: &Var) -> Option<&Tensor> {
        self.by_var.get(&(v.graph, v.id))
    }
    /// The gradient of the parameter bound under `name`, if any reached it.
    pub fn get_named(&self, name: &str) -> Option<&Tensor> {
        self.by_name.get(name)
    }
    /// Gradients by parameter name.
    pub fn named(&self) -> &BTreeMap<String, Tensor> {
        &self.by_name
    }
    /// Number of vars with a gradient.
    pub fn len(&self) -> usize {
        self.by_var.len()
    }
    /// True when no gradient reached any parameter.
    pub fn is_empty(&self) -> bool {
        self.by_var.is_empty()
    }
    /// Adds `other` into `self` (micro-batch accumulation): by name for named parameters (so
    /// passes over different graphs of the same model add up), and by var. Gradients must be on
    /// the same device.
    pub fn accumulate(&mut self, other: &Gradients) -> Result<()> {
        let dev = self.backend.device();
        if other.backend.device() != dev {
            return Err(Error::DeviceMismatch {
                op: "Gradients::accumulate",
                expected: dev.0,
                got: other.backend.device().0,
            });
        }
        // Compute every sum first so a failure leaves `self` untouched.
        let backend = &*self.backend;
        let mut names = Vec::with_capacity(other.by_name.len());
        for (k, g) in &other.by_name {
            let s = match self.by_name.get(k) {
                Some(prev) => add(backend, prev, g)?,
                None => g.clone(),
            };
            names.push((k.clone(), s));
        }
        let mut vars = Vec::with_capacity(other.by_var.len());
        for (k, g) in &other.by_var {
            let s = match self.by_var.get(k) {
                Some(prev) => add(backend, prev, g)?,
                None => g.clone(),
            };
            vars.push((*k, s));
        }
        self.by_name.extend(names);
        self.by_var.extend(vars);
        Ok(())
    }
    /// Multiplies every gradient by `factor` (e.g. `1 / micro_batches`), with the `scale` op.
    pub fn scale(&mut self, factor: f32) -> Result<()> {
        let op = Op::Scale { factor };
        let backend = &*self.backend;
        let run = |t: &Tensor| -> Result<Tensor> {
            backend
                .run(&op, Direction::Forward, &[t])?
                .pop()
                .ok_or_else(|| Error::Autograd {
                    why: "scale returned no output".into(),
                })
        };
        let names = self
            .by_name
            .iter()
            .map(|(k, t)| Ok((k.clone(), run(t)?)))
            .collect::<Result<Vec<_>>>()?;
        let vars = self
            .by_var
            .iter()
            .map(|(k, t)| Ok((*k, run(t)?)))
            .collect::<Result<Vec<_>>>()?;
        self.by_name.extend(names);
        self.by_var.extend(vars);
        Ok(())
    }
}
