//! safetensors I/O by tensor name: bytes in, bytes out (the CLI and the web page own the files).
//!
//! Loading converts `F32`, `F16`, `BF16` and `F64` to f32 tensors (an `F64` value too large for
//! f32 is an error, not a silent infinity) and keeps `I32` and `I64` as integer tensors; other
//! dtypes are an error naming the tensor and its dtype. Saving writes host f32, i32 and i64
//! tensors (little-endian, tensors in the crate's canonical order).
//!
//! Untrusted files: every way a file can be truncated, malformed or lie about its contents is an
//! [`Error::BadModelFile`] naming the file (`"<bytes>"` unless given through [`load_named`]) and
//! what is wrong, never a panic or an out-of-bounds read. The header is checked here first,
//! with checked arithmetic, before the `safetensors` crate sees the bytes: the crate validates
//! most things too, but adds the declared data length to the header length unchecked (a file
//! whose offsets sum to near `usize::MAX` panics it in debug builds), and its messages do not
//! name the tensor at fault.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::borrow::Borrow;

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::tensor::{DType, Storage, Tensor};

/// The `path` reported in errors for bytes that came without a file name.
pub const BYTES_PATH: &str = "<bytes>";

/// Length of the little-endian u64 header-size prefix.
const N_LEN: usize = 8;

/// Header key reserved for the string-to-string metadata map.
const METADATA_KEY: &str = "__metadata__";

/// Headers above this size are refused before parsing (the safetensors crate's own limit).
pub const MAX_HEADER_BYTES: usize = 100_000_000;

fn bad(path: &str, why: impl Into<String>) -> Error {
    Error::BadModelFile {
        path: path.into(),
        why: why.into(),
    }
}

/// Loads every tensor of a safetensors file, by name. See the module docs for dtypes.
pub fn load(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    load_named(bytes, BYTES_PATH)
}

/// Alias of [`load`].
pub fn load_safetensors(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>> {
    load(bytes)
}

/// [`load`], naming the file `path` in errors.
pub fn load_named(bytes: &[u8], path: &str) -> Result<BTreeMap<String, Tensor>> {
    Ok(load_with_metadata(bytes, path)?.0)
}

/// [`load_named`], also returning the header's `__metadata__` map (empty when absent).
pub fn load_with_metadata(
    bytes: &[u8],
    path: &str,
) -> Result<(BTreeMap<String, Tensor>, BTreeMap<String, String>)> {
    load_impl(bytes, path, false)
}

/// [`load_named`] for model weights: F16 and BF16 tensors stay 16-bit (weight dtypes, decoded
/// where they are read, see [`crate::quant`]) instead of being widened to f32.
pub fn load_weights_named(bytes: &[u8], path: &str) -> Result<BTreeMap<String, Tensor>> {
    Ok(load_impl(bytes, path, true)?.0)
}

fn load_impl(
    bytes: &[u8],
    path: &str,
    keep_16bit: bool,
) -> Result<(BTreeMap<String, Tensor>, BTreeMap<String, String>)> {
    let metadata = check_header(bytes, path)?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(path, format!("{e}")))?;
    let mut tensors = BTreeMap::new();
    for (name, view) in st.iter() {
        let t = match view.dtype() {
            Dtype::F16 | Dtype::BF16 if keep_16bit => {
                let dtype = if view.dtype() == Dtype::F16 {
                    DType::F16
                } else {
                    DType::BF16
                };
                Tensor::from_raw(view.shape(), dtype, view.data().to_vec())
                    .map_err(|e| bad(path, format!("tensor `{name}`: {e}")))?
            }
            _ => convert(name, view.dtype(), view.shape(), view.data(), path)?,
        };
        tensors.insert(name.to_string(), t);
    }
    Ok((tensors, metadata))
}

