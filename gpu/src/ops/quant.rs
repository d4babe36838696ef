//! Weight dtypes on a device: `dequantize` (the packed tensor decoded to f32 by the quant
//! family's kernel), `matvec` (decode's products reading the packed rows), and [`decoded`], which every other op that takes a weight runs on: the packed operands
//! decoded into f32 temporaries for the op's f32 kernels, as the CPU reference does. The
//! weights themselves stay packed on the device.

use kernels_core::op::{Activation, Op};
use kernels_core::{DType, Result, Tensor};

use crate::device::{Device, Family, Grid, u32_of, weight_code};
use crate::params::{DequantizeParams, MatvecParams};

/// `x` decoded to f32 (an f32 `x` is returned as it is: a view of the same buffer).
pub(crate) fn dequantize(be: &dyn Device, name: &'static str, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_weight() {
        return Ok(x.clone());
    }
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let n = out.numel();
    if n == 0 {
        return Ok(out);
    }
    let p = DequantizeParams {
        n: u32_of(name, "elements", n)?,
        dtype: weight_code(x.dtype()),
        ..Default::default()
    };
    // The packed tensor goes to the third read-only slot (declared u32 in the shader) and the
    // fourth (the native-f16 reader's view).
    be.run_kernel(
        name,
        Family::Quant,
        "dequantize",
        &[],
        p,
        &[x, x, x, x],
        &[&out],
        Grid::Elems(n),
    )?;
    Ok(out)
}

/// `args` with every packed tensor decoded to an f32 temporary.
pub(crate) fn decoded(
    be: &dyn Device,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    args.iter().map(|t| dequantize(be, name, t)).collect()
}

/// `x`'s shape with its last dim `w`'s rows.
fn last_dim_to(x: &Tensor, w: &Tensor) -> Vec<usize> {
    let mut shape = x.shape().to_vec();
    if let (Some(last), Some(&n)) = (shape.last_mut(), w.shape().first()) {
        *last = n;
    }
    shape
}

/// Most rows of `x` [`matvec`] takes; more decode the weight for the tiled matmul.
pub const MATVEC_MAX_ROWS: usize = 8;

/// Threads per weight row (a team) of wgpu's streaming `matvec_stream`: one per unit the row
/// is read in (matvec.wgsl: an f32 word, a word of two halves, 8 quant bytes of a block, or one
/// element where the row's length does not tile), a power of two from 4 to 32. Decode's rows
/// (k of hundreds or more) get 32; short rows get smaller teams, so fewer lanes idle. The
/// workgroup (256 threads) holds 256 / team rows.
pub(crate) fn stream_team(dtype: DType, k: usize) -> usize {
    let units = match dtype {
        DType::F16 | DType::BF16 if k.is_multiple_of(2) => k / 2,
        DType::Q8_0 if k.is_multiple_of(32) => k / 8,
        DType::Q4_0 | DType::Q4_1 | DType::Q5_0 if k.is_multiple_of(32) => k / 16,
        DType::Q4_K if k.is_multiple_of(256) => k / 16,
        DType::Q6_K if k.is_multiple_of(256) => k / 32,
        _ => k,
    };
    units.next_power_of_two().clamp(4, 32)
}

