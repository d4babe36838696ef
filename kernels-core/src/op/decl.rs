//! The op table: every op with its attributes, their types and defaults, and its signature,
//! declared once.
//!
//! One entry per [`Op`] variant:
//!
//! ```text
//! /// doc of the variant
//! Variant { field: type = default [=> PUB_CONST] [if check], ... } [validate { ... }] => [
//!     Kind "name" { inputs: [...], outputs: [...], grad: [...], budget: ..., budget_backward: ..., doc: "...", nan: "..." },
//! ],
//! ```
//!
//! A variant without attributes has no `{ ... }`; one that wraps a sub-enum (`Binary(BinaryOp)`)
//! lists one kind per sub-enum variant, of the same name. A default is a literal (for `f32`
//! attributes the published default is that decimal as an `f64`), `(expression)`, `required`
//! or `(derived "how")` (an `Option` that stays `None`: the kernel computes it). `=> NAME`
//! publishes the default as `pub const NAME`; `if check` names a check in `attrs.rs` that a given
//! value must pass. An input is `name` (f32), `name: Int` (i32 or i64) or `name: Weight` (f32 or
//! a weight dtype: f16, bf16 or GGML blocks, read through [`crate::quant`]).
//!
//! From the table come [`Op`], [`OpKind`], [`BinaryOp`], [`UnaryOp`], [`ReduceOp`], the default
//! constants, [`OpKind::ALL`], [`OpKind::name`], [`OpKind::spec`], [`Op::kind`],
//! [`Op::from_attrs`] and [`Op::attrs`] (and so `Display`).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::attrs::{self, Activation, AttrType, Attrs, Fallback, GeluApprox, RopeScaling};
use super::spec::{AttrDefault, AttrSpec, AttrValue, Direction, InputKind, InputSpec};
use crate::error::{Error, Result};
use crate::numerics::Budget;

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
    /// What NaN, infinities and out-of-range values give (the CPU reference's answer, which
    /// every backend's hostile parity cases are checked against).
    pub nan: &'static str,
}