/// The header as declared: `(json, data section)`, with the length prefix checked.
fn split_file<'a>(bytes: &'a [u8], path: &str) -> Result<(&'a [u8], &'a [u8])> {
    let prefix: [u8; N_LEN] = bytes
        .get(..N_LEN)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| {
            bad(
                path,
                format!(
                    "file is {} bytes, shorter than the 8-byte header length",
                    bytes.len()
                ),
            )
        })?;
    let declared = u64::from_le_bytes(prefix);
    if declared > MAX_HEADER_BYTES as u64 {
        return Err(bad(
            path,
            format!("header length {declared} exceeds the limit of {MAX_HEADER_BYTES} bytes"),
        ));
    }
    let rest = bytes.len() - N_LEN;
    let n = usize::try_from(declared)
        .ok()
        .filter(|&n| n <= rest)
        .ok_or_else(|| {
            bad(
                path,
                format!(
                    "header length {declared} runs past the end of the file \
                     ({rest} bytes follow the length)"
                ),
            )
        })?;
    let (head, data) = bytes.split_at(N_LEN + n);
    Ok((&head[N_LEN..], data))
}

/// Checks the header with checked arithmetic: valid UTF-8 JSON object; every tensor entry has a
/// known dtype, a shape and `data_offsets` within the data section whose length is exactly
/// `numel * dtype size`; the tensors tile the data section exactly (no overlap, no gap, no
/// trailing bytes). Returns the `__metadata__` map.
fn check_header(bytes: &[u8], path: &str) -> Result<BTreeMap<String, String>> {
    let (header, data) = split_file(bytes, path)?;
    let text =
        core::str::from_utf8(header).map_err(|e| bad(path, format!("header is not UTF-8: {e}")))?;
    let json: Value = serde_json::from_str(text)
        .map_err(|e| bad(path, format!("header is not valid JSON: {e}")))?;
    let Value::Object(entries) = json else {
        return Err(bad(path, "header is not a JSON object"));
    };
    // (begin, end, name) of every tensor, to check the tiling.
    let mut spans: Vec<(usize, usize, &str)> = Vec::with_capacity(entries.len());
    let mut metadata = BTreeMap::new();
    for (name, entry) in &entries {
        if name == METADATA_KEY {
            let not_strings = || bad(path, "`__metadata__` is not a map of strings");
            for (k, v) in entry.as_object().ok_or_else(not_strings)? {
                let v = v.as_str().ok_or_else(not_strings)?;
                metadata.insert(k.clone(), v.to_string());
            }
            continue;
        }
        let fail = |why: String| bad(path, format!("tensor `{name}`: {why}"));
        let obj = entry
            .as_object()
            .ok_or_else(|| fail("entry is not an object".into()))?;
        let dtype_value = obj
            .get("dtype")
            .ok_or_else(|| fail("missing dtype".into()))?;
        let dtype: Dtype = serde_json::from_value(dtype_value.clone())
            .map_err(|_| fail(format!("unknown dtype {dtype_value}")))?;
        // Dims and offsets are read as u64 and checked before they become usize, so a 32-bit
        // target (wasm32) reports the same errors as a 64-bit one.
        let shape64: Vec<u64> = obj
            .get("shape")
            .and_then(Value::as_array)
            .and_then(|dims| dims.iter().map(Value::as_u64).collect())
            .ok_or_else(|| fail("shape is not a list of non-negative integers".into()))?;
        let offsets: Vec<u64> = obj
            .get("data_offsets")
            .and_then(Value::as_array)
            .and_then(|o| o.iter().map(Value::as_u64).collect())
            .ok_or_else(|| fail("data_offsets is not a list of non-negative integers".into()))?;
        let &[begin, end] = offsets.as_slice() else {
            return Err(fail(format!(
                "data_offsets has {} entries, expected [begin, end]",
                offsets.len()
            )));
        };
        if begin > end || end > data.len() as u64 {
            return Err(fail(format!(
                "data_offsets [{begin}, {end}] are outside the data section of {} bytes",
                data.len()
            )));
        }
        // Within the data section, so both fit usize.
        let (begin, end) = (begin as usize, end as usize);
        let shape: Vec<usize> = shape64
            .iter()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<_>>()
            .ok_or_else(|| fail(format!("shape {shape64:?} overflows")))?;
        let bits = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.bitsize()))
            .ok_or_else(|| fail(format!("shape {shape:?} overflows")))?;
        if bits % 8 != 0 || bits / 8 != end - begin {
            return Err(fail(format!(
                "shape {shape:?} of {dtype} needs {} bits but data_offsets [{begin}, {end}] hold {} bytes",
                bits,
                end - begin
            )));
        }
        spans.push((begin, end, name.as_str()));
    }
    spans.sort_unstable();
    let mut covered = 0usize;
    let mut previous = "";
    for &(begin, end, name) in &spans {
        if begin < covered {
            return Err(bad(
                path,
                format!("tensor `{name}` (bytes {begin}..{end}) overlaps tensor `{previous}`"),
            ));
        }
        if begin > covered {
            return Err(bad(
                path,
                format!("data bytes {covered}..{begin} belong to no tensor (before `{name}`)"),
            ));
        }
        covered = end;
        previous = name;
    }
    if covered != data.len() {
        return Err(bad(
            path,
            format!(
                "data section is {} bytes but the tensors cover {covered}",
                data.len()
            ),
        ));
    }
    Ok(metadata)
}

