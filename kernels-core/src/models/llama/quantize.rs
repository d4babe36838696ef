//! Quantize on load: a checkpoint's matrices (projections, the embedding table, the output
//! head) re-encoded as a weight dtype, the rest left f32. What `--quantize` in the CLI and the
//! page's choice do, and what `kernels quantize` writes to a GGUF file.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::is_matrix_weight;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// What [`quantize_checkpoint`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizeSummary {
    /// Tensors re-encoded, by the dtype each got.
    pub quantized: BTreeMap<String, DType>,
    /// Matrices left as they were, with why (a row length that is not a whole number of
    /// blocks of any usable format).
    pub kept: Vec<(String, String)>,
    /// Bytes of every tensor before and after.
    pub bytes_before: usize,
    pub bytes_after: usize,
}

/// The dtypes `--quantize` offers.
pub const QUANTIZE_CHOICES: [DType; 3] = [DType::Q8_0, DType::Q4_0, DType::Q4_K];

/// The format a matrix with rows of `cols` gets when `dtype` is asked for: `dtype` when the rows
/// are whole blocks of it; else, as llama.cpp falls back, `q5_0` for `q4_k` and `q8_0` for
/// nothing smaller, when the rows are whole 32-element blocks; else `None` (kept).
pub fn format_for(dtype: DType, cols: usize) -> Option<DType> {
    if cols.is_multiple_of(dtype.block_elems()) {
        return Some(dtype);
    }
    match dtype {
        DType::Q4_K if cols.is_multiple_of(32) => Some(DType::Q5_0),
        _ => None,
    }
}

/// Re-encodes the matrices of `tensors` (f32, f16 or bf16) as `dtype` (one of
/// [`crate::quant::QUANTIZE_TO`]); tensors already in a GGML block format are left alone.
pub fn quantize_checkpoint(
    tensors: &mut BTreeMap<String, Tensor>,
    dtype: DType,
) -> Result<QuantizeSummary> {
    if !crate::quant::QUANTIZE_TO.contains(&dtype) {
        return Err(Error::BadAttr {
            op: "quantize",
            attr: "dtype",
            value: dtype.name().into(),
            why: "supported: f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k".into(),
        });
    }
    let mut s = QuantizeSummary::default();
    for (name, t) in tensors.iter_mut() {
        s.bytes_before += t.byte_len();
        if is_matrix_weight(name) && t.rank() == 2 && !t.dtype().is_quantized() {
            let cols = t.shape()[1];
            match format_for(dtype, cols) {
                Some(to) if to != t.dtype() => {
                    *t = t.dequantize()?.quantize(to)?;
                    s.quantized.insert(name.clone(), to);
                }
                Some(_) => {}
                None => s.kept.push((
                    name.clone(),
                    format!(
                        "rows of {cols} are not whole {dtype} blocks of {}",
                        dtype.block_elems()
                    ),
                )),
            }
        }
        s.bytes_after += t.byte_len();
    }
    Ok(s)
}
