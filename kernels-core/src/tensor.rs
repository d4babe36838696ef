//! Contiguous row-major tensors with checked shapes.
//!
//! A [`Tensor`] is a shape, a dtype and a shared storage. Storage is either host memory
//! (`f32`, `i32` or `i64` elements, or the packed bytes of a weight dtype such as `q4_k`) or a
//! buffer owned by a device backend ([`DeviceBuffer`]). Cloning a
//! tensor and [`Tensor::reshape`] share the storage (views); kernels never mutate shared storage.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::any::Any;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

pub use crate::dtype::DType;
use crate::error::{Error, Result};
pub use crate::packed::{PackedBytes, SharedBytes};

/// Identity of the device a tensor lives on. `DeviceId::CPU` is host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u64);

/// The next id [`DeviceId::fresh`] hands out. `usize`, not `u64`: 32-bit targets without 64-bit
/// atomics (`thumbv7em-none-eabihf`) have this one.
static NEXT_DEVICE: AtomicUsize = AtomicUsize::new(1);

impl DeviceId {
    /// Host memory.
    pub const CPU: DeviceId = DeviceId(0);

    /// A new device id, never [`DeviceId::CPU`] and never handed out before in this process
    /// (one global counter for every backend, so buffers of two devices are never confused).
    pub fn fresh() -> DeviceId {
        loop {
            let n = NEXT_DEVICE.fetch_add(1, Ordering::Relaxed);
            // 0 comes round again only after the counter wraps: it is the host's.
            if n != 0 {
                return DeviceId(n as u64);
            }
        }
    }
}

/// A buffer owned by a device backend. Backends downcast through [`DeviceBuffer::as_any`].
pub trait DeviceBuffer: Any + fmt::Debug {
    /// The device that owns this buffer.
    fn device(&self) -> DeviceId;
    /// For the owning backend to recover its concrete buffer type.
    fn as_any(&self) -> &dyn Any;
}

/// Where a tensor's elements live.
#[derive(Clone)]
pub enum Storage {
    F32(Arc<Vec<f32>>),
    I32(Arc<Vec<i32>>),
    I64(Arc<Vec<i64>>),
    /// The little-endian bytes of a weight dtype (`f16`, `bf16`, GGML blocks): see
    /// [`crate::quant`].
    Packed(PackedBytes),
    Device(Arc<dyn DeviceBuffer>),
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::F32(v) => write!(f, "F32(len {})", v.len()),
            Storage::I32(v) => write!(f, "I32(len {})", v.len()),
            Storage::I64(v) => write!(f, "I64(len {})", v.len()),
            Storage::Packed(v) => write!(f, "Packed({} bytes)", v.len()),
            Storage::Device(b) => write!(f, "Device({b:?})"),
        }
    }
}

/// A contiguous row-major tensor. See the module docs.
#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    dtype: DType,
    storage: Storage,
}

/// Number of elements of a shape; `None` on overflow.
pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// `n` copies of `v`, reserved fallibly: a size from a flag or a file that does not fit is an
/// [`Error::OutOfMemory`] naming the shape, never an abort.
fn filled_f32(n: usize, v: f32, shape: &[usize]) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
        what: format!("an f32 tensor of shape {shape:?}"),
        bytes: (n as u64).saturating_mul(4),
    })?;
    out.resize(n, v);
    Ok(out)
}

impl Tensor {
    fn check_len(op: &'static str, shape: &[usize], len: usize) -> Result<()> {
        match numel(shape) {
            Some(n) if n == len => Ok(()),
            Some(n) => Err(Error::bad_shape(
                op,
                "data",
                shape,
                format!("shape holds {n} elements but {len} were given"),
            )),
            None => Err(Error::bad_shape(
                op,
                "data",
                shape,
                "element count overflows usize",
            )),
        }
    }

