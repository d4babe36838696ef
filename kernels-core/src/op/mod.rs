//! The op vocabulary: every operation declared once.
//!
//! [`OpKind`] names each op; [`OpKind::spec`] gives its inputs, attributes with defaults, outputs,
//! differentiable inputs and error budget; [`Op`] is an op with its attributes filled in. Kernel
//! names, parity cases, CLI listings and docs all derive from here. `match`es over these enums
//! have no `_` arm, so a new op is a compile error until every backend handles it.
//!
//! Backward convention: the backward of an op takes `inputs ++ outputs ++ grad_outputs` (one
//! gradient per output, named `grad_<output>`) and returns one gradient per entry of
//! [`OpSpec::grad_inputs`], in that order, named `grad_<input>`.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::{Error, Result};
use crate::numerics::Budget;
use crate::tensor::DType;

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Forward,
    Backward,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }
}

/// Elementwise binary ops; `b` broadcasts over `a`'s leading dims (`b.shape` a suffix of `a.shape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Elementwise unary ops without attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Relu,
    Sigmoid,
    Tanh,
    Silu,
}

/// Reductions over the last dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
}

/// `F.gelu`'s `approximate` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GeluApprox {
    None,
    Tanh,
}

/// The activation fused into `linear`: those whose derivative is a function of the output, so
/// the backward needs no pre-activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    None,
    Relu,
    Tanh,
    Sigmoid,
}

impl Activation {
    /// Every activation, in attribute order.
    pub const ALL: [Activation; 4] = [
        Activation::None,
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
    ];
    /// The attribute value.
    pub fn name(self) -> &'static str {
        match self {
            Activation::None => "none",
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
        }
    }
}

const ACTIVATION_CHOICES: &[&str] = &["none", "relu", "tanh", "sigmoid"];

/// An op with its attributes. See [`OpKind::spec`] for inputs and outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `a @ b`, batched over leading dims (equal, or one side 2-D and shared).
    Matmul {
        trans_a: bool,
        trans_b: bool,
    },
    /// `act(x @ weight^T + bias)`: x `[..., in]`, weight `[out, in]`, bias `[out]`.
    Linear {
        activation: Activation,
    },
    Binary(BinaryOp),
    Scale {
        factor: f32,
    },
    Unary(UnaryOp),
    Gelu {
        approximate: GeluApprox,
    },
    /// Over the last dim; causal masks key `j > i + (t - s)` for x `[..., s, t]`.
    Softmax {
        causal: bool,
    },
    LogSoftmax {
        causal: bool,
    },
    LayerNorm {
        eps: f32,
    },
    RmsNorm {
        eps: f32,
    },
    /// x `[batch, heads, seq, head_dim]`, position = offset + index.
    Rope {
        theta: f32,
        offset: usize,
        interleaved: bool,
    },
    Embedding,
    Reduce(ReduceOp),
    /// Swap the last two dims.
    Transpose,
    /// Concatenate on the last dim.
    Concat,
    /// q `[b, hq, s, d]`, k and v `[b, hkv, t, d]`; `scale` `None` means `1/sqrt(d)`.
    Attention {
        causal: bool,
        scale: Option<f32>,
    },
    GruCell,
    GruSequence,
    CrossEntropy,
    Mse,
    Argmax,
    /// Next-token sampling: logits `[rows, vocab]`, one uniform in `[0, 1)` per row -> i32 ids.
    Sample {
        temperature: f32,
        top_k: usize,
        top_p: f32,
    },
    SvdLowrank {
        rank: usize,
        power_iters: usize,
        seed: u64,
    },
    AdamwStep {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        step: u64,
    },
    SgdStep {
        lr: f32,
        momentum: f32,
        weight_decay: f32,
        nesterov: bool,
    },
}

macro_rules! op_kinds {
    ($($kind:ident => $name:literal),* $(,)?) => {
        /// The name of every op, without attributes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind { $($kind),* }

        impl OpKind {
            /// Every op, in table order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$kind),*];

            /// The op's name as used by the CLI, kernels and docs.
            pub fn name(self) -> &'static str {
                match self { $(OpKind::$kind => $name),* }
            }
        }
    };
}