impl OpSpec {
    /// Whether the op has a backward.
    pub fn differentiable(&self) -> bool {
        !self.grad_inputs.is_empty()
    }
    /// Names of the tensors the given direction takes, in order.
    pub fn arg_names(&self, dir: Direction) -> Vec<String> {
        (0..self.kind.arg_count(dir))
            .filter_map(|i| self.kind.arg_name(dir, i))
            .collect()
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

macro_rules! declare_ops {
    // A sub-enum (`Binary(BinaryOp)`): one variant per kind, of the kind's name.
    (@sub [$(#[$meta:meta])* $sub:ident] $($kind:ident)+) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $sub {
            $($kind),+
        }
    };
    (@sub $($kind:ident)+) => {};

    (@input) => { InputKind::Float };
    (@input $kind:ident) => { InputKind::$kind };

    (@published $ty:ty; required) => { AttrDefault::Required };
    (@published $ty:ty; (derived $how:literal)) => { AttrDefault::Derived($how) };
    (@published $ty:ty; $value:tt) => {
        AttrDefault::Value(<$ty as AttrType>::publish($value))
    };

    (@fallback required) => { Fallback::Required };
    (@fallback (derived $how:literal)) => { Fallback::Value(None) };
    (@fallback $value:tt => $name:ident) => { Fallback::Value($name) };
    (@fallback $value:tt) => { Fallback::Value($value) };

    (@check) => { attrs::any };
    (@check $check:ident) => { attrs::$check };

    // One entry per kind: `{ Kind "name" [pattern] [pattern without bindings] [attributes]
    // [validate] { signature } }`, collected into `@emit`.
    (@norm [$($done:tt)*]) => {
        declare_ops!(@emit $($done)*);
    };
    (@norm [$($done:tt)*]
        { $variant:ident [($sub:ident)] [] [] [] [$($kind:ident $name:literal { $($sig:tt)* })+] }
        $($rest:tt)*
    ) => {
        declare_ops!(@norm [$($done)* $({
            $kind $name [Op::$variant($sub::$kind)] [Op::$variant($sub::$kind)] [] [] { $($sig)* }
        })+] $($rest)*);
    };
    (@norm [$($done:tt)*]
        { $variant:ident [] [$($pat:tt)*] [$($attrs:tt)*] [$($validate:tt)*]
          [$kind:ident $name:literal { $($sig:tt)* }] }
        $($rest:tt)*
    ) => {
        declare_ops!(@norm [$($done)* {
            $kind $name [Op::$variant $($pat)*] [Op::$variant { .. }] [$($attrs)*] [$($validate)*]
            { $($sig)* }
        }] $($rest)*);
    };

    (@emit $({
        $kind:ident $name:literal [$($pat:tt)*] [$($wild:tt)*]
        [$($field:ident : $ty:ty = $def:tt $(=> $const:ident)? $(if $check:ident)?),*]
        [$($validate:block)?]
        {
            inputs: [$($input:ident $(: $input_kind:ident)?),* $(,)?],
            outputs: [$($output:ident),+ $(,)?],
            grad: [$($grad:ident),* $(,)?],
            budget: $budget:expr,
            budget_backward: $budget_backward:expr,
            doc: $doc:literal,
            nan: $nan:literal $(,)?
        }
    })*) => {
        impl OpKind {
            /// The op's inputs, in order: [`OpSpec::inputs`] without building the whole spec
            /// (which allocates its attributes), for the checks every call makes.
            pub fn inputs(self) -> &'static [InputSpec] {
                match self {
                    $(OpKind::$kind => &[$(InputSpec {
                        name: stringify!($input),
                        kind: declare_ops!(@input $($input_kind)?),
                    }),*],)*
                }
            }

            /// [`OpSpec::outputs`] without building the whole spec.
            pub fn outputs(self) -> &'static [&'static str] {
                match self {
                    $(OpKind::$kind => &[$(stringify!($output)),+],)*
                }
            }

            /// [`OpSpec::grad_inputs`] without building the whole spec.
            pub fn grad_inputs(self) -> &'static [&'static str] {
                match self {
                    $(OpKind::$kind => &[$(stringify!($grad)),*],)*
                }
            }

            /// Inputs, attributes, outputs, gradients and budgets of this op.
            pub fn spec(self) -> OpSpec {
                match self {
                    $(OpKind::$kind => OpSpec {
                        kind: self,
                        inputs: self.inputs(),
                        attrs: alloc::vec![$(AttrSpec {
                            name: stringify!($field),
                            kind: <$ty as AttrType>::KIND,
                            default: declare_ops!(@published $ty; $def),
                        }),*],
                        outputs: self.outputs(),
                        grad_inputs: self.grad_inputs(),
                        budget: $budget,
                        budget_backward: $budget_backward,
                        doc: $doc,
                        nan: $nan,
                    },)*
                }
            }
        }

        impl Op {
            /// The op's kind.
            pub fn kind(&self) -> OpKind {
                match self {
                    $($($wild)* => OpKind::$kind,)*
                }
            }

            /// Builds an op from `name=value` attribute strings, validating names and values.
            pub fn from_attrs(kind: OpKind, given: &[(&str, &str)]) -> Result<Op> {
                let op = kind.name();
                let spec = kind.spec();
                for (k, _) in given {
                    if !spec.attrs.iter().any(|a| a.name == *k) {
                        return Err(Error::UnknownAttr {
                            op,
                            attr: (*k).into(),
                        });
                    }
                }
                let a = Attrs { op, given };
                match kind {
                    $(OpKind::$kind => {
                        $(let $field: $ty = a.get(
                            stringify!($field),
                            declare_ops!(@fallback $def $(=> $const)?),
                            declare_ops!(@check $($check)?),
                        )?;)*
                        $(let () = $validate?;)?
                        Ok($($pat)*)
                    })*
                }
            }

            /// The attribute values of this op, in spec order (derived defaults left out when
            /// unset).
            pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
                match *self {
                    $($($pat)* => attrs::listed([
                        $((stringify!($field), AttrType::value($field))),*
                    ]),)*
                }
            }
        }
    };

    ($(
        $(#[$meta:meta])*
        $variant:ident
        $(($(#[$sub_meta:meta])* $sub:ident))?
        $({ $($field:ident : $ty:ty = $def:tt $(=> $const:ident)? $(if $check:ident)?),* $(,)? })?
        $(validate $validate:block)?
        => [$($kind:ident $name:literal { $($sig:tt)* }),+ $(,)?]
    ),* $(,)?) => {
        /// An op with its attributes. See [`OpKind::spec`] for inputs and outputs.
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum Op {
            $(
                $(#[$meta])*
                $variant $(($sub))? $({ $($field: $ty),* })?,
            )*
        }

        $(declare_ops!(@sub $([$(#[$sub_meta])* $sub])? $($kind)+);)*

        $($($($(
            #[doc = concat!(
                "Default `", stringify!($field), "` of [`Op::", stringify!($variant), "`]."
            )]
            pub const $const: $ty = $def;
        )?)*)?)*

        /// The name of every op, without attributes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind {
            $($($kind),+),*
        }

        impl OpKind {
            /// Every op, in table order.
            pub const ALL: &'static [OpKind] = &[$($(OpKind::$kind),+),*];

            /// The op's name as used by the CLI, kernels and docs.
            pub fn name(self) -> &'static str {
                match self {
                    $($(OpKind::$kind => $name),+),*
                }
            }
        }

        declare_ops!(@norm [] $({
            $variant
            [$(($sub))?]
            [$({ $($field),* })?]
            [$($($field : $ty = $def $(=> $const)? $(if $check)?),*)?]
            [$($validate)?]
            [$($kind $name { $($sig)* })+]
        })*);
    };
}

// Budgets (see DESIGN.md, Numerics). Elementwise: fixed. Reductions: grow with sqrt(K).
const B_ARITH: Budget = Budget::fixed(0.0, 1e-6);
const B_DIV: Budget = Budget::fixed(1e-7, 1e-6);
// One product and a sum (`momentum * buf + grad`): a GPU compiler may contract it into a fused
// multiply-add, one rounding fewer, which moves the result by an ulp of the terms (O(1) in the
// parity cases) rather than of the result, which can cancel to near 0.
const B_FMA: Budget = Budget::fixed(5e-7, 1e-6);
const B_TRANS: Budget = Budget::fixed(1e-6, 1e-5);
const B_REDUCE: Budget = Budget::per_k(2e-6, 2e-6);
const B_REDUCE_BWD: Budget = Budget::per_k(4e-6, 4e-6);
const B_SVD: Budget = Budget::per_k(1e-5, 1e-4);
const EXACT: Budget = Budget::EXACT;

declare_ops! {
    /// `a @ b`, batched over leading dims (equal, or one side 2-D and shared).
    Matmul {
        trans_a: bool = false,
        trans_b: bool = false,
    } => [
        Matmul "matmul" {
            inputs: [a: Weight, b: Weight],
            outputs: [out],
            grad: [a, b],
            budget: B_REDUCE,
            budget_backward: B_REDUCE,
            doc: "a @ b, batched over leading dims (equal, or one operand 2-D)",
            nan: "IEEE: a NaN or infinity reaches every output its row or column feeds (0 * inf = NaN)",
        },
    ],
    /// `residual + op(a) @ op(b)`: matmul with a residual added in its epilogue (a transformer
    /// block's `x + o_proj(..)`), `residual` of the product's shape. Output 0 may alias
    /// `residual` when it is donated ([`crate::backend::Backend::run_donated`]): the product is
    /// then accumulated into it, with no separate `add` and no copy.
    MatmulAdd {
        trans_a: bool = false,
        trans_b: bool = false,
    } => [
        MatmulAdd "matmul_add" {
            inputs: [residual, a: Weight, b: Weight],
            outputs: [out],
            grad: [residual, a, b],
            budget: B_REDUCE,
            budget_backward: B_REDUCE,
            doc: "residual + op(a) @ op(b) (the residual add in matmul's epilogue); out may alias residual when it is donated",
            nan: "as matmul, then + residual in IEEE (inf + -inf = NaN)",
        },
    ],
    /// `silu(x @ gate^T) * (x @ up^T)` with `weight = [gate; up]` `[2 n, in]` (the gate rows,
    /// then the up rows: a SwiGLU MLP's two projections concatenated at load), x `[..., in]` ->
    /// out `[..., n]`. The gated product as one op, so that a device makes decode's as one launch.
    MatmulSwiglu => [
        MatmulSwiglu "matmul_swiglu" {
            inputs: [x, weight: Weight],
            outputs: [out],
            grad: [x, weight],
            budget: B_REDUCE,
            budget_backward: B_REDUCE,
            doc: "F.silu(x @ gate^T) * (x @ up^T) with weight = cat([gate, up]) [2n, in] (a SwiGLU MLP's gate and up projections as one product)",
            nan: "as matmul, then swiglu in IEEE: silu(-inf) = NaN, 0 * inf = NaN",
        },
    ],
    /// `act(x @ weight^T + bias)`: x `[..., in]`, weight `[out, in]`, bias `[out]`.
    Linear {
        activation: Activation = (Activation::None),
    } => [
        Linear "linear" {
            inputs: [x, weight: Weight, bias],
            outputs: [out],
            grad: [x, weight, bias],
            budget: B_REDUCE,
            budget_backward: B_REDUCE,
            doc: "act(F.linear(x, weight, bias)), act none, relu, tanh or sigmoid",
            nan: "as matmul, then the activation (relu keeps NaN)",
        },
    ],
    Binary(
        /// Elementwise binary ops; `b` broadcasts over `a`'s leading dims (`b.shape` a suffix of
        /// `a.shape`).
        BinaryOp
    ) => [
        Add "add" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: B_ARITH,
            budget_backward: B_REDUCE,
            doc: "a + b; b broadcasts over a's leading dims",
            nan: "IEEE: NaN in, NaN out; inf + -inf = NaN",
        },
        Sub "sub" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: B_ARITH,
            budget_backward: B_REDUCE,
            doc: "a - b; b broadcasts over a's leading dims",
            nan: "IEEE: NaN in, NaN out; inf - inf = NaN",
        },
        Mul "mul" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: B_ARITH,
            budget_backward: B_REDUCE,
            doc: "a * b; b broadcasts over a's leading dims",
            nan: "IEEE: NaN in, NaN out; 0 * inf = NaN",
        },
        Div "div" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: B_DIV,
            budget_backward: B_REDUCE_BWD,
            doc: "a / b; b broadcasts over a's leading dims",
            nan: "IEEE: 0 / 0 and inf / inf = NaN; x / 0 = +-inf",
        },
    ],
    Scale {
        factor: f32 = required,
    } => [
        Scale "scale" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_ARITH,
            budget_backward: B_ARITH,
            doc: "x * factor",
            nan: "IEEE: NaN in, NaN out; a NaN factor gives NaN everywhere",
        },
    ],
    Unary(
        /// Elementwise unary ops without attributes.
        UnaryOp
    ) => [
        Neg "neg" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "-x",
            nan: "NaN stays NaN; +-inf flips",
        },
        Exp "exp" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "torch.exp",
            nan: "exp(NaN) = NaN, exp(inf) = inf, exp(-inf) = 0",
        },
        Log "log" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_DIV,
            doc: "torch.log",
            nan: "log(NaN) and log(x < 0) = NaN, log(0) = -inf, log(inf) = inf",
        },
        Sqrt "sqrt" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_DIV,
            budget_backward: B_DIV,
            doc: "torch.sqrt",
            nan: "sqrt(NaN) and sqrt(x < 0) = NaN, sqrt(inf) = inf",
        },
        Relu "relu" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "torch.relu",
            nan: "relu(NaN) = NaN (as torch), relu(inf) = inf, relu(-inf) = 0",
        },
        Sigmoid "sigmoid" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "torch.sigmoid",
            nan: "sigmoid(NaN) = NaN, sigmoid(inf) = 1, sigmoid(-inf) = 0",
        },
        Tanh "tanh" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "torch.tanh",
            nan: "tanh(NaN) = NaN, tanh(+-inf) = +-1",
        },
        Silu "silu" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "F.silu",
            nan: "silu(NaN) = NaN, silu(inf) = inf, silu(-inf) = NaN (-inf * 0)",
        },
    ],
    Gelu {
        approximate: GeluApprox = (GeluApprox::None),
    } => [
        Gelu "gelu" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "F.gelu (exact erf form, or the tanh approximation)",
            nan: "gelu(NaN) = NaN, gelu(inf) = inf, gelu(-inf) = NaN (-inf * 0)",
        },
    ],
    /// The gate of a SwiGLU MLP, elementwise: `gate` and `up` of one shape.
    Swiglu => [
        Swiglu "swiglu" {
            inputs: [gate, up],
            outputs: [out],
            grad: [gate, up],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "F.silu(gate) * up (the gated MLP of llama-family models)",
            nan: "silu(gate) * up in IEEE: silu(-inf) = NaN, 0 * inf = NaN",
        },
    ],
    /// Over the last dim; causal masks key `j > i + (t - s)` for x `[..., s, t]`.
    Softmax {
        causal: bool = false => SOFTMAX_CAUSAL,
    } => [
        Softmax "softmax" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "softmax over the last dim; causal masks key j > i + (t - s)",
            nan: "a NaN or +inf in a row makes the row NaN; -inf gets 0; a row of only -inf is NaN",
        },
    ],
    LogSoftmax {
        causal: bool = false => LOG_SOFTMAX_CAUSAL,
    } => [
        LogSoftmax "log_softmax" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "log_softmax over the last dim; causal as softmax",
            nan: "a NaN or +inf in a row makes the row NaN; -inf gets -inf; a row of only -inf is NaN",
        },
    ],
    LayerNorm {
        eps: f32 = 1e-5 => LAYER_NORM_EPS if positive,
    } => [
        LayerNorm "layer_norm" {
            inputs: [x, weight, bias],
            outputs: [out],
            grad: [x, weight, bias],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "F.layer_norm over the last dim",
            nan: "a NaN or infinity makes its whole row NaN",
        },
    ],
    RmsNorm {
        eps: f32 = 1e-6 => RMS_NORM_EPS if positive,
    } => [
        RmsNorm "rms_norm" {
            inputs: [x, weight],
            outputs: [out],
            grad: [x, weight],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "x * rsqrt(mean(x^2, -1) + eps) * weight",
            nan: "a NaN makes its row NaN; an infinity becomes NaN and the rest of its row 0",
        },
    ],
    /// x `[batch, heads, seq, head_dim]`, position = offset + index. `scaling` stretches the
    /// frequencies for a longer context (Hugging Face's `rope_type`): `linear` divides them by
    /// `factor`; `llama3` divides the low ones by `factor` and blends the middle band
    /// (`low` = `low_freq_factor`, `high` = `high_freq_factor`, `original_context` =
    /// `original_max_position_embeddings`); `yarn` blends interpolated and extrapolated
    /// frequencies over the dims between `high` = `beta_fast` and `low` = `beta_slow` rotations
    /// of the original context (its attention factor belongs to the attention scale).
    Rope {
        theta: f32 = 10000.0 => ROPE_THETA if positive,
        offset: usize = 0,
        interleaved: bool = false,
        scaling: RopeScaling = (RopeScaling::None),
        factor: f32 = 1.0 if positive,
        low: f32 = 1.0 if positive,
        high: f32 = 4.0 if positive,
        original_context: usize = 0,
    } => [
        Rope "rope" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "rotary embedding of x [batch, heads, seq, head_dim]; HF rotate_half layout or interleaved pairs; linear, llama3 or yarn frequency scaling",
            nan: "IEEE per rotated pair: a NaN or infinity reaches both elements of its pair",
        },
    ],
    Embedding => [
        Embedding "embedding" {
            inputs: [ids: Int, weight: Weight],
            outputs: [out],
            grad: [weight],
            budget: EXACT,
            budget_backward: B_REDUCE,
            doc: "F.embedding",
            nan: "rows are copied as they are; an id outside [0, vocab) is refused",
        },
    ],
    Reduce(
        /// Reductions over the last dim.
        ReduceOp
    ) => [
        Sum "sum" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_REDUCE,
            budget_backward: EXACT,
            doc: "sum over the last dim",
            nan: "IEEE: NaN if the row holds a NaN or both infinities",
        },
        Mean "mean" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: B_REDUCE,
            budget_backward: B_DIV,
            doc: "mean over the last dim",
            nan: "IEEE: NaN if the row holds a NaN or both infinities",
        },
        Max "max" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "max over the last dim (gradient to the first maximum)",
            nan: "NaN if the row holds a NaN (as torch); infinities order as numbers",
        },
    ],
    /// Swap the last two dims.
    Transpose => [
        Transpose "transpose" {
            inputs: [x],
            outputs: [out],
            grad: [x],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "swap the last two dims",
            nan: "values move as they are",
        },
    ],
    /// Concatenate on the last dim.
    Concat => [
        Concat "concat" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "torch.cat on the last dim",
            nan: "values move as they are",
        },
    ],
    /// Writes `rows [.., s, d]` into `cache [.., cap, d]` at positions `pos..pos + s` of the
    /// second-to-last dim (leading dims equal): a KV cache's append. The output is the cache
    /// with those rows replaced. It may alias the cache (see [`crate::backend::Backend::run_donated`]).
    KvWrite {
        pos: usize = 0,
    } => [
        KvWrite "kv_write" {
            inputs: [cache, rows],
            outputs: [out],
            grad: [cache, rows],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "cache[..., pos:pos+s, :] = rows (torch index_copy_ on dim -2); out may alias cache when it is donated",
            nan: "values move as they are; rows past the cache's end are refused",
        },
    ],
    /// The attention block's step between its one fused q/k/v product and attention: `qkv
    /// [b, hq + 2 hkv, s, d]` holds the heads of q, then of k, then of v (the rows of one
    /// product over the three weights concatenated). q and k are rotated as `rope` rotates
    /// them (the same attributes, positions `pos..pos + s`), the rotated k and the v are
    /// written into the caches `[b, hkv, cap, d]` at `pos..` as `kv_write` writes them, and the
    /// outputs are the two caches and the rotated q `[b, hq, s, d]`. The caches may be donated
    /// (written in place, see [`crate::backend::Backend::run_donated`]).
    RopeKvWrite {
        pos: usize = 0,
        theta: f32 = 10000.0 if positive,
        interleaved: bool = false,
        scaling: RopeScaling = (RopeScaling::None),
        factor: f32 = 1.0 if positive,
        low: f32 = 1.0 if positive,
        high: f32 = 4.0 if positive,
        original_context: usize = 0,
    } => [
        RopeKvWrite "rope_kv_write" {
            inputs: [k_cache, v_cache, qkv],
            outputs: [k_out, v_out, q],
            grad: [k_cache, v_cache, qkv],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "q, k, v = heads of qkv [b, hq + 2 hkv, s, d]; k_out = kv_write(k_cache, rope(k), pos), v_out = kv_write(v_cache, v, pos), q = rope(q) (rope's attributes, offset pos); the caches may be donated",
            nan: "IEEE per rotated pair, as rope; values move as they are, as kv_write; rows past the cache's end are refused",
        },
    ],
    /// q `[b, hq, s, d]`, k and v `[b, hkv, t, d]`; `scale` `None` means `1/sqrt(d)`; `kv_len`
    /// keys of the `t` are valid (0: all), the rest of a preallocated KV cache are ignored;
    /// `window` > 0 (causal only) is sliding-window attention: each query sees its last
    /// `window` keys, itself included.
    Attention {
        causal: bool = true => ATTENTION_CAUSAL,
        scale: Option<f32> = (derived "1/sqrt(head_dim)"),
        kv_len: usize = 0,
        window: usize = 0,
    } => [
        Attention "attention" {
            inputs: [q, k, v],
            outputs: [out],
            grad: [q, k, v],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "F.scaled_dot_product_attention with GQA; q [b, hq, s, d], k and v [b, hkv, t, d], of which the first kv_len keys (0: all t) are read; window > 0: each query sees its last window keys (sliding window, causal)",
            nan: "a NaN or +inf score makes its query row NaN; -inf scores and masked keys (causal, kv_len, window) add nothing",
        },
    ],
    GruCell => [
        GruCell "gru_cell" {
            inputs: [x, h, weight_ih, weight_hh, bias_ih, bias_hh],
            outputs: [h_next],
            grad: [x, h, weight_ih, weight_hh, bias_ih, bias_hh],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "torch.nn.GRUCell (gates r, z, n; b_hn inside r * (...))",
            nan: "IEEE through the gates",
        },
    ],
    GruSequence => [
        GruSequence "gru_sequence" {
            inputs: [x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
            outputs: [output, h_n],
            grad: [x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "one-layer torch.nn.GRU; x [seq, batch, input], h0 [batch, hidden]",
            nan: "IEEE through the gates; a NaN state carries to every later step",
        },
    ],
    /// A deep ensemble of one-layer GRUs computed together: every input carries a leading
    /// member axis (the members' weights stacked), and member `m` is `gru_sequence` of the
    /// `m`-th slices. A step of all members is one batched product and one gate kernel.
    GruEnsemble => [
        GruEnsemble "gru_ensemble" {
            inputs: [x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
            outputs: [output, h_n],
            grad: [x, h0, weight_ih, weight_hh, bias_ih, bias_hh],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "gru_sequence per member over stacked weights; x [members, seq, batch, input], h0 [members, batch, hidden], weight_ih [members, 3*hidden, input], weight_hh [members, 3*hidden, hidden], biases [members, 3*hidden]",
            nan: "IEEE through the gates, member by member; a NaN state carries to every later step of its member",
        },
    ],
    CrossEntropy => [
        CrossEntropy "cross_entropy" {
            inputs: [logits, targets: Int],
            outputs: [out],
            grad: [logits],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "F.cross_entropy, mean over rows",
            nan: "a NaN or +inf logit makes its row's loss NaN; a target outside [0, classes) is refused",
        },
    ],
    Mse => [
        Mse "mse" {
            inputs: [a, b],
            outputs: [out],
            grad: [a, b],
            budget: B_REDUCE,
            budget_backward: B_REDUCE_BWD,
            doc: "F.mse_loss, mean",
            nan: "IEEE: NaN if a difference is NaN (inf - inf included), else inf if one is infinite",
        },
    ],
    /// A weight dtype decoded to f32 (f32 passes through unchanged).
    Dequantize => [
        Dequantize "dequantize" {
            inputs: [x: Weight],
            outputs: [out],
            grad: [],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "f16, bf16 or GGML blocks (q8_0, q4_0, q4_1, q5_0, q4_k, q6_k) to f32, as the gguf package decodes them",
            nan: "f16 and bf16 NaN and infinities decode as themselves; a block whose f16 scale is NaN or infinite gives NaN or infinities",
        },
    ],
    Argmax => [
        Argmax "argmax" {
            inputs: [x],
            outputs: [out],
            grad: [],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "index of the first maximum over the last dim (i32)",
            nan: "the row's first NaN (as torch), else its first maximum",
        },
    ],
    /// Next-token sampling: logits `[rows, vocab]`, one uniform in `[0, 1)` per row -> i32 ids.
    Sample {
        temperature: f32 = 1.0 => SAMPLE_TEMPERATURE,
        top_k: usize = 0 => SAMPLE_TOP_K,
        top_p: f32 = 1.0 => SAMPLE_TOP_P,
    } validate {
        crate::cpu::sample::check_attrs(temperature, top_k, top_p)
    } => [
        Sample "sample" {
            inputs: [logits, uniform],
            outputs: [out],
            grad: [],
            budget: EXACT,
            budget_backward: EXACT,
            doc: "draw a token id per row of logits [rows, vocab] with its uniform [rows]: temperature (0 = argmax), top_k (0 = all; ties kept), top_p (1 = all), i32",
            nan: "a row with a NaN picks its first NaN; a uniform outside [0, 1) (NaN too) is refused",
        },
    ],
    SvdLowrank {
        rank: usize = required if at_least_one,
        power_iters: usize = 2 => SVD_POWER_ITERS if at_most_64,
        seed: u64 = 0,
    } => [
        SvdLowrank "svd_lowrank" {
            inputs: [a],
            outputs: [u, s, v],
            grad: [],
            budget: B_SVD,
            budget_backward: B_SVD,
            doc: "randomized truncated SVD (Halko et al.), a ~ u diag(s) v^T; exact for rank(a) <= rank",
            nan: "refused (NonFinite) on the CPU; a GPU, which cannot see values without a readback, gives all-NaN outputs",
        },
    ],
    AdamwStep {
        lr: f32 = required,
        beta1: f32 = 0.9 => ADAMW_BETA1 if unit_interval,
        beta2: f32 = 0.999 => ADAMW_BETA2 if unit_interval,
        eps: f32 = 1e-8 => ADAMW_EPS if positive,
        weight_decay: f32 = 0.01 => ADAMW_WEIGHT_DECAY,
        step: u64 = required if step_number,
    } => [
        AdamwStep "adamw_step" {
            inputs: [param, grad, m, v],
            outputs: [param, m, v],
            grad: [],
            budget: B_TRANS,
            budget_backward: B_TRANS,
            doc: "one torch.optim.AdamW step (step counts from 1)",
            nan: "IEEE per element: a NaN in param, grad or state stays in that element",
        },
    ],
    SgdStep {
        lr: f32 = required,
        momentum: f32 = 0.0 => SGD_MOMENTUM,
        weight_decay: f32 = 0.0 => SGD_WEIGHT_DECAY,
        nesterov: bool = false => SGD_NESTEROV,
    } => [
        SgdStep "sgd_step" {
            inputs: [param, grad, momentum_buf],
            outputs: [param, momentum_buf],
            grad: [],
            budget: B_FMA,
            budget_backward: B_FMA,
            doc: "one torch.optim.SGD step with momentum (zero-initialized buffer, no dampening)",
            nan: "IEEE per element; weight_decay 0 adds no term, so an infinite param stays infinite",
        },
    ],
}
