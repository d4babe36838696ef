//! The parts of an op's signature: inputs, attribute types, values and defaults.

use core::fmt;

/// Whether an input holds floats or integer indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// f32.
    Float,
    /// i32 or i64 (ids, targets).
    Int,
    /// f32, or a weight dtype (f16, bf16, GGML blocks): the weight operand of `matmul`,
    /// `linear` and `embedding`. The CPU reference decodes it, then runs the f32 kernel.
    Weight,
}

impl InputKind {
    /// Whether a tensor of `dtype` may be passed for an input of this kind.
    pub fn accepts(self, dtype: crate::tensor::DType) -> bool {
        match self {
            InputKind::Float => dtype == crate::tensor::DType::F32,
            InputKind::Int => dtype.is_int(),
            InputKind::Weight => dtype == crate::tensor::DType::F32 || dtype.is_weight(),
        }
    }
    /// The dtypes it accepts, in words.
    pub fn expected(self) -> &'static str {
        match self {
            InputKind::Float => "f32",
            InputKind::Int => "i32 or i64",
            InputKind::Weight => {
                "f32 or a weight dtype (f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q6_k)"
            }
        }
    }
}

/// One input tensor of an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputSpec {
    pub name: &'static str,
    pub kind: InputKind,
}

/// Type of an attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    Bool,
    Float,
    Int,
    /// One of a fixed set of strings.
    Choice(&'static [&'static str]),
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Bool(bool),
    Float(f64),
    Int(u64),
    Str(&'static str),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Bool(b) => write!(f, "{b}"),
            // Every float attribute is an f32: print it as one (0.37, not 0.3700000047683716).
            AttrValue::Float(x) => write!(f, "{}", *x as f32),
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Str(s) => f.write_str(s),
        }
    }
}

/// An attribute's default.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrDefault {
    /// Must be given.
    Required,
    /// This value.
    Value(AttrValue),
    /// Computed from the inputs; the string says how (e.g. `1/sqrt(head_dim)`).
    Derived(&'static str),
}

/// One attribute of an op.
#[derive(Debug, Clone, PartialEq)]
pub struct AttrSpec {
    pub name: &'static str,
    pub kind: AttrKind,
    pub default: AttrDefault,
}

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
