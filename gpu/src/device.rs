//! The one device interface the GPU op layer is written against (`crate::ops`): allocate, launch
//! a kernel of a family with its parameters, upload constant tables, read the host copies of
//! integer tensors and small float tensors kept at upload, and the named hooks where the
//! backends' paths really differ (matmul: the tiled WGSL kernels against cuBLAS; attention:
//! different kernel geometries; svd_lowrank: on the device against host steps). The wgpu and
//! CUDA backends implement it; nothing in `ops` knows which one runs.

use std::sync::Arc;

use kernels_core::op::{Activation, BinaryOp, GeluApprox, ReduceOp, UnaryOp};
use kernels_core::{DType, Error, Result, Tensor};

/// Most elements of an f32 tensor whose host copy a device keeps at upload.
pub const HOST_FLOAT_COPY_MAX: usize = 4096;

/// The host copy a device keeps of an f32 tensor uploaded from the host, so per-row scalars
/// (`sample`'s uniforms) can be range-checked without a readback, as ids are: rank 1 and at most
/// [`HOST_FLOAT_COPY_MAX`] elements. The only tensor a device writes in place, a donated KV
/// cache, has rank 3 or more, so a copy never goes stale.
pub(crate) fn host_float_copy(shape: &[usize], v: &[f32]) -> Option<Arc<Vec<f32>>> {
    (shape.len() == 1 && v.len() <= HOST_FLOAT_COPY_MAX).then(|| Arc::new(v.to_vec()))
}

/// The op families, one WGSL file (`wgpu/shaders/<name>.wgsl`) and, except matmul and svd, one CUDA C file (`cuda/kernels/<name>.cu`) each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Elementwise,
    Matmul,
    Reduce,
    Softmax,
    Norm,
    Layout,
    Optim,
    Loss,
    Rope,
    Attention,
    Gru,
    Svd,
    Quant,
}

impl Family {
    /// Every family.
    pub const ALL: &'static [Family] = &[
        Family::Elementwise,
        Family::Matmul,
        Family::Reduce,
        Family::Softmax,
        Family::Norm,
        Family::Layout,
        Family::Optim,
        Family::Loss,
        Family::Rope,
        Family::Attention,
        Family::Gru,
        Family::Svd,
        Family::Quant,
    ];
    /// File stem of the family's shader.
    pub fn name(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Matmul => "matmul",
            Family::Reduce => "reduce",
            Family::Softmax => "softmax",
            Family::Norm => "norm",
            Family::Layout => "layout",
            Family::Optim => "optim",
            Family::Loss => "loss",
            Family::Rope => "rope",
            Family::Attention => "attention",
            Family::Gru => "gru",
            Family::Svd => "svd",
            Family::Quant => "quant",
        }
    }
}

/// u32 slots of the per-launch parameter block.
pub const PARAM_U32S: usize = 12;
/// f32 slots of the per-launch parameter block (80 bytes in all).
pub const PARAM_F32S: usize = 8;

/// The raw per-launch parameter block: twelve u32 then eight f32 (`struct Params` in the WGSL
/// prelude and the CUDA header). The op layer never fills it by slot: it passes a named block of
/// `crate::params`, which converts into it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Params {
    pub u: [u32; PARAM_U32S],
    pub f: [f32; PARAM_F32S],
}

/// A kernel's specialization constants (op codes and flags), by name, in the order the family
/// declares them: WGSL override constants on wgpu; `p.c[0..]` on CUDA.
pub type Consts<'a> = &'a [(&'static str, u32)];

/// A binding's element range: `Some((start, len))`, or `None` for the whole tensor.
pub type ElemRange = Option<(usize, usize)>;

/// How many threads a launch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grid {
    /// One thread per element over this many elements (256 per workgroup / block).
    Elems(usize),
    /// One workgroup / block per item (a row, a batch, a chunk); its threads cooperate.
    Groups(usize),
    /// This many threads in workgroups / blocks of 256 (as `Elems`) whose threads cooperate
    /// (barriers, subgroup or warp operations): teams of consecutive threads, one per item.
    Teams(usize),
}

/// One kernel launch.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    pub family: Family,
    pub entry: &'static str,
    pub consts: Consts<'a>,
    pub params: Params,
    /// Read-only bindings (at most 4), each whole or an element range.
    pub inputs: &'a [(&'a Tensor, ElemRange)],
    /// Read-write bindings (at most 3).
    pub outputs: &'a [(&'a Tensor, ElemRange)],
    pub grid: Grid,
}

/// A matmul operand: a tensor, the element offset its matrix starts at, and whether it is read
/// transposed.
pub type Operand<'t> = (&'t Tensor, usize, bool);

