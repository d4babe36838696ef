//! The parser: a bounds-checked cursor over the file's bytes, and [`GgufFile::parse`].
//!
//! Every read checks the bytes left first, every size is computed with checked arithmetic, and
//! a claimed count is compared with what the remaining bytes could hold (at the smallest size an
//! element can take) before anything is allocated for it.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::types::{GgmlType, ValueType};
use super::value::Value;
use super::{DEFAULT_ALIGNMENT, GgufFile, MAX_DIMS, TensorInfo};
use crate::error::{Error, Result};

/// Arrays nested deeper than this are refused (recursion depth stays bounded on any input).
const MAX_NESTING: usize = 8;

/// Reads little-endian values from `bytes`, naming the file and the field in its errors.
pub(super) struct Cursor<'a, 'p> {
    bytes: &'a [u8],
    pos: usize,
    path: &'p str,
}

impl<'a, 'p> Cursor<'a, 'p> {
    pub(super) fn new(bytes: &'a [u8], path: &'p str) -> Self {
        Cursor {
            bytes,
            pos: 0,
            path,
        }
    }

    pub(super) fn bad(&self, why: String) -> Error {
        Error::BadModelFile {
            path: self.path.to_string(),
            why,
        }
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn take(&mut self, n: usize, field: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end.and_then(|e| self.bytes.get(self.pos..e)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.bad(format!(
                "{}: truncated: needs {n} bytes at offset {}, the file has {} bytes",
                field(),
                self.pos,
                self.bytes.len()
            ))),
        }
    }

