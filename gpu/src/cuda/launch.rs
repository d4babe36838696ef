//! The CUDA backend as the op layer's [`Device`]: launches map the shared [`Family`] to its
//! `.cu` file, a [`Grid`] to blocks of threads, and the launch's constants into `Params::c`;
//! matmul, attention and svd_lowrank are the hooks in `matmul.rs`, `attention.rs`, `svd.rs`.

use std::sync::Arc;

use kernels_core::{Backend, DType, Error, Result, Tensor};

use super::engine::{Grid as CudaGrid, Kernel, Params};
use super::{CudaBackend, CudaBuffer};
use crate::device::{Device, Family, Grid, Launch};

/// Threads per block of the one-thread-per-element kernels.
const ELEM_THREADS: u32 = 256;

/// A family with a `.cu` file (matmul and svd have none: cuBLAS and host steps).
fn cuda_family(op: &'static str, f: Family) -> Result<Family> {
    match f.cuda_source() {
        Some(_) => Ok(f),
        None => Err(Error::Backend {
            backend: "cuda".into(),
            why: format!("{op}: the {} family has no CUDA C kernels", f.name()),
        }),
    }
}

/// Blocks and threads of a launch, within the grid's 2^31 - 1 blocks.
fn cuda_grid(be: &CudaBackend, op: &'static str, grid: Grid) -> Result<CudaGrid> {
    let (blocks, threads, cooperative) = match grid {
        Grid::Elems(n) => (n.div_ceil(ELEM_THREADS as usize), ELEM_THREADS, false),
        Grid::Groups(n) => (n, be.row_threads(), true),
        Grid::Teams(n) => (n.div_ceil(ELEM_THREADS as usize), ELEM_THREADS, true),
    };
    if blocks > i32::MAX as usize {
        return Err(Error::LimitExceeded {
            what: format!("{op}: blocks of one launch"),
            value: blocks as u64,
            limit: i32::MAX as u64,
        });
    }
    Ok(CudaGrid {
        blocks: blocks as u32,
        threads,
        cooperative,
    })
}

/// [`Device::matvec_team`] on CUDA: the row's units (quant.cu's `mv_row`: 8 f32, f16 or bf16
/// elements, a quarter Q8_0 block, half a Q4_0 block, 16 Q4_K elements; an element elsewhere)
/// over four, a power of two from 4 to 256.
pub(crate) fn cuda_matvec_team(dtype: DType, k: usize) -> usize {
    let units = match dtype {
        DType::F32 | DType::F16 | DType::BF16 if k.is_multiple_of(8) => k / 8,
        DType::Q8_0 if k.is_multiple_of(32) => k / 8,
        DType::Q4_0 if k.is_multiple_of(32) => k / 16,
        DType::Q4_K if k.is_multiple_of(256) => k / 16,
        _ => k,
    };
    (units / 4).next_power_of_two().clamp(4, 256)
}

impl Device for CudaBackend {
    /// An uninitialized-looking (zeroed) tensor on this device.
    fn alloc(&self, op: &'static str, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n = kernels_core::tensor::numel(shape)
            .ok_or_else(|| Error::bad_shape(op, "output", shape, "element count overflows"))?;
        // One word an element, or a weight dtype's bytes in whole words (half products' f16).
        let words = if dtype.is_weight() {
            dtype.bytes_for(n).map(|b| b.div_ceil(4)).ok_or_else(|| {
                Error::bad_shape(op, "output", shape, format!("not whole {dtype} blocks"))
            })?
        } else {
            n
        };
        let mem: Arc<dyn super::engine::Mem> = self.engine.alloc_zeroed(words)?.into();
        Ok(Tensor::from_device(
            shape,
            dtype,
            Arc::new(CudaBuffer {
                mem,
                device: self.id,
                host_ints: None,
                host_floats: None,
            }),
        ))
    }
    fn upload_host(&self, t: &Tensor) -> Result<Tensor> {
        self.upload(t)
    }
    /// A constant table cached by `key`, made by `make` on first use.
    fn table(&self, key: String, make: &dyn Fn() -> Result<Tensor>) -> Result<Tensor> {
        if let Some(t) = self.tables.borrow().get(&key) {
            return Ok(t.clone());
        }
        let t = self.upload(&make()?)?;
        self.tables.borrow_mut().insert(key, t.clone());
        Ok(t)
    }
    fn host_ints(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<i64>>>> {
        Ok(self.buffer_of(op, t)?.host_ints().cloned())
    }
    fn host_floats(&self, op: &'static str, t: &Tensor) -> Result<Option<Arc<Vec<f32>>>> {
        Ok(self.buffer_of(op, t)?.host_floats().cloned())
    }
    /// Decode's f32 products (at most `MATVEC_MAX_ROWS` rows) take `matvec_stream`, each weight
    /// row read once in coalesced loads, not an SGEMM with one row.
    fn f32_matvec(&self) -> bool {
        true
    }
    /// A team of up to 256 threads (8 warps) per weight row, about four 16-byte or block units
    /// a lane: decode's smaller products (2048 rows) then fill the GPU with warps instead of
    /// leaving each a long row (quant.cu's matvec_stream sums across the team's warps).
    fn matvec_team(&self, dtype: DType, k: usize) -> usize {
        cuda_matvec_team(dtype, k)
    }
    fn chunk_elems(&self) -> usize {
        // One binding holds any tensor: nothing is split.
        usize::MAX
    }
    fn launch<'a>(&self, op: &'static str, l: &Launch<'a>) -> Result<()> {
        let whole = |binds: &[(&'a Tensor, crate::device::ElemRange)]| -> Result<Vec<&'a Tensor>> {
            binds
                .iter()
                .map(|&(t, r)| match r {
                    Some((start, _)) if start != 0 => Err(Error::Backend {
                        backend: "cuda".into(),
                        why: format!("{op}: a binding at element offset {start}"),
                    }),
                    _ => Ok(t),
                })
                .collect()
        };
        let ins = whole(l.inputs)?;
        let outs = whole(l.outputs)?;
        let kernel = Kernel {
            family: cuda_family(op, l.family)?,
            entry: l.entry,
        };
        CudaBackend::launch(
            self,
            op,
            kernel,
            cuda_grid(self, op, l.grid)?,
            Params::with_consts(&l.params, l.consts),
            &ins,
            &outs,
        )
    }
}