/// Elementwise work fused into a matmul (the `linear` op): a bias added and an activation
/// applied to each output, and/or each element of `a` scaled by the derivative of an activation
/// read from `gy` (laid out like `a`) as it is loaded, or (`matmul_add`) the product added to
/// the output's old contents.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fused<'t> {
    pub bias: Option<&'t Tensor>,
    pub act: Option<Activation>,
    pub a_dact: Option<(&'t Tensor, Activation)>,
    /// Add the product to what `out` holds instead of overwriting it (`matmul_add` into its
    /// donated residual); never with a bias or an activation.
    pub accumulate: bool,
}

/// What a GPU backend gives the op layer: the core below, and the hooks where the backends'
/// paths really differ.
pub trait Device: MatmulHook + AttentionHook + SvdHook {
    /// A fresh tensor of `shape` on this device (contents undefined until written).
    fn alloc(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<Tensor>;
    /// A copy of the host tensor `t` on this device.
    fn upload_host(&self, t: &Tensor) -> Result<Tensor>;
    /// A constant table uploaded on first use of `key` and kept.
    fn table(&self, key: String, make: &dyn Fn() -> Result<Tensor>) -> Result<Tensor>;
    /// The host copy of an integer tensor uploaded from the host (ids, targets), if kept.
    fn host_ints(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<i64>>>>;
    /// The host copy of a small rank-1 f32 tensor uploaded from the host (`sample`'s
    /// uniforms), if kept: see [`host_float_copy`].
    fn host_floats(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<f32>>>>;
    /// Most elements one binding may hold (elementwise ops split larger tensors).
    fn chunk_elems(&self) -> usize;
    /// Records (or queues) one kernel launch.
    fn launch(&self, op: &'static str, l: &Launch<'_>) -> Result<()>;
    /// Whether decode's packed products run one thread per output (`matvec_each`) instead of
    /// `matvec_stream` (a team per weight row): for adapters that run on the CPU, where
    /// barriers are slow.
    fn per_output_matvec(&self) -> bool {
        false
    }
    /// Whether decode's f32 products `x @ W^T` (W 2-D, read transposed; at most
    /// `MATVEC_MAX_ROWS` rows of x) run as decode's packed products do, each W row read once:
    /// wgpu's `matmul_rows` reads such a W one column per thread, across rows (uncoalesced).
    /// CUDA takes it too: one kernel launch per product instead of an SGEMM with one row.
    fn f32_matvec(&self) -> bool {
        false
    }
    /// Threads per weight row of `matvec_stream` for a weight of `dtype` with rows of `k`: a
    /// power of two from 4 to 256 (the workgroup holds 256 / team rows). wgpu's WGSL takes
    /// teams of at most 32 (one subgroup's chunk).
    fn matvec_team(&self, dtype: DType, k: usize) -> usize {
        crate::ops::quant::stream_team(dtype, k)
    }
}

/// `batch` products `out = fused(op(a) @ op(b))`, `op(a) [m, k]`, `op(b) [k, n]`, operands at
/// element offsets with batch steps (0: shared).
#[derive(Debug, Clone, Copy)]
pub struct Matmul<'t> {
    pub a: Operand<'t>,
    pub b: Operand<'t>,
    pub out: &'t Tensor,
    pub mnk: (usize, usize, usize),
    /// `(step_a, step_b, batch)`.
    pub steps_batch: (usize, usize, usize),
    pub fused: Fused<'t>,
    /// `a` and `b` bound as these element ranges (`None`: whole), so a weight larger than one
    /// storage binding is read in row blocks; offsets count from a range's start.
    pub a_range: ElemRange,
    pub b_range: ElemRange,
    /// Where the outputs go when the product is a block of a larger one (`None`: `out` is
    /// `[batch, m, n]`).
    pub out_at: Option<OutAt>,
}

/// Where a block of a larger product writes: output `(batch, r, c)` at element
/// `batch * batch_stride + offset + r * ldc + c` of `out`, adding bias `bias_offset + c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutAt {
    pub ldc: usize,
    pub offset: usize,
    pub batch_stride: usize,
    pub bias_offset: usize,
}

/// Hook: matmul (the tiled WGSL kernels on wgpu, cuBLAS SGEMM on CUDA).
pub trait MatmulHook {
    fn matmul(&self, op: &'static str, mm: &Matmul<'_>) -> Result<()>;
    /// Whether [`MatmulHook::matmul`] takes a weight-dtype operand as it is (CUDA's half
    /// products), so that the op layer does not decode it to f32 first. Decode's packed
    /// `matvec` and weights split over bindings come first either way.
    fn takes_packed_operands(&self) -> bool {
        false
    }
    /// `g * act'(y)` for linear's backward, made once, where the matmul cannot apply it to `a`
    /// as it loads (`Fused::a_dact`); `None` where it can.
    fn activation_grad(
        &self,
        op: &'static str,
        g: &Tensor,
        y: &Tensor,
        act: Activation,
    ) -> Result<Option<Tensor>>;
}

/// Hook: the attention forward (one workgroup per block of query rows, or a decode kernel, on
/// wgpu; one block per query row on CUDA); the backward is shared (`crate::ops`).
pub trait AttentionHook {
    /// Largest head dim (of q/k and of v) the kernels hold in registers.
    fn attention_head_dim_max(&self) -> usize;
    /// `out [b, hq, s, dv]` on checked geometry.
    fn attention_forward(&self, op: &'static str, at: &AttentionArgs<'_>) -> Result<Tensor>;
}

/// An attention forward: checked geometry, the mask, the scale and `q`, `k`, `v`.
#[derive(Debug, Clone, Copy)]
pub struct AttentionArgs<'t> {
    pub dims: &'t kernels_core::cpu::attention::Dims,
    pub causal: bool,
    pub scale: f32,
    pub qkv: [&'t Tensor; 3],
}

/// Hook: svd_lowrank's small steps (on the device on wgpu; on the host with the reference's
/// helpers on CUDA). The skeleton is shared (`crate::ops`).
pub trait SvdHook {
    /// The largest `q = min(rank, m, n)` supported.
    fn svd_max_q(&self) -> usize;
    /// Orthonormalizes the columns of each `[rows, cols]` matrix of a fresh `y`; returns it.
    fn svd_orth(&self, op: &'static str, y: &Tensor, rc: (usize, usize)) -> Result<Tensor>;
    /// The Jacobi SVD of each `b [lead.., q, n]`: `[v [.., n, q], s [.., q], u_b [.., q, q]]`.
    fn svd_small(&self, op: &'static str, b: &Tensor) -> Result<[Tensor; 3]>;
    /// The reference's sign fix of `u [.., m, q]` and `v [.., n, q]`.
    fn svd_fix_signs(&self, op: &'static str, uv: [Tensor; 2]) -> Result<[Tensor; 2]>;
}

impl dyn Device + '_ {
    /// [`Device::launch`] with every tensor bound whole.
    #[allow(clippy::too_many_arguments)]
    pub fn run_kernel(
        &self,
        op: &'static str,
        family: Family,
        entry: &'static str,
        consts: Consts<'_>,
        params: impl Into<Params>,
        inputs: &[&Tensor],
        outputs: &[&Tensor],
        grid: Grid,
    ) -> Result<()> {
        let ins: Vec<_> = inputs.iter().map(|t| (*t, None)).collect();
        let outs: Vec<_> = outputs.iter().map(|t| (*t, None)).collect();
        self.launch(
            op,
            &Launch {
                family,
                entry,
                consts,
                params: params.into(),
                inputs: &ins,
                outputs: &outs,
                grid,
            },
        )
    }
}

impl dyn Device + '_ {
    /// [`Device::launch`] with each tensor bound whole (`None`) or as the element range
    /// `(start, len)`.
    #[allow(clippy::too_many_arguments)]
    pub fn run_ranges(
        &self,
        op: &'static str,
        family: Family,
        entry: &'static str,
        consts: Consts<'_>,
        params: impl Into<Params>,
        inputs: &[(&Tensor, ElemRange)],
        outputs: &[(&Tensor, ElemRange)],
        grid: Grid,
    ) -> Result<()> {
        self.launch(
            op,
            &Launch {
                family,
                entry,
                consts,
                params: params.into(),
                inputs,
                outputs,
                grid,
            },
        )
    }
}

/// Kernel code of a unary op (`OP` in the elementwise family).
pub fn unary_code(u: UnaryOp) -> u32 {
    match u {
        UnaryOp::Neg => 0,
        UnaryOp::Exp => 1,
        UnaryOp::Log => 2,
        UnaryOp::Sqrt => 3,
        UnaryOp::Relu => 4,
        UnaryOp::Sigmoid => 5,
        UnaryOp::Tanh => 6,
        UnaryOp::Silu => 7,
    }
}

/// Kernel code of gelu (`OP`).
pub fn gelu_code(a: GeluApprox) -> u32 {
    match a {
        GeluApprox::None => 8,
        GeluApprox::Tanh => 9,
    }
}

/// Kernel code of scale (`OP`).
pub const SCALE_CODE: u32 = 10;

/// Kernel code of a binary op (`BOP`).
pub fn bop_code(b: BinaryOp) -> u32 {
    match b {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
    }
}

/// Kernel code of an activation (`ACT`, `A_DACT`, `DACT` in the matmul and elementwise
/// families).
pub fn act_code(a: Activation) -> u32 {
    match a {
        Activation::None => 0,
        Activation::Relu => 1,
        Activation::Tanh => 2,
        Activation::Sigmoid => 3,
    }
}

/// Kernel code of a reduction (`OP` in the reduce family).
pub fn reduce_code(r: ReduceOp) -> u32 {
    match r {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
    }
}

/// `v` as a u32 kernel parameter, or `LimitExceeded` naming the op.
pub fn u32_of(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: format!("{op}: {what}"),
        value: v as u64,
        limit: u64::from(u32::MAX),
    })
}

