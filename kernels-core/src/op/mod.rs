//! The op vocabulary: every operation declared once.
//!
//! [`OpKind`] names each op; [`OpKind::spec`] gives its inputs, attributes with defaults, outputs,
//! differentiable inputs and error budget; [`Op`] is an op with its attributes filled in. Kernel
//! names, parity cases, CLI listings and docs all derive from here. `match`es over these enums
//! have no `_` arm, so a new op is a compile error until every backend handles it.
//!
//! Each op, its attributes and their defaults are declared once, in the table of `decl.rs`;
//! `Op`, `OpKind`, the sub-enums, the default constants ([`LAYER_NORM_EPS`], [`ADAMW_BETA1`],
//! ...), [`OpKind::spec`], attribute parsing ([`Op::from_attrs`]) and listing ([`Op::attrs`],
//! `Display`) are generated from it. `spec.rs` holds the signature types, `attrs.rs` the attribute
//! types and their parsing.
//!
//! Backward convention: the backward of an op takes `inputs ++ outputs ++ grad_outputs` (one
//! gradient per output, named `grad_<output>`) and returns one gradient per entry of
//! [`OpSpec::grad_inputs`], in that order, named `grad_<input>`.

mod attrs;
mod decl;
mod spec;
#[cfg(test)]
mod tests;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

pub use attrs::{Activation, GeluApprox, RopeScaling};
// `Op`, `OpKind`, `BinaryOp`, `UnaryOp`, `ReduceOp` and the default constants.
pub use decl::*;
pub use spec::{AttrDefault, AttrKind, AttrSpec, AttrValue, Direction, InputKind, InputSpec};

use crate::error::{Error, Result};
use crate::tensor::DType;

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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

    /// How many leading inputs the caller may donate ([`crate::backend::Backend::run_donated`]):
    /// output `i` is input `i` with some elements replaced or added to, so a backend can write
    /// it into input `i`'s storage: `kv_write` (rows replaced) and `matmul_add` (the product
    /// added to the residual) donate one, `rope_kv_write` its two caches; every other op none.
    pub fn donated_inputs(self) -> usize {
        match self {
            OpKind::KvWrite | OpKind::MatmulAdd => 1,
            OpKind::RopeKvWrite => 2,
            _ => 0,
        }
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
            | K::MatmulAdd
            | K::MatmulSwiglu
            | K::Linear
            | K::Add
            | K::Sub
            | K::Mul
            | K::Div
            | K::Scale
            | K::Neg
            | K::Exp
            | K::Log => false,
            K::Sqrt
            | K::Relu
            | K::Sigmoid
            | K::Tanh
            | K::Silu
            | K::Gelu
            | K::Swiglu
            | K::Softmax => false,
            K::LogSoftmax
            | K::LayerNorm
            | K::RmsNorm
            | K::Rope
            | K::Embedding
            | K::Sum
            | K::Mean => false,
            K::Max
            | K::Transpose
            | K::Concat
            | K::KvWrite
            | K::RopeKvWrite
            | K::Attention
            | K::GruCell
            | K::GruSequence
            | K::GruEnsemble => false,
            K::CrossEntropy | K::Mse | K::Argmax | K::AdamwStep | K::SgdStep => false,
            K::Dequantize => false,
            K::Sample => false,
        }
    }

    /// How many tensors the given direction takes: the inputs, and backward the outputs and
    /// their gradients too.
    pub fn arg_count(self, dir: Direction) -> usize {
        let extra = match dir {
            Direction::Forward => 0,
            Direction::Backward => 2 * self.outputs().len(),
        };
        self.inputs().len() + extra
    }

    /// The name of the given direction's tensor `i` (as in [`OpSpec::arg_names`]); `None` past
    /// the last. Built only when an error names it.
    pub fn arg_name(self, dir: Direction, i: usize) -> Option<String> {
        let (inputs, outputs) = (self.inputs(), self.outputs());
        if let Some(input) = inputs.get(i) {
            return Some(input.name.to_string());
        }
        if dir == Direction::Forward {
            return None;
        }
        let j = i - inputs.len();
        match outputs.get(j) {
            Some(o) => Some(o.to_string()),
            None => outputs.get(j - outputs.len()).map(|o| format!("grad_{o}")),
        }
    }
}

impl Op {
    /// `rope` with base `theta` and no frequency scaling (the other attributes at their
    /// defaults).
    pub fn rope(theta: f32, offset: usize, interleaved: bool) -> Op {
        Op::Rope {
            theta,
            offset,
            interleaved,
            scaling: RopeScaling::None,
            factor: 1.0,
            low: 1.0,
            high: 4.0,
            original_context: 0,
        }
    }

    /// `rope_kv_write` at `pos` with base `theta` and no frequency scaling.
    pub fn rope_kv_write(theta: f32, pos: usize, interleaved: bool) -> Op {
        Op::rope_kv_write_from(&Op::rope(theta, pos, interleaved)).unwrap_or(Op::RopeKvWrite {
            pos,
            theta,
            interleaved,
            scaling: RopeScaling::None,
            factor: 1.0,
            low: 1.0,
            high: 4.0,
            original_context: 0,
        })
    }

