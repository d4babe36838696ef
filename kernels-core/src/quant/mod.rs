//! Weight dtypes: GGML block layouts decoded to f32 (the reference every fast path is checked
//! against) and f32 encoded to them.
//!
//! The CPU reference of an op on a weight dtype is "dequantize, then the f32 kernel"
//! ([`dequantize`]); the decoders are bit-exact with the `gguf` package's numpy code, and the
//! quantizers of `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `F16` and `BF16` with its quantizers
//! (`kernels-core/tests/quant.rs`, on fixtures it made). `Q4_K` is quantized with GGML's
//! reference algorithm; `Q6_K` is read, not written.

use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

use crate::dtype::DType;
use crate::error::{Error, Result};

pub mod decode;
mod encode;
mod k_quants;

pub use decode::{QK, QK_K};

/// The f16 bits of `v`, rounded to nearest even (as GGML's `GGML_FP32_TO_FP16` and numpy).
pub(crate) fn encode_f16(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

type Encoder = fn(&[f32], &mut [u8]);

fn encoder(dtype: DType) -> Option<Encoder> {
    Some(match dtype {
        DType::F16 => encode::f16_block,
        DType::BF16 => encode::bf16_block,
        DType::Q8_0 => encode::q8_0_block,
        DType::Q4_0 => encode::q4_0_block,
        DType::Q4_1 => encode::q4_1_block,
        DType::Q5_0 => encode::q5_0_block,
        DType::Q4_K => k_quants::q4_k_block,
        DType::Q6_K | DType::F32 | DType::I32 | DType::I64 => return None,
    })
}

/// The dtypes [`quantize`] can write.
pub const QUANTIZE_TO: [DType; 7] = [
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q4_K,
];

fn whole_blocks(op: &'static str, dtype: DType, n: usize) -> Result<usize> {
    dtype.bytes_for(n).ok_or_else(|| {
        Error::bad_shape(
            op,
            "x",
            &[n],
            format!(
                "{n} elements are not a whole number of {dtype} blocks of {}",
                dtype.block_elems()
            ),
        )
    })
}

/// Decodes `bytes` (whole blocks of `dtype`) into `out` (`out.len()` elements).
pub fn dequantize_into(dtype: DType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    if !dtype.is_weight() {
        return Err(Error::DTypeMismatch {
            op: "dequantize",
            tensor: "x".into(),
            expected: "a weight dtype (f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q6_k)",
            got: dtype,
        });
    }
    let need = whole_blocks("dequantize", dtype, out.len())?;
    if bytes.len() != need {
        return Err(Error::bad_shape(
            "dequantize",
            "x",
            &[out.len()],
            format!(
                "{} elements of {dtype} take {need} bytes, got {}",
                out.len(),
                bytes.len()
            ),
        ));
    }
    decode_blocks(dtype, bytes, out);
    Ok(())
}

/// The decoding loop of [`dequantize_into`] without its checks (the caller's sizes are whole
/// blocks that agree; extra bytes or elements are left alone), inlined into its caller so a
/// fast path compiled for a vector ISA decodes with it too.
#[inline(always)]
pub(crate) fn decode_blocks(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    // One loop per dtype, each with its block decoder inlined (a call per block through
    // `decode` costs more than the decoding of a 32-element block).
    macro_rules! blocks {
        ($f:path) => {
            for (o, b) in out.chunks_exact_mut(be).zip(bytes.chunks_exact(bb)) {
                $f(b, o);
            }
        };
    }
    match dtype {
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = decode::f16_to_f32(u16::from_le_bytes([c[0], c[1]]));
            }
        }
        DType::Q8_0 => blocks!(decode::q8_0_block),
        DType::Q4_0 => blocks!(decode::q4_0_block),
        DType::Q4_1 => blocks!(decode::q4_1_block),
        DType::Q5_0 => blocks!(decode::q5_0_block),
        DType::Q4_K => blocks!(decode::q4_k_block),
        DType::Q6_K => blocks!(decode::q6_k_block),
        DType::BF16 => blocks!(decode::bf16_block),
        DType::F32 | DType::I32 | DType::I64 => {}
    }
}

/// Decodes `n` elements of `dtype` from `bytes`.
pub fn dequantize(dtype: DType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    // Checked before allocating: the byte count must match `n`.
    let need = whole_blocks("dequantize", dtype, n)?;
    if bytes.len() != need {
        return Err(Error::bad_shape(
            "dequantize",
            "x",
            &[n],
            format!(
                "{n} elements of {dtype} take {need} bytes, got {}",
                bytes.len()
            ),
        ));
    }
    let mut out = vec![0.0f32; n];
    dequantize_into(dtype, bytes, &mut out)?;
    Ok(out)
}

/// Encodes `x` (a whole number of `dtype` blocks) as `dtype`.
pub fn quantize(dtype: DType, x: &[f32]) -> Result<Vec<u8>> {
    let Some(encode) = encoder(dtype) else {
        return Err(Error::BadAttr {
            op: "quantize",
            attr: "dtype",
            value: dtype.name().into(),
            why: "supported: f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k".into(),
        });
    };
    let need = whole_blocks("quantize", dtype, x.len())?;
    let mut out = vec![0u8; need];
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    for (b, o) in x.chunks_exact(be).zip(out.chunks_exact_mut(bb)) {
        encode(b, o);
    }
    Ok(out)
}