    fn array<const N: usize>(&mut self, field: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, field: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    /// A count of elements at least `min_bytes` each: refused when the rest of the file could
    /// not hold that many, so the caller may allocate for it.
    fn count(&mut self, min_bytes: usize, field: &dyn Fn() -> String) -> Result<usize> {
        let n = self.u64(field)?;
        let fits = self.left() / min_bytes.max(1);
        match usize::try_from(n) {
            Ok(n) if n <= fits => Ok(n),
            _ => Err(self.bad(format!(
                "{}: count {n} cannot fit in the {} bytes left (at least {min_bytes} bytes each)",
                field(),
                self.left()
            ))),
        }
    }

    fn string(&mut self, field: &dyn Fn() -> String) -> Result<String> {
        let n = self.count(1, &|| format!("{}'s length", field()))?;
        let at = self.pos;
        let s = self.take(n, field)?;
        core::str::from_utf8(s).map(String::from).map_err(|e| {
            self.bad(format!(
                "{}: the string at offset {at} is not UTF-8: {e}",
                field()
            ))
        })
    }

    fn value_type(&mut self, field: &dyn Fn() -> String) -> Result<ValueType> {
        let id = self.u32(&|| format!("{}'s type", field()))?;
        ValueType::from_id(id).ok_or_else(|| {
            self.bad(format!(
                "{}: unknown value type {id} (known: 0-12)",
                field()
            ))
        })
    }

    fn value(&mut self, ty: ValueType, depth: usize, field: &dyn Fn() -> String) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(field)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(field)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(field)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(field)?)),
            ValueType::U32 => Value::U32(self.u32(field)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(field)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(field)?)),
            ValueType::U64 => Value::U64(self.u64(field)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(field)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(field)?)),
            ValueType::Bool => match self.array::<1>(field)? {
                [0] => Value::Bool(false),
                [1] => Value::Bool(true),
                [b] => return Err(self.bad(format!("{}: bool byte {b} is not 0 or 1", field()))),
            },
            ValueType::String => Value::String(self.string(field)?),
            ValueType::Array => {
                if depth >= MAX_NESTING {
                    return Err(self.bad(format!(
                        "{}: arrays nested deeper than {MAX_NESTING} levels",
                        field()
                    )));
                }
                let elem = self.value_type(&|| format!("{}'s element", field()))?;
                let n = self.count(elem.min_bytes(), &|| format!("{}'s element count", field()))?;
                let mut items = Vec::with_capacity(n);
                for i in 0..n {
                    items.push(self.value(elem, depth + 1, &|| format!("{}[{i}]", field()))?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

fn tensor_info(c: &mut Cursor<'_, '_>, index: usize) -> Result<TensorInfo> {
    let name = c.string(&|| format!("tensor info {index}'s name"))?;
    let field = |what: &str| {
        let (name, what) = (name.clone(), String::from(what));
        move || format!("tensor `{name}`: {what}")
    };
    let n_dims = c.u32(&field("number of dimensions"))?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(c.bad(format!(
            "tensor `{name}`: {n_dims} dimensions (ggml allows 1 to {MAX_DIMS})"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        dims.push(c.u64(&field(&format!("dimension {d}")))?);
    }
    let type_id = c.u32(&field("type"))?;
    let ggml_type = GgmlType::from_id(type_id)
        .ok_or_else(|| c.bad(format!("tensor `{name}`: unknown ggml type id {type_id}")))?;
    let byte_size = ggml_type
        .byte_size(&dims)
        .map_err(|why| c.bad(format!("tensor `{name}`: {why}")))?;
    let offset = c.u64(&field("offset"))?;
    Ok(TensorInfo {
        name,
        dims,
        ggml_type,
        offset,
        byte_size,
    })
}

impl<'a> GgufFile<'a> {
    /// Parses a GGUF file (version 3, or 2, which has the same layout) held in `bytes`,
    /// `path` naming it in errors. Tensor data is not copied: [`GgufFile::tensor_data`]
    /// borrows it from `bytes` (natively a memory-mapped file).
    ///
    /// Everything a file claims is checked before it is used: the magic and version, every
    /// length and count against the bytes left, value and tensor types, UTF-8 of strings and
    /// keys, duplicate keys and tensor names, dimensions (1 to 4, a product that fits, an
    /// innermost one divisible by the block size), `general.alignment` (a power of two), and each
    /// tensor's offset (aligned, inside the file, not overlapping another tensor). Any failure is
    /// [`Error::BadModelFile`] naming `path` and the field.
    pub fn parse(bytes: &'a [u8], path: &str) -> Result<GgufFile<'a>> {
        let mut c = Cursor::new(bytes, path);
        let magic = c.array::<4>(&|| "magic".into())?;
        if &magic != b"GGUF" {
            return Err(c.bad(format!(
                "not a GGUF file: the magic is {magic:?}, not \"GGUF\""
            )));
        }
        let version = c.u32(&|| "version".into())?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(c.bad(
                    "GGUF version 1 (32-bit counts, from 2023) is not supported; convert the \
                     model again with a current llama.cpp"
                        .into(),
                ));
            }
            v => {
                return Err(c.bad(format!(
                    "unsupported GGUF version {v} (supported: 2 and 3); a big-endian file \
                     reads as a huge version"
                )));
            }
        }
        // Each tensor info takes at least 8 (name) + 4 (dims) + 8 (one dim) + 4 + 8 bytes, each
        // key/value 8 (key) + 4 (type) + 1 bytes.
        let tensor_count = c.u64(&|| "tensor count".into())?;
        let kv_count = c.count(13, &|| "metadata key/value count".into())?;
        let mut metadata: Vec<(String, Value)> = Vec::with_capacity(kv_count);
        let mut keys = BTreeSet::new();
        for i in 0..kv_count {
            let key = c.string(&|| format!("metadata key {i}"))?;
            let field = || format!("metadata `{key}`");
            let ty = c.value_type(&field)?;
            let value = c.value(ty, 0, &field)?;
            if !keys.insert(key.clone()) {
                return Err(c.bad(format!("metadata key `{key}` appears twice")));
            }
            metadata.push((key, value));
        }
        let tensor_count = usize::try_from(tensor_count)
            .ok()
            .filter(|&n| n <= c.left() / 32)
            .ok_or_else(|| {
                c.bad(format!(
                    "tensor count {tensor_count} cannot fit in the {} bytes left (at least 32 \
                     bytes each)",
                    c.left()
                ))
            })?;
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, Value::U32(a))) if a.is_power_of_two() => *a as usize,
            Some((_, v)) => {
                return Err(c.bad(format!(
                    "metadata `general.alignment` = {v:?} must be a u32 power of two"
                )));
            }
        };
        let mut tensors = Vec::with_capacity(tensor_count);
        let mut names = BTreeSet::new();
        for i in 0..tensor_count {
            let t = tensor_info(&mut c, i)?;
            if !names.insert(t.name.clone()) {
                return Err(c.bad(format!("tensor `{}` appears twice", t.name)));
            }
            tensors.push(t);
        }
        let header_end = c.pos;
        let data_offset = header_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| c.bad("the header's size overflows with alignment".into()))?;
        if !tensors.is_empty() && data_offset > bytes.len() {
            return Err(c.bad(format!(
                "truncated: the data section starts at {data_offset}, the file has {} bytes",
                bytes.len()
            )));
        }
        check_tensor_ranges(&c, &tensors, data_offset, alignment)?;
        Ok(GgufFile {
            path: path.to_string(),
            version,
            alignment,
            data_offset,
            metadata,
            tensors,
            bytes,
        })
    }
}

/// Each tensor lies inside the file, at an aligned offset, and overlaps no other.
fn check_tensor_ranges(
    c: &Cursor<'_, '_>,
    tensors: &[TensorInfo],
    data_offset: usize,
    alignment: usize,
) -> Result<()> {
    let len = c.bytes.len() as u64;
    let mut ranges: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    for t in tensors {
        if !t.offset.is_multiple_of(alignment as u64) {
            return Err(c.bad(format!(
                "tensor `{}`: offset {} is not a multiple of the alignment {alignment}",
                t.name, t.offset
            )));
        }
        let start = (data_offset as u64).checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.byte_size));
        match (start, end) {
            (Some(s), Some(e)) if e <= len => ranges.push((s, e, &t.name)),
            _ => {
                return Err(c.bad(format!(
                    "tensor `{}`: offset {} + {} bytes runs past the end of the file ({len} \
                     bytes, data section at {data_offset})",
                    t.name, t.offset, t.byte_size
                )));
            }
        }
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if let [(_, end_a, a), (start_b, _, b)] = pair
            && start_b < end_a
        {
            return Err(c.bad(format!("tensors `{a}` and `{b}` overlap")));
        }
    }
    Ok(())
}