/// Kernel code of a weight dtype (`WEIGHT_*`, the `dtype` of the quant family); `u32::MAX`
/// (no kernel knows it) for f32 and the integer dtypes.
pub fn weight_code(d: DType) -> u32 {
    match d {
        DType::F16 => 0,
        DType::BF16 => 1,
        DType::Q8_0 => 2,
        DType::Q4_0 => 3,
        DType::Q4_1 => 4,
        DType::Q5_0 => 5,
        DType::Q4_K => 6,
        DType::Q6_K => 7,
        DType::F32 | DType::I32 | DType::I64 => u32::MAX,
    }
}

/// 32-bit words a tensor takes on a device: one per element, or a weight dtype's packed bytes
/// rounded up to whole words.
pub(crate) fn device_words(t: &Tensor) -> usize {
    if t.dtype().is_weight() {
        t.byte_len().div_ceil(4)
    } else {
        t.numel()
    }
}

/// The packed bytes of a weight dtype as little-endian words, the last one zero-padded.
/// The words a GPU gets for the packed weight `t` (its bytes `b`): GGML's plain layout, also
/// when the CPU backend interleaved them (a copy then), since GPU kernels read plain blocks.
pub(crate) fn packed_upload_words(
    t: &Tensor,
    b: &kernels_core::packed::PackedBytes,
) -> Result<Vec<u32>> {
    if b.layout() == kernels_core::packed::Layout::Plain {
        return Ok(packed_words(b));
    }
    Ok(packed_words(
        &kernels_core::cpu::fast::qdot::interleave::plain_bytes(t)?,
    ))
}

