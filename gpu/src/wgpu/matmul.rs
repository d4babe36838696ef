//! The matmul hook on wgpu (`shaders/matmul.wgsl`): tiled kernels, the vec4 and 128x128 variants, and the
//! small-m kernel for decode steps.

use kernels_core::op::Activation;
use kernels_core::{Error, Result, Tensor};

use super::WgpuBackend;
use crate::device::{Family, Matmul, MatmulHook, OutAt, act_code, u32_of};
use crate::params::MatmulParams;

/// The matmul entry point: `matmul_vec4` when each operand's contiguous dim, batch stride and
/// offset are multiples of 4 (whole vec4 loads), else the scalar `matmul`.
fn matmul_entry(
    (m, n, k): (usize, usize, usize),
    trans_a: bool,
    trans_b: bool,
    strides: (usize, usize),
    offsets: (usize, usize),
) -> &'static str {
    let a_inner = if trans_a { m } else { k };
    let b_inner = if trans_b { k } else { n };
    let aligned = [a_inner, b_inner, strides.0, strides.1, offsets.0, offsets.1]
        .iter()
        .all(|v| v % 4 == 0);
    if aligned { "matmul_vec4" } else { "matmul" }
}

/// The matmul hook on wgpu, the matmul family's one launcher: `batch` products `op(a) @ op(b)`
/// into `out`, operands read from element offsets with batch steps (0: shared), 64x64 output
/// tiles per workgroup (or one thread per column for at most 8 rows), batches above the z limit
/// in several dispatches, each told its first batch; `fused` work in the prologue / epilogue.
impl MatmulHook for WgpuBackend {
    fn matmul(&self, name: &'static str, mm: &Matmul<'_>) -> Result<()> {
        matmul(self, name, mm)
    }
    /// The matmul kernels apply it as they stage `a` (`A_DACT`): nothing to make.
    fn activation_grad(
        &self,
        _: &'static str,
        _: &Tensor,
        _: &Tensor,
        _: Activation,
    ) -> Result<Option<Tensor>> {
        Ok(None)
    }
}

fn matmul(be: &WgpuBackend, name: &'static str, mm: &Matmul<'_>) -> Result<()> {
    let Matmul {
        a: (a, off_a, trans_a),
        b: (b, off_b, trans_b),
        out,
        mnk: (m, n, k),
        steps_batch: (step_a, step_b, batch),
        fused,
        a_range,
        b_range,
        out_at,
    } = *mm;
    let at = out_at.unwrap_or(OutAt {
        ldc: n,
        offset: 0,
        batch_stride: m * n,
        bias_offset: 0,
    });
    let max = be.max_groups();
    // Few rows (a decode step): one thread per column; large aligned products: 128x128 tiles;
    // else 64x64 tiles.
    let (entry, gx, gy_tiles) = if m <= MATMUL_ROWS_MAX {
        let (x, y, _) = be.grid_1d(n.div_ceil(64) as u64)?;
        ("matmul_rows", x, y)
    } else {
        let entry = matmul_entry(
            (m, n, k),
            trans_a,
            trans_b,
            (step_a, step_b),
            (off_a, off_b),
        );
        let wide = entry == "matmul_vec4" && m.div_ceil(128) * n.div_ceil(128) >= WIDE_TILES_MIN;
        let (entry, tile) = if wide {
            ("matmul_wide", 128)
        } else {
            (entry, 64)
        };
        let gx = u32_of(name, "tiles", n.div_ceil(tile))?;
        let gy_tiles = u32_of(name, "tiles", m.div_ceil(tile))?;
        if gx > max || gy_tiles > max {
            return Err(Error::LimitExceeded {
                what: format!("{name}: {tile}x{tile} tiles per grid dimension"),
                value: u64::from(gx.max(gy_tiles)),
                limit: u64::from(max),
            });
        }
        (entry, gx, gy_tiles)
    };
    let consts = [
        ("TA", u32::from(trans_a)),
        ("TB", u32::from(trans_b)),
        ("BIAS", u32::from(fused.bias.is_some())),
        ("ACT", fused.act.map_or(0, act_code)),
        ("A_DACT", fused.a_dact.map_or(0, |(_, d)| act_code(d))),
        ("ACCUM", u32::from(fused.accumulate)),
    ];
    // Unused slots get `a` as `a` is bound (bound, never read).
    let bias = fused.bias.map_or((a, a_range), |t| (t, None));
    let gy = fused.a_dact.map_or((a, a_range), |(t, _)| (t, None));
    let mut first = 0usize;
    while first < batch {
        let count = (batch - first).min(max as usize);
        let p = MatmulParams {
            m: u32_of(name, "m", m)?,
            n: u32_of(name, "n", n)?,
            k: u32_of(name, "k", k)?,
            stride_a: u32_of(name, "batch stride", step_a)?,
            stride_b: u32_of(name, "batch stride", step_b)?,
            first_batch: u32_of(name, "batch", first)?,
            offset_a: u32_of(name, "offset", off_a)?,
            offset_b: u32_of(name, "offset", off_b)?,
            ldc: u32_of(name, "output row length", at.ldc)?,
            c_offset: u32_of(name, "output offset", at.offset)?,
            c_batch: u32_of(name, "output batch stride", at.batch_stride)?,
            bias_offset: u32_of(name, "bias offset", at.bias_offset)?,
        };
        be.dispatch(
            name,
            Family::Matmul,
            entry,
            &consts,
            p.into(),
            &[(a, a_range), (b, b_range), bias, gy],
            &[(out, None)],
            (gx, gy_tiles, count as u32),
        )?;
        first += count;
    }
    Ok(())
}

/// Products with at most this many rows take `matmul_rows` (`SMALL_M` in the shader).
const MATMUL_ROWS_MAX: usize = 8;
/// Aligned products with at least this many 128x128 output tiles take `matmul_wide` (1024 x
/// 1024 and up): below it, 64x64 tiles keep more workgroups in flight.
const WIDE_TILES_MIN: usize = 64;
