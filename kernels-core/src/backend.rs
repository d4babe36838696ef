//! The backend trait every device implements, and the CPU backend.
//!
//! Shape-first and small: upload, download (async), and run one op in one direction on device
//! tensors. Models and autograd are written once against `dyn Backend`; nothing in a model knows
//! which device it is on.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use crate::cpu::{self, Data, OwnedData, View};
use crate::error::{Error, Result};
use crate::op::{Direction, Op};
pub use crate::tensor::DeviceId;
use crate::tensor::{Storage, Tensor};

/// A boxed future that need not be `Send` (browser futures are not).
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// A device that runs ops. See the module docs.
pub trait Backend {
    /// Human-readable name, e.g. `cpu` or `wgpu (llvmpipe, Vulkan)`.
    fn name(&self) -> String;
    /// The device tensors made by this backend live on.
    fn device(&self) -> DeviceId;
    /// Copies a host tensor to this device (a cheap clone for the CPU).
    fn upload(&self, t: &Tensor) -> Result<Tensor>;
    /// Copies a tensor of this device to the host. Async: in the browser nothing may block.
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>>;
    /// Runs one op in one direction (see [`crate::op`] for the backward argument convention).
    /// Every input must live on this device.
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;
    /// Runs `op` forward with its leading inputs given by value (donated) and the rest borrowed.
    ///
    /// The aliasing rule: for an op that declares it ([`crate::op::OpKind::donated_inputs`],
    /// e.g. `kv_write`, or `rope_kv_write`'s two caches), a backend may write output `i` into
    /// donated tensor `i`'s storage and return a tensor sharing it, but only when that storage
    /// is held by no other tensor ([`Tensor::storage_is_unique`]). Otherwise, and for every other op, this is
    /// [`Backend::run`]: the result never differs from the functional one, and no tensor the
    /// caller can still see changes. A caller that keeps a clone or view of the donated tensor
    /// therefore gets a copy; one that hands over its only handle gets an in-place write (a KV
    /// cache grows with no copy of the whole cache). Device backends order the write after any
    /// recorded work that read the buffer, as for every launch.
    fn run_donated(&self, op: &Op, donated: Vec<Tensor>, rest: &[&Tensor]) -> Result<Vec<Tensor>> {
        let mut all: Vec<&Tensor> = donated.iter().collect();
        all.extend_from_slice(rest);
        self.run(op, Direction::Forward, &all)
    }
    /// Submits any recorded work. Backends that batch override this.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    /// An f32 tensor of zeros on this device.
    fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        self.upload(&Tensor::zeros(shape)?)
    }
    /// Runs one decode step: `record` records it (its ops) and returns its outputs. A backend
    /// that captures steps (CUDA graphs) may instead relaunch the step it captured for
    /// `step.key` with the position and inputs of this one, without calling `record`, and
    /// return that capture's outputs (overwritten in place). The default calls `record`.
    fn replay_step(
        &self,
        step: &ReplayStep<'_>,
        record: &mut dyn FnMut() -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let _ = step;
        record()
    }
    /// Forgets what [`Backend::replay_step`] kept for `key` (its buffers included).
    fn release_replay(&self, key: u64) {
        let _ = key;
    }
}

/// What a [`Backend::replay_step`] step is. Its kernels' position parameters are those of
/// `position` shifted from the captured one; everything else it reads must be the same buffers
/// as at capture, written earlier in the step, `input`, or an output listed in `host`.
pub struct ReplayStep<'a> {
    /// The state the step runs on (one decoder's KV cache and model): steps of one key only.
    pub key: u64,
    /// Where the step starts (the positions cached before it).
    pub position: usize,
    /// The ids the step feeds in, on the device.
    pub input: &'a Tensor,
    /// The output whose contents are the next step's `input` (the sampled ids).
    pub feed: usize,
    /// Outputs the step uploaded from the host, with this step's contents.
    pub host: &'a [(usize, Tensor)],
}

/// Polls a future that is ready on its first poll (CPU downloads). Returns `None` if it is not.
pub fn now_or_never<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = core::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// The CPU backend: the reference kernels, plus the fast matmul unless built with
/// [`CpuBackend::reference`].
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend {
    reference_only: bool,
    /// f32 activations in products with a block-quantized weight (see
    /// [`CpuBackend::with_exact_activations`]).
    exact_activations: bool,
}