op_kinds! {
    Matmul => "matmul",
    Linear => "linear",
    Add => "add",
    Sub => "sub",
    Mul => "mul",
    Div => "div",
    Scale => "scale",
    Neg => "neg",
    Exp => "exp",
    Log => "log",
    Sqrt => "sqrt",
    Relu => "relu",
    Sigmoid => "sigmoid",
    Tanh => "tanh",
    Silu => "silu",
    Gelu => "gelu",
    Softmax => "softmax",
    LogSoftmax => "log_softmax",
    LayerNorm => "layer_norm",
    RmsNorm => "rms_norm",
    Rope => "rope",
    Embedding => "embedding",
    Sum => "sum",
    Mean => "mean",
    Max => "max",
    Transpose => "transpose",
    Concat => "concat",
    Attention => "attention",
    GruCell => "gru_cell",
    GruSequence => "gru_sequence",
    CrossEntropy => "cross_entropy",
    Mse => "mse",
    Argmax => "argmax",
    Sample => "sample",
    SvdLowrank => "svd_lowrank",
    AdamwStep => "adamw_step",
    SgdStep => "sgd_step",
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod attrs;
mod spec;
#[cfg(test)]
mod tests;

use attrs::Attrs;
pub use spec::{AttrDefault, AttrKind, AttrSpec, AttrValue, InputKind, InputSpec};

/// Everything there is to know about an op without running it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpSpec {
    pub kind: OpKind,
    pub inputs: &'static [InputSpec],
    pub attrs: Vec<AttrSpec>,
    pub outputs: &'static [&'static str],
    /// Names of the inputs that receive gradients (empty: no backward).
    pub grad_inputs: &'static [&'static str],
    /// Budget of the forward outputs against the f32 CPU reference.
    pub budget: Budget,
    /// Budget of the backward outputs.
    pub budget_backward: Budget,
    /// One-line meaning.
    pub doc: &'static str,
}

impl OpSpec {
    /// Whether the op has a backward.
    pub fn differentiable(&self) -> bool {
        !self.grad_inputs.is_empty()
    }
    /// Names of the tensors the given direction takes, in order.
    pub fn arg_names(&self, dir: Direction) -> Vec<String> {
        let mut v: Vec<String> = self.inputs.iter().map(|i| i.name.to_string()).collect();
        if dir == Direction::Backward {
            v.extend(self.outputs.iter().map(|o| o.to_string()));
            v.extend(self.outputs.iter().map(|o| format!("grad_{o}")));
        }
        v
    }
    /// Names of the tensors the given direction returns, in order.
    pub fn result_names(&self, dir: Direction) -> Vec<String> {
        match dir {
            Direction::Forward => self.outputs.iter().map(|o| o.to_string()).collect(),
            Direction::Backward => self
                .grad_inputs
                .iter()
                .map(|i| format!("grad_{i}"))
                .collect(),
        }
    }
}

const fn f(name: &'static str) -> InputSpec {
    InputSpec {
        name,
        kind: InputKind::Float,
    }
}
const fn int(name: &'static str) -> InputSpec {
    InputSpec {
        name,
        kind: InputKind::Int,
    }
}
fn attr(name: &'static str, kind: AttrKind, default: AttrDefault) -> AttrSpec {
    AttrSpec {
        name,
        kind,
        default,
    }
}
fn bool_attr(name: &'static str, v: bool) -> AttrSpec {
    attr(name, AttrKind::Bool, AttrDefault::Value(AttrValue::Bool(v)))
}
fn float_attr(name: &'static str, v: f64) -> AttrSpec {
    attr(
        name,
        AttrKind::Float,
        AttrDefault::Value(AttrValue::Float(v)),
    )
}
fn int_attr(name: &'static str, v: u64) -> AttrSpec {
    attr(name, AttrKind::Int, AttrDefault::Value(AttrValue::Int(v)))
}

const IN_A: &[InputSpec] = &[f("a")];
const IN_A_B: &[InputSpec] = &[f("a"), f("b")];
const IN_LOGITS_TARGETS: &[InputSpec] = &[f("logits"), int("targets")];
const IN_PARAM_GRAD_M_V: &[InputSpec] = &[f("param"), f("grad"), f("m"), f("v")];
const IN_PARAM_GRAD_MOMENTUM_BUF: &[InputSpec] = &[f("param"), f("grad"), f("momentum_buf")];
const IN_Q_K_V: &[InputSpec] = &[f("q"), f("k"), f("v")];
const IN_X: &[InputSpec] = &[f("x")];
const IN_X_H_WEIGHT_IH_WEIGHT_HH_BIAS_IH_BIAS_HH: &[InputSpec] = &[
    f("x"),
    f("h"),
    f("weight_ih"),
    f("weight_hh"),
    f("bias_ih"),
    f("bias_hh"),
];
const IN_X_H0_WEIGHT_IH_WEIGHT_HH_BIAS_IH_BIAS_HH: &[InputSpec] = &[
    f("x"),
    f("h0"),
    f("weight_ih"),
    f("weight_hh"),
    f("bias_ih"),
    f("bias_hh"),
];
const IN_X_WEIGHT: &[InputSpec] = &[f("x"), f("weight")];
const IN_X_WEIGHT_BIAS: &[InputSpec] = &[f("x"), f("weight"), f("bias")];
const IN_IDS_WEIGHT: &[InputSpec] = &[int("ids"), f("weight")];
const IN_LOGITS_UNIFORM: &[InputSpec] = &[f("logits"), f("uniform")];

