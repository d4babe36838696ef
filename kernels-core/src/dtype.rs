//! The element types a tensor can hold (a leaf module: [`crate::error`] and [`crate::tensor`]
//! both name it).

/// Element type of a tensor. `f32` is the reference dtype; integers carry ids and targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    I32,
    I64,
}

impl DType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
        }
    }
    /// Lower-case name, as in safetensors headers and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }
    /// True for `I32` and `I64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }
}