impl CpuBackend {
    /// Reference kernels with the fast paths where they exist.
    pub fn new() -> Self {
        CpuBackend {
            reference_only: false,
            exact_activations: false,
        }
    }
    /// Reference kernels only: the specification, for parity checks.
    pub fn reference() -> Self {
        CpuBackend {
            reference_only: true,
            exact_activations: false,
        }
    }
    /// With `exact`, products with a block-quantized weight keep f32 activations (the
    /// dequantize-then-f32 reference's numbers) instead of 8-bit ones and integer dot products
    /// (`cpu::fast::qdot`, within its published budget). `KERNELS_EXACT_ACTIVATIONS=1` asks for
    /// the same in every backend.
    pub fn with_exact_activations(mut self, exact: bool) -> Self {
        self.exact_activations = exact;
        self
    }
    /// True for [`CpuBackend::reference`].
    pub fn is_reference(&self) -> bool {
        self.reference_only
    }
}

/// Borrows a host tensor as a kernel view.
pub fn host_view<'a>(op: &'static str, t: &'a Tensor) -> Result<View<'a, f32>> {
    let data = match t.storage() {
        Storage::F32(v) => Data::Float(v.as_slice()),
        Storage::I32(v) => Data::I32(v.as_slice()),
        Storage::I64(v) => Data::I64(v.as_slice()),
        Storage::Packed(_) => {
            return Err(Error::DTypeMismatch {
                op,
                tensor: "input".into(),
                expected: "f32, i32 or i64 (weight dtypes only where an op takes a weight)",
                got: t.dtype(),
            });
        }
        Storage::Device(b) => {
            return Err(Error::DeviceMismatch {
                op,
                expected: DeviceId::CPU.0,
                got: b.device().0,
            });
        }
    };
    Ok(View {
        shape: t.shape(),
        data,
    })
}

/// Wraps a kernel result as a host tensor.
pub fn owned_to_tensor(o: cpu::Owned<f32>) -> Result<Tensor> {
    match o.data {
        OwnedData::Float(v) => Tensor::from_f32_owned(o.shape, v),
        OwnedData::I32(v) => Tensor::from_i32(&o.shape, v),
    }
}

/// The inputs with every weight-dtype tensor in a `Weight` slot of `op` decoded to f32 (the
/// reference of every op on a weight dtype: dequantize, then the f32 kernel). Signature errors
/// (a weight dtype where the op takes none) are the op's own, from its checks.
pub fn decode_weights(op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let dtypes: Vec<_> = inputs.iter().map(|t| t.dtype()).collect();
    op.check_signature(dir, &dtypes)?;
    inputs
        .iter()
        .map(|t| {
            if t.dtype().is_weight() {
                t.dequantize()
            } else {
                Ok((*t).clone())
            }
        })
        .collect()
}

impl CpuBackend {
    /// `rope_kv_write` into its two donated caches when no other tensor holds either: the
    /// reference's rows written in place, `[k_cache, v_cache, q]` returned. `None` when a cache
    /// is shared (the caller then runs the copying reference).
    fn rope_kv_write_in_place(
        &self,
        op: &Op,
        donated: &mut Vec<Tensor>,
        qkv: &Tensor,
    ) -> Result<Option<Vec<Tensor>>> {
        let (Op::RopeKvWrite { .. }, Some((freqs, pos, interleaved))) = (op, op.rotation()) else {
            return Ok(None);
        };
        let [k, v] = &mut donated[..] else {
            return Ok(None);
        };
        op.check_signature(Direction::Forward, &[k.dtype(), v.dtype(), qkv.dtype()])?;
        let dims =
            cpu::rope_kv_write::QkvDims::new(&freqs, pos, k.shape(), v.shape(), qkv.shape())?;
        let src = host_view(op.name(), qkv)?;
        let (Some(kc), Some(vc), Data::Float(src)) =
            (k.f32_mut_if_unique(), v.f32_mut_if_unique(), src.data)
        else {
            return Ok(None);
        };
        let q = cpu::rope_kv_write::write_into(&dims, &freqs, interleaved, kc, vc, src)?;
        let q = Tensor::from_f32(&dims.q_shape(), q)?;
        let mut outs = core::mem::take(donated);
        outs.push(q);
        Ok(Some(outs))
    }