/// (inputs, attrs, outputs, grad_inputs, budget, budget_backward, doc) of one op.
type SpecRow = (
    &'static [InputSpec],
    Vec<AttrSpec>,
    &'static [&'static str],
    &'static [&'static str],
    Budget,
    Budget,
    &'static str,
);

const GELU_CHOICES: &[&str] = &["none", "tanh"];

// Budgets (see DESIGN.md, Numerics). Elementwise: fixed. Reductions: grow with sqrt(K).
const B_ARITH: Budget = Budget::fixed(0.0, 1e-6);
const B_DIV: Budget = Budget::fixed(1e-7, 1e-6);
const B_TRANS: Budget = Budget::fixed(1e-6, 1e-5);
const B_REDUCE: Budget = Budget::per_k(2e-6, 2e-6);
const B_REDUCE_BWD: Budget = Budget::per_k(4e-6, 4e-6);
const B_SVD: Budget = Budget::per_k(1e-5, 1e-4);

impl OpKind {
    /// Looks an op up by name.
    pub fn from_name(name: &str) -> Result<OpKind> {
        OpKind::ALL
            .iter()
            .copied()
            .find(|k| k.name() == name)
            .ok_or_else(|| Error::UnknownOp {
                name: name.to_string(),
            })
    }

    /// Whether this op rejects NaN and infinities in its float inputs (`Error::NonFinite`)
    /// rather than propagating them as IEEE arithmetic does. The CPU backends and the CLI's
    /// input checks follow it; a device backend, which cannot see values without a readback
    /// (and must not block in the browser), returns all-NaN outputs instead. Exhaustive, so a
    /// new op has to decide.
    pub fn rejects_non_finite(self) -> bool {
        use OpKind as K;
        match self {
            // An iterative factorization of a matrix with a NaN is NaN everywhere: refuse it.
            K::SvdLowrank => true,
            K::Matmul
            | K::Linear
            | K::Add
            | K::Sub
            | K::Mul
            | K::Div
            | K::Scale
            | K::Neg
            | K::Exp
            | K::Log => false,
            K::Sqrt | K::Relu | K::Sigmoid | K::Tanh | K::Silu | K::Gelu | K::Softmax => false,
            K::LogSoftmax
            | K::LayerNorm
            | K::RmsNorm
            | K::Rope
            | K::Embedding
            | K::Sum
            | K::Mean => false,
            K::Max | K::Transpose | K::Concat | K::Attention | K::GruCell | K::GruSequence => false,
            K::CrossEntropy | K::Mse | K::Argmax | K::AdamwStep | K::SgdStep => false,
            K::Sample => false,
        }
    }

