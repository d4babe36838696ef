//! The element types a tensor can hold (a leaf module: [`crate::error`] and [`crate::tensor`]
//! both name it).
//!
//! `F32` is the reference dtype of every computation; `I32` and `I64` carry ids and targets.
//! The *weight dtypes* store weights compactly and are read by `matmul`, `linear`,
//! `embedding` and `dequantize` ([`crate::quant`] decodes them):
//!
//! | dtype  | block (elements) | bytes per block | bits per weight |
//! |--------|------------------|-----------------|-----------------|
//! | `F16`  | 1                | 2               | 16              |
//! | `BF16` | 1                | 2               | 16              |
//! | `Q8_0` | 32               | 34              | 8.5             |
//! | `Q4_0` | 32               | 18              | 4.5             |
//! | `Q4_1` | 32               | 20              | 5               |
//! | `Q5_0` | 32               | 22              | 5.5             |
//! | `Q4_K` | 256              | 144             | 4.5             |
//! | `Q6_K` | 256              | 210             | 6.5625          |
//!
//! The block layouts are GGML's (`ggml-common.h`), byte for byte, so GGUF tensors load without
//! conversion. Blocks run along the innermost (last) dimension: a row of a quantized tensor is
//! a whole number of blocks.

/// Element type of a tensor. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)] // GGML's names: `Q4_K` is what every file and tool says.
pub enum DType {
    F32,
    I32,
    I64,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q4_K,
    Q6_K,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q4_K,
        DType::Q6_K,
    ];
    /// The weight dtypes (see the module docs), in declaration order.
    pub const WEIGHT: [DType; 8] = [
        DType::F16,
        DType::BF16,
        DType::Q8_0,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q4_K,
        DType::Q6_K,
    ];

    /// Elements per block: 1 for scalar dtypes, 32 or 256 for the block-quantized ones.
    pub fn block_elems(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::I64 | DType::F16 | DType::BF16 => 1,
            DType::Q8_0 | DType::Q4_0 | DType::Q4_1 | DType::Q5_0 => 32,
            DType::Q4_K | DType::Q6_K => 256,
        }
    }
    /// Bytes per block (for scalar dtypes, per element).
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::Q8_0 => 34,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q4_K => 144,
            DType::Q6_K => 210,
        }
    }
    /// Size of one element in bytes, for the scalar dtypes; `None` for block-quantized ones,
    /// whose elements share bytes (see [`DType::bytes_for`]).
    pub fn size(self) -> Option<usize> {
        (self.block_elems() == 1).then(|| self.block_bytes())
    }
    /// Bytes that `n` elements take, or `None` when `n` is not a whole number of blocks or the
    /// count overflows.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        let b = self.block_elems();
        if !n.is_multiple_of(b) {
            return None;
        }
        (n / b).checked_mul(self.block_bytes())
    }
    /// Lower-case name, as in the CLI and the op table (`f32`, `q4_k`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
            DType::Q4_1 => "q4_1",
            DType::Q5_0 => "q5_0",
            DType::Q4_K => "q4_k",
            DType::Q6_K => "q6_k",
        }
    }
    /// The dtype of a [`DType::name`], case-insensitively (`Q4_K` and `q4_k` both work).
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
    }
    /// True for `I32` and `I64`.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::I64)
    }
    /// True for the weight dtypes: stored compactly, read through [`crate::quant`].
    pub fn is_weight(self) -> bool {
        !matches!(self, DType::F32 | DType::I32 | DType::I64)
    }
    /// True for the block-quantized weight dtypes (`Q8_0` ... `Q6_K`).
    pub fn is_quantized(self) -> bool {
        self.block_elems() > 1
    }
}

impl core::fmt::Display for DType {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn block_sizes_are_ggml_s() {
        // ggml-common.h: sizeof(block_q8_0) = 2 + 32, q4_0 = 2 + 16, q4_1 = 4 + 16,
        // q5_0 = 2 + 4 + 16, q4_K = 4 + 12 + 128, q6_K = 128 + 64 + 16 + 2.
        assert_eq!(DType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(DType::Q4_K.bytes_for(512), Some(288));
        assert_eq!(DType::Q6_K.bytes_for(256), Some(210));
        assert_eq!(DType::Q4_0.bytes_for(33), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
        assert_eq!(DType::Q8_0.bytes_for(usize::MAX - 31), None);
        assert_eq!(DType::Q4_K.size(), None);
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(DType::from_name(&d.name().to_uppercase()), Some(d));
            assert_eq!(d.is_weight(), DType::WEIGHT.contains(&d));
        }
    }
}