/// Decode's products with a packed weight, without decoding it whole: `x @ W^T` (`matmul`
/// with `trans_b`, `W` the packed `b`; `linear` without an activation), and the llama's decode
/// forms of the same product, `W @ h^T` with one row of `h` per batch entry (`W` the packed `a`)
/// and `a^T @ W^T` with `a [.., k, 1]`, whose outputs have the memory of the rows' product,
/// and `matmul_swiglu`'s gated product (one launch, each output dotting its gate and up rows):
/// for at most [`MATVEC_MAX_ROWS`] rows. An f32 `W` takes the same kernels where the device
/// asks for it ([`Device::f32_matvec`]). `None` for every other case (and for shapes that do
/// not agree: the f32 path reports those). With `acc`, the product is added into it.
pub(crate) fn matvec(
    be: &dyn Device,
    name: &'static str,
    op: &Op,
    args: &[&Tensor],
    acc: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    // f32 operands only on devices that ask for it: nothing to build for the others.
    if !args.iter().any(|t| t.dtype().is_weight()) && !be.f32_matvec() {
        return Ok(None);
    }
    // The product as rows `x [rows, k] @ W^T`, with the op's output shape (the same memory).
    let (x, w, bias, out_shape) = match (*op, args) {
        // `W @ h^T` with one row of `h` per batch entry (decode's projections): `[.., n, 1]`
        // is the memory of the rows `h @ W^T`.
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [w, h],
        ) if w.dtype().is_weight() && h.rank() >= 2 && h.shape()[h.rank() - 2] == 1 => {
            let mut shape = h.shape()[..h.rank() - 2].to_vec();
            shape.extend([w.shape().first().copied().unwrap_or(0), 1]);
            (*h, *w, None, shape)
        }
        // `a^T @ W^T` with `a [.., k, 1]` (decode's o_proj): `a`'s memory is the rows.
        (
            Op::Matmul {
                trans_a: true,
                trans_b: true,
            },
            [a, w],
        ) if (w.dtype().is_weight() || w.dtype() == DType::F32)
            && a.rank() >= 2
            && a.shape()[a.rank() - 1] == 1 =>
        {
            let mut shape = a.shape()[..a.rank() - 2].to_vec();
            shape.extend([1, w.shape().first().copied().unwrap_or(0)]);
            (*a, *w, None, shape)
        }
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [x, w],
        ) => (*x, *w, None, last_dim_to(x, w)),
        (
            Op::Linear {
                activation: Activation::None,
            },
            [x, w, b],
        ) => (*x, *w, Some(*b), last_dim_to(x, w)),
        // The gated product: the last dim is half of `w`'s rows.
        (Op::MatmulSwiglu, [x, w]) => {
            let mut shape = last_dim_to(x, w);
            if let Some(last) = shape.last_mut() {
                *last /= 2;
            }
            (*x, *w, None, shape)
        }
        _ => return Ok(None),
    };
    // matmul_swiglu: output j gates row j with row j + half.
    let glu = matches!(op, Op::MatmulSwiglu);
    let f32_weight = w.dtype() == DType::F32 && be.f32_matvec();
    if x.dtype() != DType::F32
        || !(w.dtype().is_weight() || f32_weight)
        || w.rank() != 2
        || x.rank() < 2
    {
        return Ok(None);
    }
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let outs = if glu { n / 2 } else { n };
    // `x`'s elements are the rows of `k` (its last dim, or the `k` of `[.., k, 1]`).
    if k == 0
        || outs == 0
        || (glu && !n.is_multiple_of(2))
        || !x.numel().is_multiple_of(k)
        || out_shape.iter().product::<usize>() != x.numel() / k * outs
    {
        return Ok(None);
    }
    let last = x.shape()[x.rank() - 1];
    if last != k && !(last == 1 && x.shape()[x.rank() - 2] == k) {
        return Ok(None);
    }
    if let Some(b) = bias
        && b.shape() != [n]
    {
        return Ok(None);
    }
    let rows = x.numel() / k;
    if rows == 0 || rows > MATVEC_MAX_ROWS {
        return Ok(None);
    }
    // A weight larger than one binding is read in row blocks, one launch each (the gated
    // product, whose two rows of an output may lie in two blocks, then takes the product and
    // the gate as two launches).
    let blocks = super::split::weight_blocks(be, name, w)?;
    if glu && blocks.len() != 1 {
        return Ok(None);
    }
    let out = super::matmul::product_out(be, name, &out_shape, acc)?;
    for ((first, cnt), range) in blocks {
        let cnt = if glu { outs } else { cnt };
        let p = MatvecParams {
            n: u32_of(name, "out features", cnt)?,
            dtype: weight_code(w.dtype()),
            k: u32_of(name, "in features", k)?,
            rows: u32_of(name, "rows", rows)?,
            bias: u32::from(bias.is_some()),
            ldo: u32_of(name, "out features", outs)?,
            col0: u32_of(name, "out features", first)?,
            accum: u32::from(acc.is_some()),
            glu: if glu {
                u32_of(name, "out features", outs)?
            } else {
                0
            },
        };
        // Slots: x, the bias (or x again, unread), the packed weight twice (quant.wgsl's
        // layout).
        let b = bias.unwrap_or(x);
        let team = be.matvec_team(w.dtype(), k);
        let stream = [
            ("MV_ROWS", u32_of(name, "rows", rows)?),
            ("MV_RPW", u32_of(name, "rows per workgroup", 256 / team)?),
        ];
        let (entry, grid, consts): (_, _, &[(&'static str, u32)]) = if be.per_output_matvec() {
            ("matvec_each", Grid::Elems(rows * cnt), &[])
        } else {
            // One workgroup per 256 / team weight rows (256 threads a workgroup: `Teams`
            // counts the threads).
            let threads =
                cnt.checked_mul(team)
                    .ok_or_else(|| kernels_core::Error::LimitExceeded {
                        what: format!("{name}: out features of one matvec launch"),
                        value: cnt as u64,
                        limit: (usize::MAX / team) as u64,
                    })?;
            ("matvec_stream", Grid::Teams(threads), &stream)
        };
        be.run_ranges(
            name,
            Family::Quant,
            entry,
            consts,
            p,
            &[(x, None), (b, None), (w, range), (w, range)],
            &[(&out, None)],
            grid,
        )?;
    }
    Ok(Some(out))
}