/// Decodes one tensor's little-endian bytes.
fn convert(name: &str, dtype: Dtype, shape: &[usize], data: &[u8], path: &str) -> Result<Tensor> {
    fn words<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        data.chunks_exact(N).map(|c| {
            let mut w = [0u8; N];
            w.copy_from_slice(c);
            w
        })
    }
    let t = match dtype {
        Dtype::F32 => Tensor::from_f32(shape, words(data).map(f32::from_le_bytes).collect()),
        Dtype::F16 => Tensor::from_f32(
            shape,
            words(data)
                .map(|w| half::f16::from_le_bytes(w).to_f32())
                .collect(),
        ),
        Dtype::BF16 => Tensor::from_f32(
            shape,
            words(data)
                .map(|w| half::bf16::from_le_bytes(w).to_f32())
                .collect(),
        ),
        Dtype::F64 => {
            let mut out = Vec::with_capacity(data.len() / 8);
            for (i, w) in words(data).enumerate() {
                let x = f64::from_le_bytes(w);
                let y = x as f32;
                if x.is_finite() && !y.is_finite() {
                    return Err(bad(
                        path,
                        format!(
                            "tensor `{name}`: F64 value {x} at flat index {i} does not fit in f32"
                        ),
                    ));
                }
                out.push(y);
            }
            Tensor::from_f32(shape, out)
        }
        Dtype::I32 => Tensor::from_i32(shape, words(data).map(i32::from_le_bytes).collect()),
        Dtype::I64 => Tensor::from_i64(shape, words(data).map(i64::from_le_bytes).collect()),
        other => {
            return Err(bad(
                path,
                format!(
                    "tensor `{name}` has dtype {other}; supported: F32, F16, BF16, F64 (as f32), I32, I64"
                ),
            ));
        }
    };
    // The header check makes the byte length match the shape; this only restates it.
    t.map_err(|e| bad(path, format!("tensor `{name}`: {e}")))
}