pub(crate) fn packed_words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// A host tensor of weight dtype `t.dtype()` from the bytes of its device words.
pub(crate) fn packed_from_bytes(t: &Tensor, bytes: &[u8]) -> Result<Tensor> {
    let len = t.byte_len();
    let data = bytes.get(..len).ok_or_else(|| Error::Backend {
        backend: "download".into(),
        why: format!(
            "{} bytes read back for a {} tensor of {len}",
            bytes.len(),
            t.dtype()
        ),
    })?;
    Tensor::from_raw(t.shape(), t.dtype(), data.to_vec())
}

#[cfg(test)]
mod tests {
    use kernels_core::cpu::fast::qdot::interleave;
    use kernels_core::packed::Layout;
    use kernels_core::tensor::Storage;
    use kernels_core::{DType, Rng, Tensor};

    /// A weight the CPU backend interleaved reaches a GPU in the plain layout (its kernels read
    /// plain blocks): the words of the repacked tensor are the plain tensor's.
    #[test]
    fn interleaved_weights_upload_as_plain_words() {
        let mut rng = Rng::new(0x1A7E);
        for dtype in [DType::Q4_0, DType::Q5_0, DType::Q8_0] {
            // 19 rows: two whole groups of 8 and a plain tail of 3.
            let (n, k) = (19, 64);
            let v: Vec<f32> = (0..n * k).map(|_| rng.normal()).collect();
            let plain = kernels_core::quant::quantize(dtype, &v).unwrap();
            let rb = dtype.bytes_for(k).unwrap();
            let packed = interleave::repack(dtype, &plain, rb, n).unwrap();
            assert_ne!(packed, plain, "{dtype}: the repack moved nothing");
            let wr = Tensor::from_raw_in(&[n, k], dtype, packed, Layout::Rows8).unwrap();
            let Storage::Packed(b) = wr.storage() else {
                panic!("{dtype}: not packed");
            };
            let words = super::packed_upload_words(&wr, b).unwrap();
            assert_eq!(words, super::packed_words(&plain), "{dtype}");
        }
    }
}