    /// An f32 tensor from its elements in row-major order.
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Result<Self> {
        Self::check_len("tensor", shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            dtype: DType::F32,
            storage: Storage::F32(Arc::new(data)),
        })
    }
    /// [`Tensor::from_f32`] keeping the given shape vector (a kernel's result).
    pub(crate) fn from_f32_owned(shape: Vec<usize>, data: Vec<f32>) -> Result<Self> {
        Self::check_len("tensor", &shape, data.len())?;
        Ok(Tensor {
            shape,
            dtype: DType::F32,
            storage: Storage::F32(Arc::new(data)),
        })
    }
    /// An i32 tensor from its elements in row-major order.
    pub fn from_i32(shape: &[usize], data: Vec<i32>) -> Result<Self> {
        Self::check_len("tensor", shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            dtype: DType::I32,
            storage: Storage::I32(Arc::new(data)),
        })
    }
    /// An i64 tensor from its elements in row-major order.
    pub fn from_i64(shape: &[usize], data: Vec<i64>) -> Result<Self> {
        Self::check_len("tensor", shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            dtype: DType::I64,
            storage: Storage::I64(Arc::new(data)),
        })
    }
    /// A tensor of a weight dtype from its packed little-endian bytes (GGML's block layouts for
    /// the quantized ones; blocks run along the last dimension, so it must hold a whole number
    /// of them). Fails unless `bytes` is exactly the size `shape` needs.
    pub fn from_raw(shape: &[usize], dtype: DType, bytes: Vec<u8>) -> Result<Self> {
        Self::from_packed(shape, dtype, PackedBytes::owned(bytes))
    }
    /// As [`Tensor::from_raw`], with `part` (bytes of `owner`: a memory-mapped file, say) shared
    /// with `owner` rather than copied; copied when `part` is not inside `owner`.
    pub fn from_shared(
        shape: &[usize],
        dtype: DType,
        owner: &SharedBytes,
        part: &[u8],
    ) -> Result<Self> {
        let bytes =
            PackedBytes::within(owner, part).unwrap_or_else(|| PackedBytes::owned(part.to_vec()));
        Self::from_packed(shape, dtype, bytes)
    }
    /// As [`Tensor::from_raw`], with the bytes in `layout`: [`crate::packed::Layout::Rows8`]
    /// (the CPU backend's interleaved `q4_0` / `q5_0` / `q8_0`,
    /// `cpu::fast::qdot::interleave`) for a matrix of those dtypes only.
    pub fn from_raw_in(
        shape: &[usize],
        dtype: DType,
        bytes: Vec<u8>,
        layout: crate::packed::Layout,
    ) -> Result<Self> {
        if layout != crate::packed::Layout::Plain
            && (shape.len() != 2 || !crate::cpu::fast::qdot::interleave::supports(dtype))
        {
            return Err(Error::bad_shape(
                "tensor",
                "data",
                shape,
                format!("no interleaved layout for a {dtype} tensor of this rank"),
            ));
        }
        Self::from_packed(shape, dtype, PackedBytes::owned_in(bytes, layout))
    }
    fn from_packed(shape: &[usize], dtype: DType, bytes: PackedBytes) -> Result<Self> {
        if !dtype.is_weight() {
            return Err(Error::DTypeMismatch {
                op: "tensor",
                tensor: "data".into(),
                expected: "a weight dtype (f16, bf16, q8_0, q4_0, q4_1, q5_0, q4_k, q6_k)",
                got: dtype,
            });
        }
        let n = numel(shape).ok_or_else(|| {
            Error::bad_shape("tensor", "data", shape, "element count overflows usize")
        })?;
        let last = shape.last().copied().unwrap_or(1);
        if !last.is_multiple_of(dtype.block_elems()) {
            return Err(Error::bad_shape(
                "tensor",
                "data",
                shape,
                format!(
                    "{dtype} blocks of {} elements run along the last dimension, which is {last}",
                    dtype.block_elems()
                ),
            ));
        }
        match dtype.bytes_for(n) {
            Some(need) if need == bytes.len() => Ok(Tensor {
                shape: shape.to_vec(),
                dtype,
                storage: Storage::Packed(bytes),
            }),
            need => Err(Error::bad_shape(
                "tensor",
                "data",
                shape,
                format!(
                    "{n} elements of {dtype} take {} bytes, got {}",
                    need.map_or("too many".into(), |b| format!("{b}")),
                    bytes.len()
                ),
            )),
        }
    }
    /// This f32 host tensor encoded as the weight dtype `dtype` ([`crate::quant::quantize`]).
    pub fn quantize(&self, dtype: DType) -> Result<Tensor> {
        let bytes = crate::quant::quantize(dtype, self.as_f32()?)?;
        Tensor::from_raw(&self.shape, dtype, bytes)
    }
    /// This host tensor as f32: a weight dtype decoded ([`crate::quant::dequantize`]), an f32
    /// tensor shared as it is. The CPU reference of every op on a weight dtype.
    pub fn dequantize(&self) -> Result<Tensor> {
        match &self.storage {
            Storage::F32(_) => Ok(self.clone()),
            Storage::Packed(b) => {
                let v = match b.layout() {
                    crate::packed::Layout::Plain => {
                        crate::quant::dequantize(self.dtype, b, self.numel())?
                    }
                    crate::packed::Layout::Rows8 => {
                        let plain = crate::cpu::fast::qdot::interleave::plain_bytes(self)?;
                        crate::quant::dequantize(self.dtype, &plain, self.numel())?
                    }
                };
                Tensor::from_f32(&self.shape, v)
            }
            Storage::Device(_) => Err(Error::NotOnHost { op: "dequantize" }),
            Storage::I32(_) | Storage::I64(_) => Err(Error::DTypeMismatch {
                op: "dequantize",
                tensor: "x".into(),
                expected: "f32 or a weight dtype",
                got: self.dtype,
            }),
        }
    }
    /// The packed bytes of a host tensor of a weight dtype, in GGML's plain layout (an error
    /// for the CPU backend's interleaved copy: [`Tensor::packed_in`] gives those).
    pub fn packed_bytes(&self) -> Result<&[u8]> {
        match self.packed_in()? {
            (b, crate::packed::Layout::Plain) => Ok(b),
            (_, crate::packed::Layout::Rows8) => Err(Error::UnsupportedOnBackend {
                op: "packed_bytes (the weight is interleaved for the CPU backend)",
                backend: "cpu".into(),
            }),
        }
    }
    /// The packed bytes of a host tensor of a weight dtype and their layout.
    pub fn packed_in(&self) -> Result<(&[u8], crate::packed::Layout)> {
        match &self.storage {
            Storage::Packed(b) => Ok((b, b.layout())),
            Storage::Device(_) => Err(Error::NotOnHost { op: "packed_bytes" }),
            _ => Err(Error::DTypeMismatch {
                op: "packed_bytes",
                tensor: "self".into(),
                expected: "a weight dtype",
                got: self.dtype,
            }),
        }
    }
    /// Bytes the elements take (packed for weight dtypes).
    pub fn byte_len(&self) -> usize {
        // Checked at construction (`from_raw` requires whole blocks).
        self.dtype.bytes_for(self.numel()).unwrap_or(0)
    }
    /// An f32 scalar (shape `[]`).
    pub fn scalar(v: f32) -> Self {
        Tensor {
            shape: Vec::new(),
            dtype: DType::F32,
            storage: Storage::F32(Arc::new(vec![v])),
        }
    }
    /// All-zero f32 tensor.
    pub fn zeros(shape: &[usize]) -> Result<Self> {
        let n = numel(shape)
            .ok_or_else(|| Error::bad_shape("zeros", "shape", shape, "element count overflows"))?;
        Self::from_f32(shape, filled_f32(n, 0.0, shape)?)
    }
    /// f32 tensor filled with `v`.
    pub fn full(shape: &[usize], v: f32) -> Result<Self> {
        let n = numel(shape)
            .ok_or_else(|| Error::bad_shape("full", "shape", shape, "element count overflows"))?;
        Self::from_f32(shape, filled_f32(n, v, shape)?)
    }
    /// A tensor over a device buffer. Backends call this; the shape is trusted to match.
    pub fn from_device(shape: &[usize], dtype: DType, buf: Arc<dyn DeviceBuffer>) -> Self {
        Tensor {
            shape: shape.to_vec(),
            dtype,
            storage: Storage::Device(buf),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Checked at construction.
        self.shape.iter().product()
    }
    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The storage (host vectors or a device buffer).
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    /// True when no other tensor shares this one's storage (no clone, view or reshape of it is
    /// alive), so a backend may write into it without anyone else seeing the change. `&mut`:
    /// the caller owns the only handle it checks.
    pub fn storage_is_unique(&mut self) -> bool {
        match &mut self.storage {
            Storage::F32(a) => Arc::get_mut(a).is_some(),
            Storage::I32(a) => Arc::get_mut(a).is_some(),
            Storage::I64(a) => Arc::get_mut(a).is_some(),
            Storage::Packed(a) => a.is_unique(),
            Storage::Device(a) => Arc::get_mut(a).is_some(),
        }
    }
    /// The f32 host elements for writing in place, when the storage is unique
    /// ([`Tensor::storage_is_unique`]); `None` when shared, integer or on a device.
    pub fn f32_mut_if_unique(&mut self) -> Option<&mut [f32]> {
        match &mut self.storage {
            Storage::F32(a) => Arc::get_mut(a).map(|v| v.as_mut_slice()),
            _ => None,
        }
    }
    /// The device this tensor lives on.
    pub fn device(&self) -> DeviceId {
        match &self.storage {
            Storage::Device(b) => b.device(),
            _ => DeviceId::CPU,
        }
    }
    /// Fails with [`Error::DeviceMismatch`] naming `op` unless this tensor lives on `device`:
    /// mixing devices is an error, never a silent copy.
    pub fn check_device(&self, op: &'static str, device: DeviceId) -> Result<()> {
        if self.device() != device {
            return Err(Error::DeviceMismatch {
                op,
                expected: device.0,
                got: self.device().0,
            });
        }
        Ok(())
    }
    /// True when the elements are in host memory.
    pub fn is_host(&self) -> bool {
        !matches!(self.storage, Storage::Device(_))
    }
    /// The device buffer, if this tensor lives on a device.
    pub fn device_buffer(&self) -> Option<&Arc<dyn DeviceBuffer>> {
        match &self.storage {
            Storage::Device(b) => Some(b),
            _ => None,
        }
    }

    /// Host f32 elements.
    pub fn as_f32(&self) -> Result<&[f32]> {
        match &self.storage {
            Storage::F32(v) => Ok(v),
            Storage::Device(_) => Err(Error::NotOnHost { op: "as_f32" }),
            _ => Err(Error::DTypeMismatch {
                op: "as_f32",
                tensor: "self".into(),
                expected: "f32",
                got: self.dtype,
            }),
        }
    }
    /// Host f32 elements, copied out.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(self.as_f32()?.to_vec())
    }
    /// Host integer elements widened to i64 (i32 or i64 tensors).
    pub fn to_i64_vec(&self) -> Result<Vec<i64>> {
        match &self.storage {
            Storage::I32(v) => Ok(v.iter().map(|&x| x as i64).collect()),
            Storage::I64(v) => Ok(v.to_vec()),
            Storage::Device(_) => Err(Error::NotOnHost { op: "to_i64_vec" }),
            Storage::F32(_) | Storage::Packed(_) => Err(Error::DTypeMismatch {
                op: "to_i64_vec",
                tensor: "self".into(),
                expected: "i32 or i64",
                got: self.dtype,
            }),
        }
    }
    /// The single element of a one-element f32 tensor.
    pub fn to_scalar(&self) -> Result<f32> {
        let v = self.as_f32()?;
        match v {
            [x] => Ok(*x),
            _ => Err(Error::bad_shape(
                "to_scalar",
                "self",
                &self.shape,
                "expected one element",
            )),
        }
    }

    /// A view with a new shape over the same storage (no copy). The element count must match.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        match numel(shape) {
            Some(n) if n == self.numel() => Ok(Tensor {
                shape: shape.to_vec(),
                dtype: self.dtype,
                storage: self.storage.clone(),
            }),
            _ => Err(Error::mismatch("reshape", &self.shape, shape)),
        }
    }

    /// Bit-exact equality of shape, dtype and host elements (NaN equals NaN of the same bits).
    pub fn bit_eq(&self, other: &Tensor) -> bool {
        if self.shape != other.shape || self.dtype != other.dtype {
            return false;
        }
        match (&self.storage, &other.storage) {
            (Storage::F32(a), Storage::F32(b)) => a
                .iter()
                .zip(b.iter())
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            (Storage::I32(a), Storage::I32(b)) => a == b,
            (Storage::I64(a), Storage::I64(b)) => a == b,
            (Storage::Packed(a), Storage::Packed(b)) => a == b,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn fresh_device_ids_are_unique_and_not_the_host() {
        let (a, b) = (DeviceId::fresh(), DeviceId::fresh());
        assert_ne!(a, b);
        assert_ne!(a, DeviceId::CPU);
        assert_ne!(b, DeviceId::CPU);
    }
}
