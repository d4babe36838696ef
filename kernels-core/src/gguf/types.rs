//! The two type tags of a GGUF file: [`GgmlType`] (a tensor's element or block format, with its
//! block size and bytes per block) and [`ValueType`] (a metadata value's type).

use alloc::format;
use alloc::string::String;

/// A tensor's storage format: ggml's `ggml_type`, with the ids and sizes of gguf-py's
/// `GGMLQuantizationType` and `GGML_QUANT_SIZES` (gguf 0.19).
///
/// Every format stores its elements in blocks of [`GgmlType::block_size`] consecutive elements
/// along the innermost dimension, [`GgmlType::bytes_per_block`] bytes each (plain types are blocks
/// of one element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

/// `(type, id, block size, bytes per block)`, as gguf-py's `GGML_QUANT_SIZES` lists them.
const GGML_TYPES: [(GgmlType, u32, u32, u32); 34] = [
    (GgmlType::F32, 0, 1, 4),
    (GgmlType::F16, 1, 1, 2),
    (GgmlType::Q4_0, 2, 32, 18),
    (GgmlType::Q4_1, 3, 32, 20),
    (GgmlType::Q5_0, 6, 32, 22),
    (GgmlType::Q5_1, 7, 32, 24),
    (GgmlType::Q8_0, 8, 32, 34),
    (GgmlType::Q8_1, 9, 32, 40),
    (GgmlType::Q2_K, 10, 256, 84),
    (GgmlType::Q3_K, 11, 256, 110),
    (GgmlType::Q4_K, 12, 256, 144),
    (GgmlType::Q5_K, 13, 256, 176),
    (GgmlType::Q6_K, 14, 256, 210),
    (GgmlType::Q8_K, 15, 256, 292),
    (GgmlType::IQ2_XXS, 16, 256, 66),
    (GgmlType::IQ2_XS, 17, 256, 74),
    (GgmlType::IQ3_XXS, 18, 256, 98),
    (GgmlType::IQ1_S, 19, 256, 50),
    (GgmlType::IQ4_NL, 20, 32, 18),
    (GgmlType::IQ3_S, 21, 256, 110),
    (GgmlType::IQ2_S, 22, 256, 82),
    (GgmlType::IQ4_XS, 23, 256, 136),
    (GgmlType::I8, 24, 1, 1),
    (GgmlType::I16, 25, 1, 2),
    (GgmlType::I32, 26, 1, 4),
    (GgmlType::I64, 27, 1, 8),
    (GgmlType::F64, 28, 1, 8),
    (GgmlType::IQ1_M, 29, 256, 56),
    (GgmlType::BF16, 30, 1, 2),
    (GgmlType::TQ1_0, 34, 256, 54),
    (GgmlType::TQ2_0, 35, 256, 66),
    (GgmlType::MXFP4, 39, 32, 17),
    (GgmlType::NVFP4, 40, 64, 36),
    (GgmlType::Q1_0, 41, 128, 18),
];

impl GgmlType {
    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        GGML_TYPES.iter().map(|&(t, ..)| t)
    }

    fn entry(self) -> (GgmlType, u32, u32, u32) {
        // Every variant has an entry (the test `every_type_has_one_entry` checks it).
        GGML_TYPES
            .iter()
            .copied()
            .find(|&(t, ..)| t == self)
            .unwrap_or((self, u32::MAX, 1, 0))
    }

    /// The type with ggml id `id`; `None` for ids ggml never had or has removed (4, 5, 31-33,
    /// 36-38: Q4_2, Q4_3 and the repacked `Q4_0_4_4`... formats).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES
            .iter()
            .find(|&&(_, i, ..)| i == id)
            .map(|&(t, ..)| t)
    }

    /// The ggml id written in a GGUF tensor info.
    pub fn id(self) -> u32 {
        self.entry().1
    }

    /// Elements per block (1 for plain types, 32 for `Q8_0`, 256 for the k-quants).
    pub fn block_size(self) -> usize {
        self.entry().2 as usize
    }

    /// Bytes of one block.
    pub fn bytes_per_block(self) -> usize {
        self.entry().3 as usize
    }

    /// ggml's name (`F32`, `Q4_K`...).
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// Bytes of a tensor of this type with `dims` (GGUF order: innermost first), or why not:
    /// the innermost dimension is not a multiple of the block size, or the size overflows.
    pub fn byte_size(self, dims: &[u64]) -> Result<u64, String> {
        let block = self.block_size() as u64;
        let inner = dims.first().copied().unwrap_or(1);
        if !inner.is_multiple_of(block) {
            return Err(format!(
                "innermost dimension {inner} is not a multiple of {}'s block size {block}",
                self.name()
            ));
        }
        let outer = dims.iter().skip(1).try_fold(1u64, |a, &d| a.checked_mul(d));
        (inner / block)
            .checked_mul(self.bytes_per_block() as u64)
            .and_then(|row| outer.and_then(|o| row.checked_mul(o)))
            .ok_or_else(|| format!("dimensions {dims:?} overflow the byte size"))
    }
}

/// The type of a metadata value (gguf-py's `GGUFValueType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

const VALUE_TYPES: [ValueType; 13] = [
    ValueType::U8,
    ValueType::I8,
    ValueType::U16,
    ValueType::I16,
    ValueType::U32,
    ValueType::I32,
    ValueType::F32,
    ValueType::Bool,
    ValueType::String,
    ValueType::Array,
    ValueType::U64,
    ValueType::I64,
    ValueType::F64,
];

impl ValueType {
    /// The type with GGUF id `id` (0 = `U8` ... 12 = `F64`).
    pub fn from_id(id: u32) -> Option<ValueType> {
        VALUE_TYPES.get(id as usize).copied()
    }

    /// The id written in the file.
    pub fn id(self) -> u32 {
        VALUE_TYPES.iter().position(|&t| t == self).unwrap_or(0) as u32
    }

    /// The fewest bytes a value of this type takes in a file: its size for numbers, the length
    /// prefix for strings, the element type and count for arrays. A claimed element count is
    /// checked against `bytes left / min_bytes` before anything is allocated.
    pub fn min_bytes(self) -> usize {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_one_entry() {
        for (t, id, ..) in GGML_TYPES {
            assert_eq!(GgmlType::from_id(id), Some(t));
            assert_eq!(t.id(), id);
            assert_eq!(GGML_TYPES.iter().filter(|e| e.0 == t).count(), 1);
        }
        for gone in [4, 5, 31, 32, 33, 36, 37, 38, 42, u32::MAX] {
            assert_eq!(GgmlType::from_id(gone), None);
        }
        for id in 0..13 {
            assert_eq!(ValueType::from_id(id).map(ValueType::id), Some(id));
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn byte_sizes_are_blocks_times_rows() {
        assert_eq!(GgmlType::F32.byte_size(&[3, 2]), Ok(24));
        assert_eq!(GgmlType::Q8_0.byte_size(&[64, 3]), Ok(2 * 34 * 3));
        assert_eq!(GgmlType::Q4_K.byte_size(&[512]), Ok(288));
        assert!(GgmlType::Q8_0.byte_size(&[33]).is_err());
        assert!(GgmlType::F32.byte_size(&[u64::MAX, 2]).is_err());
        assert!(GgmlType::F32.byte_size(&[1 << 62]).is_err());
    }
}
