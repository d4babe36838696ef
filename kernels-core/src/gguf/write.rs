//! [`GgufWriter`]: a GGUF v3 file from metadata and tensors (raw bytes of a ggml type), laid
//! out as gguf-py's `GGUFWriter` does: the tensors in the order added, each at the next multiple
//! of the alignment, the data section padded to it. gguf-py's `GGUFReader` and llama.cpp read it.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::types::{GgmlType, ValueType};
use super::value::Value;
use super::{DEFAULT_ALIGNMENT, MAX_DIMS};
use crate::error::{Error, Result};

/// Collects metadata and tensors, then writes the file with [`GgufWriter::to_bytes`].
#[derive(Debug, Clone, Default)]
pub struct GgufWriter {
    pub(super) metadata: Vec<(String, Value)>,
    /// Name, GGUF dimensions (innermost first), type, bytes.
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

fn bad(why: String) -> Error {
    Error::BadModelFile {
        path: "<gguf writer>".into(),
        why,
    }
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Adds a key/value (`general.alignment`, a u32 power of two, sets the alignment). A key
    /// given twice, or an array whose elements are not all of its element type, is an error.
    pub fn add_metadata(&mut self, key: &str, value: Value) -> Result<()> {
        if self.metadata.iter().any(|(k, _)| k == key) {
            return Err(bad(format!("metadata key `{key}` added twice")));
        }
        check_array_types(key, &value)?;
        if key == "general.alignment" && !matches!(value, Value::U32(a) if a.is_power_of_two()) {
            return Err(bad(format!(
                "`general.alignment` = {value:?} must be a u32 power of two"
            )));
        }
        self.metadata.push((key.to_string(), value));
        Ok(())
    }

    /// [`GgufWriter::add_metadata`], replacing the value of a key already added (in its place).
    pub fn set_metadata(&mut self, key: &str, value: Value) -> Result<()> {
        match self.metadata.iter().position(|(k, _)| k == key) {
            None => self.add_metadata(key, value),
            Some(i) => {
                check_array_types(key, &value)?;
                if key == "general.alignment"
                    && !matches!(value, Value::U32(a) if a.is_power_of_two())
                {
                    return Err(bad(format!(
                        "`general.alignment` = {value:?} must be a u32 power of two"
                    )));
                }
                self.metadata[i].1 = value;
                Ok(())
            }
        }
    }

    /// Adds a tensor of `shape` (row-major, outermost first, as the rest of this crate writes
    /// shapes; the file stores the reverse) whose data is `bytes` in `ggml_type`'s layout.
    pub fn add_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        ggml_type: GgmlType,
        bytes: Vec<u8>,
    ) -> Result<()> {
        if self.tensors.iter().any(|(n, ..)| n == name) {
            return Err(bad(format!("tensor `{name}` added twice")));
        }
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(bad(format!(
                "tensor `{name}`: shape {shape:?} must have 1 to {MAX_DIMS} dimensions"
            )));
        }
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let size = ggml_type
            .byte_size(&dims)
            .map_err(|why| bad(format!("tensor `{name}`: {why}")))?;
        if size != bytes.len() as u64 {
            return Err(bad(format!(
                "tensor `{name}`: {} {shape:?} takes {size} bytes, got {}",
                ggml_type.name(),
                bytes.len()
            )));
        }
        self.tensors
            .push((name.to_string(), dims, ggml_type, bytes));
        Ok(())
    }

    fn alignment(&self) -> usize {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            Some((_, Value::U32(a))) => *a as usize,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let align = self.alignment();
        let pad = |out: &mut Vec<u8>| {
            let len = out.len().next_multiple_of(align);
            out.resize(len, 0);
        };
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0u64;
        for (name, dims, ty, bytes) in &self.tensors {
            write_string(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + bytes.len() as u64).next_multiple_of(align as u64);
        }
        pad(&mut out);
        for (_, _, _, bytes) in &self.tensors {
            out.extend_from_slice(bytes);
            pad(&mut out);
        }
        Ok(out)
    }
}

fn check_array_types(key: &str, value: &Value) -> Result<()> {
    if let Value::Array(elem, items) = value {
        for item in items {
            if item.value_type() != *elem {
                return Err(bad(format!(
                    "metadata `{key}`: an array of {elem:?} holds a {:?}",
                    item.value_type()
                )));
            }
            check_array_types(key, item)?;
        }
    }
    Ok(())
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(b) => out.push(u8::from(*b)),
        Value::String(s) => write_string(out, s),
        Value::Array(elem, items) => {
            let elem: ValueType = *elem;
            out.extend_from_slice(&elem.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
    }
}