    /// How `rope` or `rope_kv_write` rotates: the frequencies, the first position (`offset`,
    /// `pos`) and whether pairs are interleaved; `None` for every other op.
    pub fn rotation(&self) -> Option<(crate::cpu::rope::Freqs, usize, bool)> {
        let (theta, first, interleaved, scaling, factor, low, high, original_context) = match *self
        {
            Op::Rope {
                theta,
                offset,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            } => (
                theta,
                offset,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            ),
            Op::RopeKvWrite {
                pos,
                theta,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            } => (
                theta,
                pos,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            ),
            _ => return None,
        };
        let freqs = crate::cpu::rope::Freqs {
            theta,
            scaling,
            factor,
            low,
            high,
            original_context,
        };
        Some((freqs, first, interleaved))
    }

    /// The `rope_kv_write` that rotates as `rope` does (its `offset` becomes the cache
    /// position); `None` when `rope` is another op.
    pub fn rope_kv_write_from(rope: &Op) -> Option<Op> {
        match *rope {
            Op::Rope {
                theta,
                offset,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            } => Some(Op::RopeKvWrite {
                pos: offset,
                theta,
                interleaved,
                scaling,
                factor,
                low,
                high,
                original_context,
            }),
            _ => None,
        }
    }

    /// Builds an op from `name=value` arguments as `kernels op --attr` takes them: each split at
    /// its first `=`, both sides trimmed. An argument without `=`, a name given twice, an unknown
    /// name and a bad value are errors naming the op ([`Op::from_attrs`] checks the values).
    pub fn from_attr_args<S: AsRef<str>>(kind: OpKind, args: &[S]) -> Result<Op> {
        let op = kind.name();
        let spec = kind.spec();
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(args.len());
        for a in args {
            let a = a.as_ref();
            let Some((k, v)) = a.split_once('=') else {
                return Err(Error::AttrSyntax {
                    op,
                    given: a.to_string(),
                });
            };
            let (k, v) = (k.trim(), v.trim());
            let Some(attr) = spec.attrs.iter().find(|s| s.name == k) else {
                return Err(Error::UnknownAttr {
                    op,
                    attr: k.to_string(),
                });
            };
            if pairs.iter().any(|(p, _)| *p == k) {
                return Err(Error::BadAttr {
                    op,
                    attr: attr.name,
                    value: v.to_string(),
                    why: "given more than once".into(),
                });
            }
            pairs.push((k, v));
        }
        Op::from_attrs(kind, &pairs)
    }

    /// Checks a call's signature before any kernel runs, on any backend: the direction exists
    /// (backward only for differentiable ops), the argument count follows the backward convention,
    /// and each argument has the dtype its slot takes (integers for `ids` and `targets`, f32
    /// everywhere else). `dtypes` are the arguments' dtypes in order.
    pub fn check_signature(&self, dir: Direction, dtypes: &[DType]) -> Result<()> {
        self.check_dtypes(dir, dtypes.iter().copied())
    }

    /// [`Op::check_signature`] on the arguments' dtypes as they come, with nothing allocated
    /// unless it fails (every call on every backend makes this check).
    pub fn check_dtypes(
        &self,
        dir: Direction,
        dtypes: impl ExactSizeIterator<Item = DType>,
    ) -> Result<()> {
        let kind = self.kind();
        let name = kind.name();
        if dir == Direction::Backward && kind.grad_inputs().is_empty() {
            return Err(Error::NoBackward { op: name });
        }
        let expected = kind.arg_count(dir);
        if dtypes.len() != expected {
            return Err(Error::Arity {
                op: name,
                expected,
                got: dtypes.len(),
            });
        }
        for (i, dtype) in dtypes.enumerate() {
            // Backward's extra arguments (outputs and their gradients) are f32.
            let slot = kind.inputs().get(i).map_or(InputKind::Float, |s| s.kind);
            if !slot.accepts(dtype) {
                return Err(Error::DTypeMismatch {
                    op: name,
                    tensor: kind.arg_name(dir, i).unwrap_or_default(),
                    expected: slot.expected(),
                    got: dtype,
                });
            }
        }
        Ok(())
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
            // The product's (the residual is input 0 and adds nothing to reduce).
            Op::MatmulAdd { trans_a, trans_b } => Op::Matmul {
                trans_a: *trans_a,
                trans_b: *trans_b,
            }
            .reduced_len(input_shapes.get(1..).unwrap_or(&[])),
            // Forward reduces over in; backward over out (grad x) and rows (grad weight, bias).
            Op::Linear { .. } => last(0).max(dim(1, 0)).max(numel(0) / last(0).max(1)),
            // Forward reduces over in; backward over 2 n (grad x) and rows (grad weight).
            Op::MatmulSwiglu => last(0).max(dim(1, 0)).max(numel(0) / last(0).max(1)),
            Op::Binary(_) => numel(0) / numel(1).max(1),
            Op::Scale { .. } | Op::Unary(_) | Op::Gelu { .. } | Op::Swiglu => 1,
            Op::Transpose | Op::Concat | Op::KvWrite { .. } | Op::RopeKvWrite { .. } => 1,
            Op::Rope { .. } | Op::AdamwStep { .. } | Op::SgdStep { .. } | Op::Argmax => 1,
            Op::Dequantize => 1,
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
            Op::GruEnsemble => (last(0) + last(1)) * dim(0, 1).max(1),
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