/// One tensor's bytes for the serializer.
struct Encoded {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl safetensors::View for &Encoded {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> alloc::borrow::Cow<'_, [u8]> {
        alloc::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn encode(t: &Tensor) -> Result<Encoded> {
    let (dtype, bytes): (Dtype, Vec<u8>) = match t.storage() {
        Storage::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Storage::I32(v) => (Dtype::I32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Storage::I64(v) => (Dtype::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        Storage::Packed(b) => match t.dtype() {
            DType::F16 => (Dtype::F16, b.to_vec()),
            DType::BF16 => (Dtype::BF16, b.to_vec()),
            other => {
                return Err(Error::DTypeMismatch {
                    op: "io::save",
                    tensor: "tensor".into(),
                    expected: "f32, f16, bf16, i32 or i64 (safetensors has no GGML block types: write GGUF)",
                    got: other,
                });
            }
        },
        Storage::Device(_) => return Err(Error::NotOnHost { op: "io::save" }),
    };
    Ok(Encoded {
        dtype,
        shape: t.shape().to_vec(),
        bytes,
    })
}

/// Serializes host tensors (f32, i32, i64) to safetensors bytes.
pub fn save<K: Borrow<str> + Ord>(tensors: &BTreeMap<K, Tensor>) -> Result<Vec<u8>> {
    save_with_metadata(tensors, &BTreeMap::new())
}

/// [`save`] with a `__metadata__` string map in the header (left out when empty).
pub fn save_with_metadata<K: Borrow<str> + Ord>(
    tensors: &BTreeMap<K, Tensor>,
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut encoded = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let name: &str = name.borrow();
        if name == METADATA_KEY {
            return Err(bad(
                "<output>",
                "tensor name `__metadata__` is reserved by the safetensors format",
            ));
        }
        encoded.push((name.to_string(), encode(t)?));
    }
    let info = if metadata.is_empty() {
        None
    } else {
        Some(
            metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    safetensors::serialize(encoded.iter().map(|(n, e)| (n.as_str(), e)), info)
        .map_err(|e| bad("<output>", format!("{e}")))
}

#[cfg(test)]
mod tests {
    // wasm-pack test runs these in the browser too.
    use super::*;
    use crate::rng::Rng;
    use crate::tensor::{DeviceBuffer, DeviceId};
    use alloc::sync::Arc;
    use alloc::vec;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A file from a header string and a data section.
    fn file(header: impl AsRef<[u8]>, data: &[u8]) -> Vec<u8> {
        let header = header.as_ref();
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header);
        f.extend_from_slice(data);
        f
    }

    /// The `why` of a `BadModelFile`, checking the path.
    fn why(r: Result<BTreeMap<String, Tensor>>, path: &str) -> String {
        match r {
            Err(Error::BadModelFile { path: p, why }) => {
                assert_eq!(p, path);
                why
            }
            other => panic!("expected BadModelFile, got {other:?}"),
        }
    }

    fn sample() -> BTreeMap<String, Tensor> {
        let mut m = BTreeMap::new();
        let specials = vec![
            1.5f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x7fc0_1234), // NaN with a payload
            f32::from_bits(1),           // smallest subnormal
            f32::MAX,
        ];
        m.insert(
            "w.special".into(),
            Tensor::from_f32(&[7], specials).unwrap(),
        );
        let mut r = Rng::new(3);
        m.insert(
            "layer.0.weight".into(),
            r.normal_tensor(&[3, 5], 0.0, 1.0).unwrap(),
        );
        m.insert("scalar".into(), Tensor::scalar(-2.25));
        m.insert("empty".into(), Tensor::from_f32(&[0, 3], vec![]).unwrap());
        m.insert(
            "ids".into(),
            Tensor::from_i32(&[2, 2], vec![i32::MIN, -1, 0, i32::MAX]).unwrap(),
        );
        m.insert(
            "big_ids".into(),
            Tensor::from_i64(&[3], vec![i64::MIN, 42, i64::MAX]).unwrap(),
        );
        m.insert(
            "ünïcode name".into(),
            Tensor::full(&[1, 1, 2], 0.5).unwrap(),
        );
        m
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let tensors = sample();
        let bytes = save(&tensors).unwrap();
        assert_eq!(bytes, save(&tensors).unwrap(), "save must be deterministic");
        let back = load(&bytes).unwrap();
        assert_eq!(
            back.keys().collect::<Vec<_>>(),
            tensors.keys().collect::<Vec<_>>()
        );
        for (name, t) in &tensors {
            assert!(t.bit_eq(&back[name]), "{name}: {:?} vs {:?}", t, back[name]);
        }
        assert_eq!(back["ids"].dtype(), crate::DType::I32);
        assert_eq!(back["big_ids"].dtype(), crate::DType::I64);
        // The header is 8-byte aligned, as the format recommends.
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(n % 8, 0);
    }

    #[test]
    fn metadata_round_trip() {
        let mut meta = BTreeMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        meta.insert("step".to_string(), "1200".to_string());
        let bytes = save_with_metadata(&sample(), &meta).unwrap();
        let (tensors, back) = load_with_metadata(&bytes, "m.safetensors").unwrap();
        assert_eq!(back, meta);
        assert_eq!(tensors.len(), sample().len());
        let (_, none) = load_with_metadata(&save(&sample()).unwrap(), "x").unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn loads_the_format_documentation_example() {
        // The example file from the safetensors docs: an I32 [2, 2] of zeros.
        let f = file(
            r#"{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}"#,
            &[0; 16],
        );
        assert_eq!(f[0], b'<');
        let t = &load(&f).unwrap()["test"];
        assert_eq!(t.shape(), &[2, 2]);
        assert_eq!(t.to_i64_vec().unwrap(), vec![0; 4]);
    }

    #[test]
    fn half_precision_files_load_as_f32() {
        use half::{bf16, f16};
        let vals = [1.0f32, -2.5, 65504.0, 6.0e-8, 0.1, f32::INFINITY];
        let h: Vec<u8> = vals
            .iter()
            .flat_map(|&x| f16::from_f32(x).to_le_bytes())
            .collect();
        let b: Vec<u8> = vals
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect();
        let mut data = h.clone();
        data.extend_from_slice(&b);
        let header = format!(
            r#"{{"h":{{"dtype":"F16","shape":[2,3],"data_offsets":[0,{}]}},"b":{{"dtype":"BF16","shape":[6],"data_offsets":[{},{}]}}}}"#,
            h.len(),
            h.len(),
            h.len() + b.len()
        );
        let got = load(&file(&header, &data)).unwrap();
        let want_h: Vec<f32> = vals.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
        let want_b: Vec<f32> = vals.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
        assert_eq!(got["h"].shape(), &[2, 3]);
        assert_eq!(got["h"].as_f32().unwrap(), want_h.as_slice());
        assert_eq!(got["b"].as_f32().unwrap(), want_b.as_slice());
        // Hand-checked: 1, -2.5, 65504 and inf are exact in both; 0.1 is not.
        assert_eq!(&want_h[..3], &[1.0, -2.5, 65504.0]);
        assert_eq!(want_h[4], 0.099975586);
        assert_eq!(want_b[4] as f64, 0.10009765625); // 0x3DCD
        assert_eq!(want_b[2], 65536.0);
        assert!(want_h[3] > 0.0 && want_h[3] < 1e-7, "f16 subnormal");
    }

    #[test]
    fn f64_converts_and_out_of_range_is_an_error() {
        let data: Vec<u8> = [0.1f64, -3.0, f64::NAN, f64::NEG_INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let header = r#"{"d":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}}"#;
        let t = &load(&file(header, &data)).unwrap()["d"];
        let v = t.as_f32().unwrap();
        assert_eq!(&v[..2], &[0.1f32, -3.0]);
        assert!(v[2].is_nan() && v[3] == f32::NEG_INFINITY);

        let data: Vec<u8> = [1.0f64, 1e300]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let header = r#"{"huge":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}"#;
        let w = why(load(&file(header, &data)), BYTES_PATH);
        assert!(w.contains("huge") && w.contains("index 1"), "{w}");
    }

    #[test]
    fn unsupported_dtypes_name_tensor_and_dtype() {
        for (dtype, size) in [("U8", 1), ("BOOL", 1), ("I16", 2), ("U64", 8), ("C64", 8)] {
            let header = format!(
                r#"{{"mask":{{"dtype":"{dtype}","shape":[2],"data_offsets":[0,{}]}}}}"#,
                2 * size
            );
            let w = why(load(&file(&header, &vec![0; 2 * size])), BYTES_PATH);
            assert!(w.contains("`mask`") && w.contains(dtype), "{w}");
        }
    }

    #[test]
    fn each_kind_of_bad_file_is_a_clear_error() {
        let good_header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let good = file(good_header, &[0; 8]);
        assert!(load(&good).is_ok());
        let hlen = good_header.len();

        let mut cases: Vec<(&str, Vec<u8>, &str)> = Vec::new();
        cases.push(("empty file", vec![], "shorter than the 8-byte"));
        cases.push(("7 bytes", vec![0; 7], "shorter than the 8-byte"));
        // The header length runs past the end of the file.
        let mut f = good.clone();
        f[..8].copy_from_slice(&((good.len() - 7) as u64).to_le_bytes());
        cases.push(("header length beyond the file", f, "runs past the end"));
        let mut f = good.clone();
        f[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        cases.push(("header length u64::MAX", f, "exceeds the limit"));
        let mut f = good.clone();
        f[..8].copy_from_slice(&200_000_000u64.to_le_bytes());
        cases.push(("huge declared header", f, "exceeds the limit"));
        // Header length too short: the JSON is cut.
        let mut f = good.clone();
        f[..8].copy_from_slice(&((hlen - 1) as u64).to_le_bytes());
        cases.push(("header length too short", f, "not valid JSON"));
        // Cut data.
        cases.push((
            "truncated data",
            good[..good.len() - 1].to_vec(),
            "outside the data section",
        ));
        // Extra bytes after the last tensor.
        let mut f = good.clone();
        f.push(0);
        cases.push(("trailing bytes", f, "cover 8"));
        // Not UTF-8, not JSON, not an object.
        cases.push(("non-UTF-8 header", file(b"{\"a\xff\":1}", &[]), "not UTF-8"));
        cases.push(("invalid JSON", file("{\"a\": [1, 2", &[]), "not valid JSON"));
        cases.push(("header is a list", file("[1, 2]", &[]), "not a JSON object"));
        // Lies about one tensor.
        let lie = |entry: &str, data: usize| file(format!(r#"{{"a":{entry}}}"#), &vec![0u8; data]);
        cases.push((
            "shape * dtype size != byte length",
            lie(r#"{"dtype":"F32","shape":[3,3],"data_offsets":[0,16]}"#, 16),
            "shape [3, 3] of F32 needs 288 bits",
        ));
        cases.push((
            "offsets beyond the data",
            lie(
                r#"{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}"#,
                16,
            ),
            "outside the data section of 16 bytes",
        ));
        cases.push((
            "begin after end",
            lie(r#"{"dtype":"F32","shape":[0],"data_offsets":[8,4]}"#, 16),
            "outside the data section",
        ));
        cases.push((
            "negative offset",
            lie(r#"{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}"#, 4),
            "data_offsets is not",
        ));
        cases.push((
            "three offsets",
            lie(r#"{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}"#, 4),
            "has 3 entries",
        ));
        cases.push((
            "fractional dim",
            lie(r#"{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}"#, 4),
            "shape is not",
        ));
        cases.push((
            "missing dtype",
            lie(r#"{"shape":[1],"data_offsets":[0,4]}"#, 4),
            "missing dtype",
        ));
        cases.push((
            "unknown dtype",
            lie(r#"{"dtype":"F128","shape":[1],"data_offsets":[0,16]}"#, 16),
            "unknown dtype",
        ));
        cases.push(("entry not an object", lie("5", 0), "not an object"));
        cases.push((
            "shape overflow",
            lie(
                r#"{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}"#,
                0,
            ),
            "overflows",
        ));
        // Two tensors: overlapping, a gap, and missing data for the second.
        let two = |a: &str, b: &str, data: usize| {
            file(
                format!(
                    r#"{{"x":{{"dtype":"F32","shape":[2],"data_offsets":{a}}},"y":{{"dtype":"F32","shape":[2],"data_offsets":{b}}}}}"#
                ),
                &vec![0u8; data],
            )
        };
        cases.push(("overlap", two("[0,8]", "[4,12]", 12), "overlaps tensor `x`"));
        cases.push(("same bytes twice", two("[0,8]", "[0,8]", 8), "overlaps"));
        cases.push((
            "gap",
            two("[0,8]", "[12,20]", 20),
            "bytes 8..12 belong to no tensor",
        ));
        cases.push((
            "data missing for y",
            two("[0,8]", "[8,16]", 8),
            "outside the data section",
        ));
        cases.push((
            "bad metadata",
            file(r#"{"__metadata__":{"k":1}}"#, &[]),
            "`__metadata__`",
        ));

        for (what, bytes, needle) in cases {
            let w = why(load_named(&bytes, "model.safetensors"), "model.safetensors");
            assert!(w.contains(needle), "{what}: `{w}` lacks `{needle}`");
            assert_eq!(why(load(&bytes), BYTES_PATH), w, "{what}");
        }
    }

    #[test]
    fn offsets_summing_past_usize_max_do_not_panic() {
        // Eight U8 tensors of 2^61 - 1 bytes each: each entry is consistent on its own, and the
        // offsets tile [0, 2^64 - 8). The safetensors crate alone overflows `end + header` here.
        let size: u64 = (1 << 61) - 1;
        let entries: Vec<String> = (0..8u64)
            .map(|i| {
                format!(
                    r#""t{i}":{{"dtype":"U8","shape":[{size}],"data_offsets":[{},{}]}}"#,
                    i * size,
                    (i + 1) * size
                )
            })
            .collect();
        let f = file(format!("{{{}}}", entries.join(",")), &[]);
        let w = why(load(&f), BYTES_PATH);
        assert!(w.contains("outside the data section"), "{w}");
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut small = BTreeMap::new();
        small.insert("a", Tensor::from_f32(&[2, 3], vec![1.0; 6]).unwrap());
        small.insert("b", Tensor::from_i64(&[2], vec![7, -7]).unwrap());
        small.insert("c", Tensor::scalar(3.0));
        let bytes = save(&small).unwrap();
        assert!(load(&bytes).is_ok());
        for len in 0..bytes.len() {
            let r = load(&bytes[..len]);
            assert!(
                matches!(r, Err(Error::BadModelFile { .. })),
                "length {len}: {r:?}"
            );
        }
    }

    #[test]
    fn random_single_byte_corruptions_never_panic() {
        let mut small = BTreeMap::new();
        small.insert(
            "w",
            Tensor::from_f32(&[2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap(),
        );
        small.insert("ids", Tensor::from_i32(&[3], vec![1, 2, 3]).unwrap());
        let bytes = save(&small).unwrap();
        let mut rng = Rng::new(2024);
        let (mut ok, mut err) = (0, 0);
        for _ in 0..2000 {
            let mut f = bytes.clone();
            let i = rng.below(f.len() as u64) as usize;
            let b = rng.below(256) as u8;
            f[i] = b;
            match load(&f) {
                Ok(t) => {
                    // Accepted corruptions (data bytes, header padding, a name's letter) keep
                    // the tensors and their element counts.
                    ok += 1;
                    assert_eq!(t.len(), 2);
                    assert_eq!(t.values().map(Tensor::numel).sum::<usize>(), 7);
                }
                Err(Error::BadModelFile { .. }) => err += 1,
                Err(e) => panic!("unexpected error kind: {e:?}"),
            }
        }
        assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
    }

    #[derive(Debug)]
    struct FakeDeviceBuffer;
    impl DeviceBuffer for FakeDeviceBuffer {
        fn device(&self) -> DeviceId {
            DeviceId(9)
        }
        fn as_any(&self) -> &dyn core::any::Any {
            self
        }
    }

    #[test]
    fn save_errors() {
        let mut m = BTreeMap::new();
        m.insert("__metadata__".to_string(), Tensor::scalar(1.0));
        assert!(matches!(save(&m), Err(Error::BadModelFile { .. })));
        let mut m = BTreeMap::new();
        let dev = Tensor::from_device(&[2], crate::DType::F32, Arc::new(FakeDeviceBuffer));
        m.insert("on_gpu".to_string(), dev);
        assert!(matches!(save(&m), Err(Error::NotOnHost { .. })));
        // No tensors at all is a valid (empty) file.
        let empty: BTreeMap<String, Tensor> = BTreeMap::new();
        assert!(load(&save(&empty).unwrap()).unwrap().is_empty());
    }
}
