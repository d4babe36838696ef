//! GGUF files (llama.cpp's model format, versions 3 and 2): a reader over `&[u8]` that borrows
//! the tensor data ([`GgufFile`]), a writer ([`GgufWriter`]), the ggml tensor types
//! ([`GgmlType`]), the mapping of a `llama` file to [`crate::models::llama::LlamaConfig`] and
//! Hugging Face tensor names ([`llama`]), its tokenizer as a `tokenizer.json`
//! ([`tokenizer`]), and a `tokenizer.json` as `tokenizer.ggml.*` metadata
//! ([`tokenizer_write`]).
//!
//! Layout (little-endian): the magic `GGUF`, the version (u32), the tensor count and the
//! metadata count (u64 each), the metadata key/values (key string, value type u32, value), the
//! tensor infos (name, number of dimensions u32, the dimensions innermost first (u64 each), the
//! ggml type u32, the offset u64 relative to the data section), then, at the next multiple of
//! `general.alignment` (default 32), the data section. Strings are a u64 length and UTF-8 bytes;
//! arrays an element type (u32), a count (u64) and the elements.
//!
//! A malformed or lying file is [`crate::Error::BadModelFile`] naming the file and the field;
//! no input makes the parser panic, read out of bounds or allocate more than the file's size
//! allows (a fuzz target, `tests/fuzz/fuzz_targets/gguf.rs`, feeds it arbitrary bytes).
//!
//! ```
//! use kernels_core::gguf::{GgmlType, GgufFile, GgufWriter, Value};
//!
//! let mut w = GgufWriter::new();
//! w.add_metadata("general.architecture", Value::from("llama"))?;
//! let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! w.add_tensor("t", &[2, 3], GgmlType::F32, bytes.clone())?;
//! let file = w.to_bytes()?;
//!
//! let g = GgufFile::parse(&file, "t.gguf")?;
//! assert_eq!(g.get_str("general.architecture")?, "llama");
//! let t = g.tensor("t").unwrap();
//! assert_eq!((t.shape(), t.ggml_type), (vec![2, 3], GgmlType::F32));
//! assert_eq!(g.tensor_data(t), &bytes[..]);
//! # Ok::<(), kernels_core::Error>(())
//! ```

pub mod llama;
mod read;
#[cfg(test)]
mod tests;
pub mod tokenizer;
pub mod tokenizer_write;
mod types;
mod value;
mod write;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

pub use types::{GgmlType, ValueType};
pub use value::Value;
pub use write::GgufWriter;

use crate::error::{Error, Result};

/// `general.alignment` when a file does not set it.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// ggml's `GGML_MAX_DIMS`: a tensor has 1 to 4 dimensions.
pub const MAX_DIMS: usize = 4;

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions as GGUF stores them: innermost (contiguous) first.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section (a multiple of the alignment).
    pub offset: u64,
    /// Bytes of the data (checked when parsed: it fits in the file).
    pub byte_size: u64,
}

impl TensorInfo {
    /// The row-major shape (outermost first): the dimensions reversed. Parsed infos' dimensions
    /// fit in memory (their data lies in the file), so the casts are exact.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// Number of elements.
    pub fn num_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file: its metadata and tensor infos, and the bytes it was parsed from (tensor
/// data is borrowed from them, not copied).
#[derive(Debug, Clone)]
pub struct GgufFile<'a> {
    /// The file's name, for messages.
    pub path: String,
    pub version: u32,
    /// `general.alignment`, or [`DEFAULT_ALIGNMENT`].
    pub alignment: usize,
    /// Where the data section starts in the file.
    pub data_offset: usize,
    /// Key/values in file order (keys are unique).
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order (names are unique).
    pub tensors: Vec<TensorInfo>,
    bytes: &'a [u8],
}

impl<'a> GgufFile<'a> {
    /// The bytes of a tensor's data, borrowed from the file.
    ///
    /// `info` should be one of this file's [`GgufFile::tensors`] (whose ranges were checked when
    /// the file was parsed); for any other the result is empty unless its range lies in the file.
    pub fn tensor_data(&self, info: &TensorInfo) -> &'a [u8] {
        let bytes: &'a [u8] = self.bytes;
        let start = (self.data_offset as u64).checked_add(info.offset);
        let end = start.and_then(|s| s.checked_add(info.byte_size));
        match (start, end) {
            (Some(s), Some(e)) => match (usize::try_from(s), usize::try_from(e)) {
                (Ok(s), Ok(e)) => bytes.get(s..e).unwrap_or(&[]),
                _ => &[],
            },
            _ => &[],
        }
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// An error naming this file.
    pub fn bad(&self, why: String) -> Error {
        Error::BadModelFile {
            path: self.path.clone(),
            why,
        }
    }

    fn missing(&self, key: &str) -> Error {
        self.bad(format!("metadata `{key}` is missing"))
    }

    fn wrong(&self, key: &str, want: &str, v: &Value) -> Error {
        self.bad(format!("metadata `{key}` must be {want}, got {v:?}"))
    }

    /// A string value; an error naming the key when it is absent or not a string.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.get(key).ok_or_else(|| self.missing(key))?;
        v.as_str().ok_or_else(|| self.wrong(key, "a string", v))
    }

    /// A non-negative integer of any width that fits `usize`, `None` when absent.
    pub fn get_usize_opt(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a non-negative integer", v)),
        }
    }

    /// [`GgufFile::get_usize_opt`], required.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.get_usize_opt(key)?.ok_or_else(|| self.missing(key))
    }

    /// A finite number of any type, `None` when absent.
    pub fn get_f32_opt(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| x as f32)
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a finite number", v)),
        }
    }

    /// A bool, `None` when absent.
    pub fn get_bool_opt(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a bool", v)),
        }
    }

    /// An array, `None` when absent.
    pub fn get_array_opt(&self, key: &str) -> Result<Option<&[Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "an array", v)),
        }
    }
}