    /// Inputs, attributes, outputs, gradients and budgets of this op.
    pub fn spec(self) -> OpSpec {
        use OpKind as K;
        let (inputs, attrs, outputs, grad_inputs, budget, budget_backward, doc): SpecRow =
            match self {
                K::Matmul => (
                    IN_A_B,
                    alloc::vec![bool_attr("trans_a", false), bool_attr("trans_b", false)],
                    &["out"],
                    &["a", "b"],
                    B_REDUCE,
                    B_REDUCE,
                    "a @ b, batched over leading dims (equal, or one operand 2-D)",
                ),
                K::Linear => (
                    IN_X_WEIGHT_BIAS,
                    alloc::vec![attr(
                        "activation",
                        AttrKind::Choice(ACTIVATION_CHOICES),
                        AttrDefault::Value(AttrValue::Str("none")),
                    )],
                    &["out"],
                    &["x", "weight", "bias"],
                    B_REDUCE,
                    B_REDUCE,
                    "act(F.linear(x, weight, bias)), act none, relu, tanh or sigmoid",
                ),
                K::Add => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    B_ARITH,
                    B_REDUCE,
                    "a + b; b broadcasts over a's leading dims",
                ),
                K::Sub => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    B_ARITH,
                    B_REDUCE,
                    "a - b; b broadcasts over a's leading dims",
                ),
                K::Mul => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    B_ARITH,
                    B_REDUCE,
                    "a * b; b broadcasts over a's leading dims",
                ),
                K::Div => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    B_DIV,
                    B_REDUCE_BWD,
                    "a / b; b broadcasts over a's leading dims",
                ),
                K::Scale => (
                    IN_X,
                    alloc::vec![attr("factor", AttrKind::Float, AttrDefault::Required)],
                    &["out"],
                    &["x"],
                    B_ARITH,
                    B_ARITH,
                    "x * factor",
                ),
                K::Neg => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    Budget::EXACT,
                    Budget::EXACT,
                    "-x",
                ),
                K::Exp => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "torch.exp",
                ),
                K::Log => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_DIV,
                    "torch.log",
                ),
                K::Sqrt => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_DIV,
                    B_DIV,
                    "torch.sqrt",
                ),
                K::Relu => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    Budget::EXACT,
                    Budget::EXACT,
                    "torch.relu",
                ),
                K::Sigmoid => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "torch.sigmoid",
                ),
                K::Tanh => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "torch.tanh",
                ),
                K::Silu => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "F.silu",
                ),
                K::Gelu => (
                    IN_X,
                    alloc::vec![attr(
                        "approximate",
                        AttrKind::Choice(GELU_CHOICES),
                        AttrDefault::Value(AttrValue::Str("none")),
                    )],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "F.gelu (exact erf form, or the tanh approximation)",
                ),
                K::Softmax => (
                    IN_X,
                    alloc::vec![bool_attr("causal", false)],
                    &["out"],
                    &["x"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "softmax over the last dim; causal masks key j > i + (t - s)",
                ),
                K::LogSoftmax => (
                    IN_X,
                    alloc::vec![bool_attr("causal", false)],
                    &["out"],
                    &["x"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "log_softmax over the last dim; causal as softmax",
                ),
                K::LayerNorm => (
                    IN_X_WEIGHT_BIAS,
                    alloc::vec![float_attr("eps", 1e-5)],
                    &["out"],
                    &["x", "weight", "bias"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "F.layer_norm over the last dim",
                ),
                K::RmsNorm => (
                    IN_X_WEIGHT,
                    alloc::vec![float_attr("eps", 1e-6)],
                    &["out"],
                    &["x", "weight"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "x * rsqrt(mean(x^2, -1) + eps) * weight",
                ),
                K::Rope => (
                    IN_X,
                    alloc::vec![
                        float_attr("theta", 10000.0),
                        int_attr("offset", 0),
                        bool_attr("interleaved", false)
                    ],
                    &["out"],
                    &["x"],
                    B_TRANS,
                    B_TRANS,
                    "rotary embedding of x [batch, heads, seq, head_dim]; HF rotate_half layout or interleaved pairs",
                ),
                K::Embedding => (
                    IN_IDS_WEIGHT,
                    alloc::vec![],
                    &["out"],
                    &["weight"],
                    Budget::EXACT,
                    B_REDUCE,
                    "F.embedding",
                ),
                K::Sum => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_REDUCE,
                    Budget::EXACT,
                    "sum over the last dim",
                ),
                K::Mean => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    B_REDUCE,
                    B_DIV,
                    "mean over the last dim",
                ),
                K::Max => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    Budget::EXACT,
                    Budget::EXACT,
                    "max over the last dim (gradient to the first maximum)",
                ),
                K::Transpose => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &["x"],
                    Budget::EXACT,
                    Budget::EXACT,
                    "swap the last two dims",
                ),
                K::Concat => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    Budget::EXACT,
                    Budget::EXACT,
                    "torch.cat on the last dim",
                ),
                K::Attention => (
                    IN_Q_K_V,
                    alloc::vec![
                        bool_attr("causal", true),
                        attr(
                            "scale",
                            AttrKind::Float,
                            AttrDefault::Derived("1/sqrt(head_dim)")
                        ),
                    ],
                    &["out"],
                    &["q", "k", "v"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "F.scaled_dot_product_attention with GQA; q [b, hq, s, d], k and v [b, hkv, t, d]",
                ),
                K::GruCell => (
                    IN_X_H_WEIGHT_IH_WEIGHT_HH_BIAS_IH_BIAS_HH,
                    alloc::vec![],
                    &["h_next"],
                    &["x", "h", "weight_ih", "weight_hh", "bias_ih", "bias_hh"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "torch.nn.GRUCell (gates r, z, n; b_hn inside r * (...))",
                ),
                K::GruSequence => (
                    IN_X_H0_WEIGHT_IH_WEIGHT_HH_BIAS_IH_BIAS_HH,
                    alloc::vec![],
                    &["output", "h_n"],
                    &["x", "h0", "weight_ih", "weight_hh", "bias_ih", "bias_hh"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "one-layer torch.nn.GRU; x [seq, batch, input], h0 [batch, hidden]",
                ),
                K::CrossEntropy => (
                    IN_LOGITS_TARGETS,
                    alloc::vec![],
                    &["out"],
                    &["logits"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "F.cross_entropy, mean over rows",
                ),
                K::Mse => (
                    IN_A_B,
                    alloc::vec![],
                    &["out"],
                    &["a", "b"],
                    B_REDUCE,
                    B_REDUCE_BWD,
                    "F.mse_loss, mean",
                ),
                K::Argmax => (
                    IN_X,
                    alloc::vec![],
                    &["out"],
                    &[],
                    Budget::EXACT,
                    Budget::EXACT,
                    "index of the first maximum over the last dim (i32)",
                ),
                K::Sample => (
                    IN_LOGITS_UNIFORM,
                    alloc::vec![
                        float_attr("temperature", 1.0),
                        int_attr("top_k", 0),
                        float_attr("top_p", 1.0),
                    ],
                    &["out"],
                    &[],
                    Budget::EXACT,
                    Budget::EXACT,
                    "draw a token id per row of logits [rows, vocab] with its uniform [rows]: temperature (0 = argmax), top_k (0 = all; ties kept), top_p (1 = all), i32",
                ),
                K::SvdLowrank => (
                    IN_A,
                    alloc::vec![
                        attr("rank", AttrKind::Int, AttrDefault::Required),
                        int_attr("power_iters", 2),
                        int_attr("seed", 0),
                    ],
                    &["u", "s", "v"],
                    &[],
                    B_SVD,
                    B_SVD,
                    "randomized truncated SVD (Halko et al.), a ~ u diag(s) v^T; exact for rank(a) <= rank",
                ),
                K::AdamwStep => (
                    IN_PARAM_GRAD_M_V,
                    alloc::vec![
                        attr("lr", AttrKind::Float, AttrDefault::Required),
                        float_attr("beta1", 0.9),
                        float_attr("beta2", 0.999),
                        float_attr("eps", 1e-8),
                        float_attr("weight_decay", 0.01),
                        attr("step", AttrKind::Int, AttrDefault::Required),
                    ],
                    &["param", "m", "v"],
                    &[],
                    B_TRANS,
                    B_TRANS,
                    "one torch.optim.AdamW step (step counts from 1)",
                ),
                K::SgdStep => (
                    IN_PARAM_GRAD_MOMENTUM_BUF,
                    alloc::vec![
                        attr("lr", AttrKind::Float, AttrDefault::Required),
                        float_attr("momentum", 0.0),
                        float_attr("weight_decay", 0.0),
                        bool_attr("nesterov", false),
                    ],
                    &["param", "momentum_buf"],
                    &[],
                    B_ARITH,
                    B_ARITH,
                    "one torch.optim.SGD step with momentum (zero-initialized buffer, no dampening)",
                ),
            };
        OpSpec {
            kind: self,
            inputs,
            attrs,
            outputs,
            grad_inputs,
            budget,
            budget_backward,
            doc,
        }
    }
}

impl Op {
    /// Checks a call's signature before any kernel runs, on any backend: the direction exists
    /// (backward only for differentiable ops), the argument count follows the backward convention,
    /// and each argument has the dtype its slot takes (integers for `ids` and `targets`, f32
    /// everywhere else). `dtypes` are the arguments' dtypes in order.
    pub fn check_signature(&self, dir: Direction, dtypes: &[DType]) -> Result<()> {
        let spec = self.spec();
        let name = self.name();
        if dir == Direction::Backward && !spec.differentiable() {
            return Err(Error::NoBackward { op: name });
        }
        let names = spec.arg_names(dir);
        if dtypes.len() != names.len() {
            return Err(Error::Arity {
                op: name,
                expected: names.len(),
                got: dtypes.len(),
            });
        }
        for (i, (dtype, arg_name)) in dtypes.iter().zip(names).enumerate() {
            let want_int = spec.inputs.get(i).is_some_and(|s| s.kind == InputKind::Int);
            if dtype.is_int() != want_int {
                return Err(Error::DTypeMismatch {
                    op: name,
                    tensor: arg_name,
                    expected: if want_int { "i32 or i64" } else { "f32" },
                    got: *dtype,
                });
            }
        }
        Ok(())
    }

    /// The op's kind.
    pub fn kind(&self) -> OpKind {
        use OpKind as K;
        match self {
            Op::Matmul { .. } => K::Matmul,
            Op::Linear { .. } => K::Linear,
            Op::Binary(b) => match b {
                BinaryOp::Add => K::Add,
                BinaryOp::Sub => K::Sub,
                BinaryOp::Mul => K::Mul,
                BinaryOp::Div => K::Div,
            },
            Op::Scale { .. } => K::Scale,
            Op::Unary(u) => match u {
                UnaryOp::Neg => K::Neg,
                UnaryOp::Exp => K::Exp,
                UnaryOp::Log => K::Log,
                UnaryOp::Sqrt => K::Sqrt,
                UnaryOp::Relu => K::Relu,
                UnaryOp::Sigmoid => K::Sigmoid,
                UnaryOp::Tanh => K::Tanh,
                UnaryOp::Silu => K::Silu,
            },
            Op::Gelu { .. } => K::Gelu,
            Op::Softmax { .. } => K::Softmax,
            Op::LogSoftmax { .. } => K::LogSoftmax,
            Op::LayerNorm { .. } => K::LayerNorm,
            Op::RmsNorm { .. } => K::RmsNorm,
            Op::Rope { .. } => K::Rope,
            Op::Embedding => K::Embedding,
            Op::Reduce(r) => match r {
                ReduceOp::Sum => K::Sum,
                ReduceOp::Mean => K::Mean,
                ReduceOp::Max => K::Max,
            },
            Op::Transpose => K::Transpose,
            Op::Concat => K::Concat,
            Op::Attention { .. } => K::Attention,
            Op::GruCell => K::GruCell,
            Op::GruSequence => K::GruSequence,
            Op::CrossEntropy => K::CrossEntropy,
            Op::Mse => K::Mse,
            Op::Argmax => K::Argmax,
            Op::Sample { .. } => K::Sample,
            Op::SvdLowrank { .. } => K::SvdLowrank,
            Op::AdamwStep { .. } => K::AdamwStep,
            Op::SgdStep { .. } => K::SgdStep,
        }
    }

    /// The op's name.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The op's spec.
    pub fn spec(&self) -> OpSpec {
        self.kind().spec()
    }

    /// The op with every attribute at its default. Fails for ops with required attributes
    /// (`scale`, `svd_lowrank`, `adamw_step`, `sgd_step`).
    pub fn default_for(kind: OpKind) -> Result<Op> {
        Op::from_attrs(kind, &[])
    }

    /// Builds an op from `name=value` attribute strings, validating names and values.
    pub fn from_attrs(kind: OpKind, given: &[(&str, &str)]) -> Result<Op> {
        let spec = kind.spec();
        let op = kind.name();
        for (k, _) in given {
            if !spec.attrs.iter().any(|a| a.name == *k) {
                return Err(Error::UnknownAttr {
                    op,
                    attr: (*k).into(),
                });
            }
        }
        let a = Attrs { op, given };
        use OpKind as K;
        Ok(match kind {
            K::Matmul => Op::Matmul {
                trans_a: a.bool("trans_a", false)?,
                trans_b: a.bool("trans_b", false)?,
            },
            K::Linear => {
                let value = a.raw("activation").unwrap_or("none");
                Op::Linear {
                    activation: Activation::ALL
                        .into_iter()
                        .find(|x| x.name() == value)
                        .ok_or_else(|| Error::BadAttr {
                            op,
                            attr: "activation",
                            value: value.into(),
                            why: "expected none, relu, tanh or sigmoid".into(),
                        })?,
                }
            }
            K::Add => Op::Binary(BinaryOp::Add),
            K::Sub => Op::Binary(BinaryOp::Sub),
            K::Mul => Op::Binary(BinaryOp::Mul),
            K::Div => Op::Binary(BinaryOp::Div),
            K::Scale => Op::Scale {
                factor: a.f32("factor", None)?,
            },
            K::Neg => Op::Unary(UnaryOp::Neg),
            K::Exp => Op::Unary(UnaryOp::Exp),
            K::Log => Op::Unary(UnaryOp::Log),
            K::Sqrt => Op::Unary(UnaryOp::Sqrt),
            K::Relu => Op::Unary(UnaryOp::Relu),
            K::Sigmoid => Op::Unary(UnaryOp::Sigmoid),
            K::Tanh => Op::Unary(UnaryOp::Tanh),
            K::Silu => Op::Unary(UnaryOp::Silu),
            K::Gelu => Op::Gelu {
                approximate: match a.raw("approximate").unwrap_or("none") {
                    "none" => GeluApprox::None,
                    "tanh" => GeluApprox::Tanh,
                    other => {
                        return Err(Error::BadAttr {
                            op,
                            attr: "approximate",
                            value: other.into(),
                            why: "expected none or tanh".into(),
                        });
                    }
                },
            },
            K::Softmax => Op::Softmax {
                causal: a.bool("causal", false)?,
            },
            K::LogSoftmax => Op::LogSoftmax {
                causal: a.bool("causal", false)?,
            },
            K::LayerNorm => Op::LayerNorm {
                eps: a.positive_f32("eps", Some(1e-5))?,
            },
            K::RmsNorm => Op::RmsNorm {
                eps: a.positive_f32("eps", Some(1e-6))?,
            },
            K::Rope => Op::Rope {
                theta: a.positive_f32("theta", Some(10000.0))?,
                offset: usize::try_from(a.u64("offset", Some(0))?).map_err(|_| Error::BadAttr {
                    op,
                    attr: "offset",
                    value: a.raw("offset").unwrap_or("").into(),
                    why: "too large".into(),
                })?,
                interleaved: a.bool("interleaved", false)?,
            },
            K::Embedding => Op::Embedding,
            K::Sum => Op::Reduce(ReduceOp::Sum),
            K::Mean => Op::Reduce(ReduceOp::Mean),
            K::Max => Op::Reduce(ReduceOp::Max),
            K::Transpose => Op::Transpose,
            K::Concat => Op::Concat,
            K::Attention => Op::Attention {
                causal: a.bool("causal", true)?,
                scale: match a.raw("scale") {
                    Some(_) => Some(a.f32("scale", None)?),
                    None => None,
                },
            },
            K::GruCell => Op::GruCell,
            K::GruSequence => Op::GruSequence,
            K::CrossEntropy => Op::CrossEntropy,
            K::Mse => Op::Mse,
            K::Argmax => Op::Argmax,
            K::Sample => {
                let temperature = a.f32("temperature", Some(1.0))?;
                let top_k = a.u64("top_k", Some(0))?;
                let top_p = a.f32("top_p", Some(1.0))?;
                let top_k = usize::try_from(top_k).map_err(|_| Error::BadAttr {
                    op,
                    attr: "top_k",
                    value: format!("{top_k}"),
                    why: "too large".into(),
                })?;
                crate::cpu::sample::check_attrs(temperature, top_k, top_p)?;
                Op::Sample {
                    temperature,
                    top_k,
                    top_p,
                }
            }
            K::SvdLowrank => {
                let rank = a.u64("rank", None)?;
                if rank == 0 {
                    return Err(Error::BadAttr {
                        op,
                        attr: "rank",
                        value: "0".into(),
                        why: "must be >= 1".into(),
                    });
                }
                Op::SvdLowrank {
                    rank: usize::try_from(rank).map_err(|_| Error::BadAttr {
                        op,
                        attr: "rank",
                        value: format!("{rank}"),
                        why: "too large".into(),
                    })?,
                    power_iters: a.u64("power_iters", Some(2))?.min(64) as usize,
                    seed: a.u64("seed", Some(0))?,
                }
            }
            K::AdamwStep => {
                let step = a.u64("step", None)?;
                if step == 0 {
                    return Err(Error::BadAttr {
                        op,
                        attr: "step",
                        value: "0".into(),
                        why: "steps count from 1".into(),
                    });
                }
                Op::AdamwStep {
                    lr: a.f32("lr", None)?,
                    beta1: a.unit_f32("beta1", 0.9)?,
                    beta2: a.unit_f32("beta2", 0.999)?,
                    eps: a.positive_f32("eps", Some(1e-8))?,
                    weight_decay: a.f32("weight_decay", Some(0.01))?,
                    step,
                }
            }
            K::SgdStep => Op::SgdStep {
                lr: a.f32("lr", None)?,
                momentum: a.f32("momentum", Some(0.0))?,
                weight_decay: a.f32("weight_decay", Some(0.0))?,
                nesterov: a.bool("nesterov", false)?,
            },
        })
    }

    /// The attribute values of this op, in spec order (derived defaults left out when unset).
    pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
        use AttrValue::{Bool, Float, Int, Str};
        match *self {
            Op::Matmul { trans_a, trans_b } => {
                alloc::vec![("trans_a", Bool(trans_a)), ("trans_b", Bool(trans_b))]
            }
            Op::Linear { activation } => alloc::vec![("activation", Str(activation.name()))],
            Op::Binary(_)
            | Op::Unary(_)
            | Op::Embedding
            | Op::Reduce(_)
            | Op::Transpose
            | Op::Concat => alloc::vec![],
            Op::GruCell | Op::GruSequence | Op::CrossEntropy | Op::Mse | Op::Argmax => {
                alloc::vec![]
            }
            Op::Scale { factor } => alloc::vec![("factor", Float(factor as f64))],
            Op::Gelu { approximate } => alloc::vec![(
                "approximate",
                Str(match approximate {
                    GeluApprox::None => "none",
                    GeluApprox::Tanh => "tanh",
                })
            )],
            Op::Softmax { causal } | Op::LogSoftmax { causal } => {
                alloc::vec![("causal", Bool(causal))]
            }
            Op::LayerNorm { eps } | Op::RmsNorm { eps } => alloc::vec![("eps", Float(eps as f64))],
            Op::Rope {
                theta,
                offset,
                interleaved,
            } => alloc::vec![
                ("theta", Float(theta as f64)),
                ("offset", Int(offset as u64)),
                ("interleaved", Bool(interleaved)),
            ],
            Op::Attention { causal, scale } => {
                let mut v = alloc::vec![("causal", Bool(causal))];
                if let Some(s) = scale {
                    v.push(("scale", Float(s as f64)));
                }
                v
            }
            Op::Sample {
                temperature,
                top_k,
                top_p,
            } => alloc::vec![
                ("temperature", Float(temperature as f64)),
                ("top_k", Int(top_k as u64)),
                ("top_p", Float(top_p as f64)),
            ],
            Op::SvdLowrank {
                rank,
                power_iters,
                seed,
            } => alloc::vec![
                ("rank", Int(rank as u64)),
                ("power_iters", Int(power_iters as u64)),
                ("seed", Int(seed)),
            ],
            Op::AdamwStep {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                step,
            } => alloc::vec![
                ("lr", Float(lr as f64)),
                ("beta1", Float(beta1 as f64)),
                ("beta2", Float(beta2 as f64)),
                ("eps", Float(eps as f64)),
                ("weight_decay", Float(weight_decay as f64)),
                ("step", Int(step)),
            ],
            Op::SgdStep {
                lr,
                momentum,
                weight_decay,
                nesterov,
            } => alloc::vec![
                ("lr", Float(lr as f64)),
                ("momentum", Float(momentum as f64)),
                ("weight_decay", Float(weight_decay as f64)),
                ("nesterov", Bool(nesterov)),
            ],
        }
    }

    /// The reduced length `K` that sets a K-scaled budget, from the forward input shapes.
    pub fn reduced_len(&self, input_shapes: &[&[usize]]) -> usize {
        let last = |i: usize| {
            input_shapes
                .get(i)
                .and_then(|s| s.last().copied())
                .unwrap_or(1)
        };
        let dim = |i: usize, d: usize| {
            input_shapes
                .get(i)
                .and_then(|s| s.get(d).copied())
                .unwrap_or(1)
        };
        let numel = |i: usize| input_shapes.get(i).map_or(1, |s| s.iter().product());
        let k = match self {
            Op::Matmul { trans_a, trans_b } => {
                let a = input_shapes.first().copied().unwrap_or(&[]);
                let r = a.len();
                let ka = if *trans_a {
                    a.get(r.wrapping_sub(2)).copied()
                } else {
                    a.last().copied()
                };
                let b = input_shapes.get(1).copied().unwrap_or(&[]);
                let rb = b.len();
                // The backward reduces over m (grad b) or n (grad a) as well.
                let other = if *trans_b {
                    b.get(rb.wrapping_sub(2)).copied()
                } else {
                    b.last().copied()
                };
                let m = if *trans_a {
                    a.last().copied()
                } else {
                    a.get(r.wrapping_sub(2)).copied()
                };
                ka.unwrap_or(1).max(other.unwrap_or(1)).max(m.unwrap_or(1))
            }
            // Forward reduces over in; backward over out (grad x) and rows (grad weight, bias).
            Op::Linear { .. } => last(0).max(dim(1, 0)).max(numel(0) / last(0).max(1)),
            Op::Binary(_) => numel(0) / numel(1).max(1),
            Op::Scale { .. } | Op::Unary(_) | Op::Gelu { .. } | Op::Transpose | Op::Concat => 1,
            Op::Rope { .. } | Op::AdamwStep { .. } | Op::SgdStep { .. } | Op::Argmax => 1,
            Op::Sample { .. } => 1,
            Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::LayerNorm { .. }
            | Op::RmsNorm { .. } => last(0),
            Op::Reduce(_) => last(0),
            Op::Embedding => numel(0),
            Op::Attention { .. } => last(0).max(dim(1, 2)).max(dim(0, 2)),
            Op::GruCell => last(0) + last(1),
            Op::GruSequence => (last(0) + last(1)) * dim(0, 0).max(1),
            Op::CrossEntropy => last(0) * dim(0, 0).max(1),
            Op::Mse => numel(0),
            Op::SvdLowrank { .. } => numel(0),
        };
        k.max(1)
    }
}

impl Op {
    /// Like the `Display` form, but with only the attributes that differ from their defaults
    /// (required ones always shown): `matmul`, `matmul(trans_b=true)`, `adamw_step(lr=0.01, step=3)`.
    pub fn short_label(&self) -> String {
        let spec = self.spec();
        let shown: Vec<String> = self
            .attrs()
            .iter()
            .filter(|(k, v)| {
                // Compare as printed: attributes are f32, defaults are declared as f64.
                !spec.attrs.iter().any(|a| {
                    a.name == *k
                        && matches!(&a.default, AttrDefault::Value(d) if format!("{d}") == format!("{v}"))
                })
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if shown.is_empty() {
            self.name().to_string()
        } else {
            format!("{}({})", self.name(), shown.join(", "))
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let attrs = self.attrs();
        if !attrs.is_empty() {
            f.write_str("(")?;
            for (i, (k, v)) in attrs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}={v}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}