    /// `matmul_add` forward as matmul's fast forward plus the residual, added into the
    /// residual's own elements when no other tensor holds them (a donated residual), else into
    /// the product.
    fn matmul_add(
        &self,
        mut residual: Tensor,
        a: &Tensor,
        b: &Tensor,
        (trans_a, trans_b): (bool, bool),
    ) -> Result<Vec<Tensor>> {
        let op = Op::MatmulAdd { trans_a, trans_b };
        let dtypes = [residual.dtype(), a.dtype(), b.dtype()];
        op.check_signature(Direction::Forward, &dtypes)?;
        let product = self.run(
            &Op::Matmul { trans_a, trans_b },
            Direction::Forward,
            &[a, b],
        )?;
        let Some(product) = product.into_iter().next() else {
            return Err(Error::Arity {
                op: "matmul_add",
                expected: 1,
                got: 0,
            });
        };
        if product.shape() != residual.shape() {
            return Err(Error::mismatch(
                "matmul_add",
                product.shape(),
                residual.shape(),
            ));
        }
        // Into the residual when nothing else holds it (donated), else into the product.
        let (mut into, from) = if residual.storage_is_unique() {
            (residual, product)
        } else {
            (product, residual)
        };
        let src = from.as_f32()?;
        if let Some(dst) = into.f32_mut_if_unique()
            && dst.len() == src.len()
        {
            for (x, y) in dst.iter_mut().zip(src) {
                *x += *y;
            }
            return Ok(alloc::vec![into]);
        }
        let sum = into.as_f32()?.iter().zip(src).map(|(x, y)| x + y).collect();
        Ok(alloc::vec![Tensor::from_f32(from.shape(), sum)?])
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> String {
        if self.reference_only {
            "cpu-reference".into()
        } else {
            "cpu".into()
        }
    }
    fn device(&self) -> DeviceId {
        DeviceId::CPU
    }
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        if !t.is_host() {
            return Err(Error::NotOnHost { op: "upload" });
        }
        Ok(t.clone())
    }
    fn download<'a>(&'a self, t: &'a Tensor) -> LocalBoxFuture<'a, Result<Tensor>> {
        let r = if t.is_host() {
            Ok(t.clone())
        } else {
            Err(Error::NotOnHost { op: "download" })
        };
        Box::pin(core::future::ready(r))
    }
    fn run(&self, op: &Op, dir: Direction, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if !self.reference_only
            && let (Op::MatmulAdd { trans_a, trans_b }, Direction::Forward, [residual, a, b]) =
                (*op, dir, inputs)
        {
            // The product on whichever fast path takes it (packed decode rows included).
            return self.matmul_add((*residual).clone(), a, b, (trans_a, trans_b));
        }
        if !self.reference_only
            && let Some(r) = cpu::fast::packed::run_with(
                op,
                dir,
                inputs,
                self.exact_activations || cpu::fast::config::exact_activations(),
            )
        {
            return r;
        }
        // Only ops given a weight dtype pay for the decoding (and its signature check).
        let (decoded, decoded_refs): (Vec<Tensor>, Vec<&Tensor>);
        let inputs = if inputs.iter().any(|t| t.dtype().is_weight()) {
            decoded = decode_weights(op, dir, inputs)?;
            decoded_refs = decoded.iter().collect();
            &decoded_refs[..]
        } else {
            inputs
        };
        let views = inputs
            .iter()
            .map(|t| host_view(op.name(), t))
            .collect::<Result<Vec<_>>>()?;
        let out = if self.reference_only {
            cpu::run(op, dir, &views)?
        } else {
            match cpu::fast::run(op, dir, &views) {
                Some(r) => r?,
                None => cpu::run(op, dir, &views)?,
            }
        };
        out.into_iter().map(owned_to_tensor).collect()
    }
    fn run_donated(
        &self,
        op: &Op,
        mut donated: Vec<Tensor>,
        rest: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        if let (Op::RopeKvWrite { .. }, [qkv]) = (op, rest)
            && let Some(outs) = self.rope_kv_write_in_place(op, &mut donated, qkv)?
        {
            return Ok(outs);
        }
        if donated.len() != 1 {
            let mut all: Vec<&Tensor> = donated.iter().collect();
            all.extend_from_slice(rest);
            return self.run(op, Direction::Forward, &all);
        }
        let Some(mut donated) = donated.pop() else {
            return self.run(op, Direction::Forward, rest);
        };
        if let (Op::MatmulAdd { trans_a, trans_b }, [a, b]) = (op, rest)
            && !self.reference_only
        {
            return self.matmul_add(donated, a, b, (*trans_a, *trans_b));
        }
        // Writing into the donated cache gives exactly the reference's copy-then-overwrite.
        if let (Op::KvWrite { pos }, [rows]) = (op, rest) {
            let k = cpu::layout::KvDims::new(*pos, donated.shape(), rows.shape())?;
            let rows_view = host_view(op.name(), rows)?;
            if let (Some(cache), Data::Float(src)) = (donated.f32_mut_if_unique(), rows_view.data)
                && cache.len() == k.heads * k.cap * k.d
                && src.len() == k.heads * k.s * k.d
            {
                cpu::layout::kv_write_into(&k, cache, src);
                return Ok(alloc::vec![donated]);
            }
        }
        let mut all: Vec<&Tensor> = Vec::with_capacity(rest.len() + 1);
        all.push(&donated);
        all.extend_from_slice(rest);
        self.run(op, Direction::Forward, &all)
    }
}
