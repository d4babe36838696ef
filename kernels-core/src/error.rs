//! The crate's one structured error type.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::dtype::DType;

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Everything that can go wrong in kernels-core and in the backends built on it.
///
/// Every variant names the op (or file) and the offending values, so a message is enough to find
/// the mistake without a debugger.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Error {
    /// Two shapes that must agree do not.
    ShapeMismatch {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
    },
    /// One tensor's shape is wrong on its own (rank, a dimension, divisibility...).
    BadShape {
        op: &'static str,
        tensor: String,
        shape: Vec<usize>,
        why: String,
    },
    /// A tensor of the wrong element type.
    DTypeMismatch {
        op: &'static str,
        tensor: String,
        expected: &'static str,
        got: DType,
    },
    /// Wrong number of input tensors.
    Arity {
        op: &'static str,
        expected: usize,
        got: usize,
    },
    /// An empty tensor where the op needs at least one element.
    Empty { op: &'static str, tensor: String },
    /// NaN or infinity where the op forbids it.
    NonFinite {
        op: &'static str,
        tensor: String,
        index: usize,
        value: f64,
    },
    /// An integer index (token id, class target) out of range.
    IndexOutOfRange {
        op: &'static str,
        tensor: String,
        index: i64,
        bound: usize,
    },
    /// No op of this name exists.
    UnknownOp { name: String },
    /// The op has no attribute of this name.
    UnknownAttr { op: &'static str, attr: String },
    /// An attribute argument that is not of the form `name=value`.
    AttrSyntax { op: &'static str, given: String },
    /// An attribute value that does not parse or is out of range.
    BadAttr {
        op: &'static str,
        attr: &'static str,
        value: String,
        why: String,
    },
    /// A required attribute was not given.
    MissingAttr {
        op: &'static str,
        attr: &'static str,
    },
    /// The op (or direction) is not differentiable / not available.
    NoBackward { op: &'static str },
    /// The backend cannot run this op.
    UnsupportedOnBackend { op: &'static str, backend: String },
    /// Tensors from different devices were mixed in one op or graph.
    DeviceMismatch {
        op: &'static str,
        expected: u64,
        got: u64,
    },
    /// Host data was asked of a tensor that lives on a device (download it first).
    NotOnHost { op: &'static str },
    /// The device was lost; the next call may create a fresh one.
    DeviceLost { why: String },
    /// An allocation failed.
    OutOfMemory { what: String, bytes: u64 },
    /// A device or format limit would be exceeded and the work cannot be split.
    LimitExceeded {
        what: String,
        value: u64,
        limit: u64,
    },
    /// A model or tensor file is malformed, truncated or lies about its contents.
    BadModelFile { path: String, why: String },
    /// A named parameter or tensor is missing.
    Missing { what: String, name: String },
    /// Autograd misuse (e.g. backward of a non-scalar without a seed gradient).
    Autograd { why: String },
    /// Any other backend failure, with the backend's message.
    Backend { backend: String, why: String },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Error::*;
        match self {
            ShapeMismatch { op, lhs, rhs } => {
                write!(f, "{op}: shape mismatch: {lhs:?} vs {rhs:?}")
            }
            BadShape {
                op,
                tensor,
                shape,
                why,
            } => {
                write!(f, "{op}: tensor `{tensor}` has shape {shape:?}: {why}")
            }
            DTypeMismatch {
                op,
                tensor,
                expected,
                got,
            } => {
                write!(
                    f,
                    "{op}: tensor `{tensor}` has dtype {got:?}, expected {expected}"
                )
            }
            Arity { op, expected, got } => {
                write!(f, "{op}: expected {expected} input tensors, got {got}")
            }
            Empty { op, tensor } => write!(f, "{op}: tensor `{tensor}` is empty"),
            NonFinite {
                op,
                tensor,
                index,
                value,
            } => {
                write!(
                    f,
                    "{op}: tensor `{tensor}` holds {value} at flat index {index}"
                )
            }
            IndexOutOfRange {
                op,
                tensor,
                index,
                bound,
            } => write!(
                f,
                "{op}: tensor `{tensor}` holds index {index}, outside 0..{bound}"
            ),
            UnknownOp { name } => write!(f, "unknown op `{name}` (see `kernels ops`)"),
            UnknownAttr { op, attr } => write!(f, "{op}: unknown attribute `{attr}`"),
            AttrSyntax { op, given } => {
                write!(f, "{op}: attribute `{given}` is not of the form name=value")
            }
            BadAttr {
                op,
                attr,
                value,
                why,
            } => {
                write!(f, "{op}: attribute {attr}={value}: {why}")
            }
            MissingAttr { op, attr } => write!(f, "{op}: missing required attribute `{attr}`"),
            NoBackward { op } => write!(f, "{op}: has no backward"),
            UnsupportedOnBackend { op, backend } => {
                write!(f, "{op}: not supported on backend {backend}")
            }
            DeviceMismatch { op, expected, got } => write!(
                f,
                "{op}: tensors from different devices mixed (device {expected} and device {got}); \
                 move them explicitly"
            ),
            NotOnHost { op } => write!(f, "{op}: tensor lives on a device; download it first"),
            DeviceLost { why } => write!(f, "device lost: {why}"),
            OutOfMemory { what, bytes } => {
                write!(f, "out of memory allocating {bytes} bytes for {what}")
            }
            LimitExceeded { what, value, limit } => {
                write!(f, "limit exceeded: {what} is {value}, limit {limit}")
            }
            BadModelFile { path, why } => write!(f, "bad model file {path}: {why}"),
            Missing { what, name } => write!(f, "missing {what} `{name}`"),
            Autograd { why } => write!(f, "autograd: {why}"),
            Backend { backend, why } => write!(f, "backend {backend}: {why}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

impl Error {
    /// Shorthand for [`Error::BadShape`].
    pub fn bad_shape(
        op: &'static str,
        tensor: &str,
        shape: &[usize],
        why: impl Into<String>,
    ) -> Self {
        Error::BadShape {
            op,
            tensor: tensor.into(),
            shape: shape.to_vec(),
            why: why.into(),
        }
    }
    /// Shorthand for [`Error::ShapeMismatch`].
    pub fn mismatch(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        }
    }
}
