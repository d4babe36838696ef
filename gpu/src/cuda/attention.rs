//! The attention forward hook on CUDA (`kernels/attention.cu`): one block per query row. The
//! backward's kernels (one block per query row for dq, one per key for dk/dv) are launched by
//! the shared op layer.

use kernels_core::{DType, Result, Tensor};

use super::CudaBackend;
use crate::device::{AttentionArgs, AttentionHook, Device, Family, Grid};
use crate::ops::{attention_consts, attention_params};

impl AttentionHook for CudaBackend {
    fn attention_head_dim_max(&self) -> usize {
        // Rows are walked in global memory: no register limit.
        usize::MAX
    }
    fn attention_forward(&self, name: &'static str, at: &AttentionArgs<'_>) -> Result<Tensor> {
        let dev: &dyn Device = self;
        let dm = at.dims;
        let rows = dm.batch * dm.hq * dm.s;
        let out = dev.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
        dev.run_kernel(
            name,
            Family::Attention,
            "attn_forward",
            &attention_consts(name, dm, at.causal)?,
            attention_params(name, dm, rows, at.scale)?,
            &at.qkv,
            &[&out],
            Grid::Groups(rows),
        )?;
        Ok(out)
    }
}
