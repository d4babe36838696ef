//! `linear`, `matmul_swiglu` and `matmul(x, w, trans_b)` forward with a weight of a weight
//! dtype.
//!
//! A block-quantized weight (`q8_0` ... `q6_k`) takes 8-bit activations and integer dot products
//! on the packed blocks ([`super::qdot`]) for decode, and for prefill at single precision or
//! where the tiled integer GEMM ([`super::qdot::gemm`]) beats the f32 panels
//! (`q4_0`, `q4_1`, `q5_0` on x86 at the default residual precision), within
//! [`super::qdot::QUANTIZED_ACTIVATION_BUDGETS`] of the reference; the weight is never decoded
//! to f32 there. Other prefill on a quantized weight, and every product with exact activations
//! (`KERNELS_EXACT_ACTIVATIONS=1`, [`crate::backend::CpuBackend::with_exact_activations`]),
//! decode and prefill alike, decode the weight a micro-panel at a time into the f32 GEMM
//! ([`super::decoded_b`]): the weight streams from memory in its packed size and is never
//! decoded whole, and the only difference from the reference (decode, then the f32 product) is
//! the summation order, within the op's budget. `f16` and `bf16` weights take
//! [`super::half_dot`].

use alloc::vec;
use alloc::vec::Vec;

use super::config;
use super::gemm::{Gemm, Kernel, MatRef, PackedB};
use super::qdot::{self, Family, Layout, interleave};
use crate::cpu::{linear, matmul_swiglu};
use crate::error::{Error, Result};
use crate::op::{Activation, Direction, Op};
use crate::quant;
use crate::tensor::{DType, Tensor};

/// Most rows of `x` that always take the integer products (decode); more take them only where
/// they beat the f32 panels.
pub const MAX_ROWS: usize = 8;

/// The fast path of `op` on these inputs, or `None` (then the caller decodes the weight and
/// runs the f32 kernels, which also report any error in the inputs).
pub fn run(op: &Op, dir: Direction, inputs: &[&Tensor]) -> Option<Result<Vec<Tensor>>> {
    run_with(op, dir, inputs, config::exact_activations())
}

/// [`run`] with f32 activations for quantized weights (`exact`) or 8-bit ones.
pub fn run_with(
    op: &Op,
    dir: Direction,
    inputs: &[&Tensor],
    exact: bool,
) -> Option<Result<Vec<Tensor>>> {
    if dir != Direction::Forward {
        return None;
    }
    let (activation, x, w, bias) = match (*op, inputs) {
        (Op::Linear { activation }, [x, w, b]) => (activation, *x, *w, Some(*b)),
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [x, w],
        ) if x.rank() >= 2 && w.rank() == 2 && x.dtype() == DType::F32 => {
            (Activation::None, *x, *w, None)
        }
        // `W @ h^T` with one row of `h` per batch entry (decode's projections): `[batch, n, 1]`
        // is the same memory as the rows `h @ W^T`.
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [w, h],
        ) if w.rank() == 2 && h.rank() >= 2 && h.shape()[h.rank() - 2] == 1 => {
            let mut shape = h.shape()[..h.rank() - 2].to_vec();
            shape.extend([w.shape()[0], 1]);
            return product_of(Activation::None, h, w, None, Some(shape), exact);
        }
        // `a^T @ W^T` with `a [batch, k, 1]` (decode's o_proj): `a`'s memory is the rows.
        (
            Op::Matmul {
                trans_a: true,
                trans_b: true,
            },
            [a, w],
        ) if w.rank() == 2 && a.rank() >= 2 && a.shape()[a.rank() - 1] == 1 => {
            let mut shape = a.shape()[..a.rank() - 2].to_vec();
            shape.extend([1, w.shape()[0]]);
            let k = a.shape()[a.rank() - 2];
            let rows = a.reshape(&[a.numel() / k.max(1), k]).ok()?;
            return product_of(Activation::None, &rows, w, None, Some(shape), exact);
        }
        // `W @ h^T` with many rows of `h` (prefill's projections, `h [batch, seq, k]`): the
        // rows `h @ W^T`, then each batch entry's `[seq, n]` transposed to `[n, seq]`.
        (
            Op::Matmul {
                trans_a: false,
                trans_b: true,
            },
            [w, h],
        ) if w.rank() == 2 && h.rank() >= 2 && h.dtype() == DType::F32 && packed_weight(w) => {
            let (seq, n) = (h.shape()[h.rank() - 2], w.shape()[0]);
            let mut shape = h.shape()[..h.rank() - 2].to_vec();
            shape.extend([n, seq]);
            let y = product_of(Activation::None, h, w, None, None, exact)?;
            return Some(y.and_then(|y| transposed(&y, seq, n, &shape)));
        }
        // `a^T @ W^T` with `a [batch, k, seq]` (prefill's o_proj): `a`'s matrices transposed to
        // the rows `[batch * seq, k]`, then the rows' product.
        (
            Op::Matmul {
                trans_a: true,
                trans_b: true,
            },
            [a, w],
        ) if w.rank() == 2
            && a.rank() >= 2
            && a.dtype() == DType::F32
            && a.is_host()
            && packed_weight(w) =>
        {
            let (k, seq) = (a.shape()[a.rank() - 2], a.shape()[a.rank() - 1]);
            let mut shape = a.shape()[..a.rank() - 2].to_vec();
            shape.extend([seq, w.shape()[0]]);
            let rows = match transposed(
                core::slice::from_ref(*a),
                k,
                seq,
                &[a.numel() / k.max(1), k],
            ) {
                Ok(r) => r,
                Err(e) => return Some(Err(e)),
            };
            let rows = rows.first()?;
            return product_of(Activation::None, rows, w, None, Some(shape), exact);
        }
        // The two halves of one product, gated (odd or mismatched weights go to the reference,
        // which reports them).
        (Op::MatmulSwiglu, [x, w]) if w.rank() == 2 && w.shape()[0] % 2 == 0 => {
            let y = product_of(Activation::None, x, w, None, None, exact)?;
            let n = w.shape()[0] / 2;
            return Some(y.and_then(|y| {
                let y = y
                    .first()
                    .map(Tensor::as_f32)
                    .transpose()?
                    .unwrap_or_default();
                let out = matmul_swiglu::gate_halves(y, n);
                Ok(vec![Tensor::from_f32(
                    &linear::out_shape(x.shape(), n),
                    out,
                )?])
            }));
        }
        (Op::Embedding, [ids, w]) => return embedding(ids, w),
        _ => return None,
    };
    product_of(activation, x, w, bias, None, exact)
}

/// Whether `w` is a weight this module's products take in any number of rows (a packed dtype:
/// f32 weights keep the GEMM).
fn packed_weight(w: &Tensor) -> bool {
    w.dtype().is_weight() && w.dtype() != DType::F32 && w.is_host()
}

/// The first of `y` (f32, `[batch * m, n]` in memory) with each batch entry's `[m, n]` matrix
/// transposed, as a tensor of `shape` (`transpose::transposed`: blocks of 16 x 16 on the
/// pool).
fn transposed(y: &[Tensor], m: usize, n: usize, shape: &[usize]) -> Result<Vec<Tensor>> {
    let y = y
        .first()
        .map(Tensor::as_f32)
        .transpose()?
        .unwrap_or_default();
    let out = super::transpose::transposed(y, m, n, "matmul")?;
    Ok(vec![Tensor::from_f32(shape, out)?])
}

/// `embedding(ids, w)` with a packed table: only the picked rows are decoded. Ids out of range
/// (and every other bad input) go to the reference, which reports them.
fn embedding(ids: &Tensor, w: &Tensor) -> Option<Result<Vec<Tensor>>> {
    if !w.dtype().is_weight() || w.rank() != 2 || !ids.is_host() || !w.is_host() {
        return None;
    }
    let (vocab, dim) = (w.shape()[0], w.shape()[1]);
    let ids_v = ids.to_i64_vec().ok()?;
    if ids_v.is_empty() || ids_v.iter().any(|&i| i < 0 || i as u64 >= vocab as u64) {
        return None;
    }
    let row_bytes = w.dtype().bytes_for(dim)?;
    let (packed, layout) = w.packed_in().ok()?;
    let Some(len) = ids_v.len().checked_mul(dim) else {
        return Some(Err(Error::bad_shape(
            "embedding",
            "ids",
            &[ids_v.len(), dim],
            alloc::string::String::from("output size overflows"),
        )));
    };
    let mut out = match super::buffers::filled(len, 0.0, "embedding") {
        Ok(out) => out,
        Err(e) => return Some(Err(e)),
    };
    let mut plain = (0, Vec::new());
    for (o, &id) in out.chunks_exact_mut(dim.max(1)).zip(&ids_v) {
        let row = plain_row(
            w.dtype(),
            (packed, layout),
            row_bytes,
            vocab,
            id as usize,
            &mut plain,
        );
        if let Err(e) = row.and_then(|row| quant::dequantize_into(w.dtype(), row, o)) {
            return Some(Err(e));
        }
    }
    let mut shape = ids.shape().to_vec();
    shape.push(dim);
    Some(Tensor::from_f32(&shape, out).map(|t| vec![t]))
}

/// `act(x @ w^T + bias)` for a packed `w`, shaped as linear's output or `out_shape`.
fn product_of(
    activation: Activation,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    out_shape: Option<Vec<usize>>,
    exact: bool,
) -> Option<Result<Vec<Tensor>>> {
    if !w.dtype().is_weight() || x.dtype() != DType::F32 || !x.is_host() || !w.is_host() {
        return None;
    }
    // f16 and bf16 weights: widened in registers, any number of rows (half_dot.rs).
    if matches!(w.dtype(), DType::F16 | DType::BF16) {
        return super::half_dot::product_of(activation, x, w, bias, out_shape);
    }
    let (rows, k, n) = match bias {
        Some(b) => linear::check(x.shape(), w.shape(), b.shape()).ok()?,
        None => {
            let (xs, ws) = (x.shape(), w.shape());
            if ws.len() != 2 || xs.is_empty() {
                return None;
            }
            let k = xs[xs.len() - 1];
            if k != ws[1] {
                return None;
            }
            (x.numel() / k.max(1), k, ws[0])
        }
    };
    let quantized = qdot::takes(w.dtype());
    // Decode rows take the integer products (unless exact); prefill rows take them at single
    // precision, and at residual precision (which doubles their work) where the tiled integer
    // GEMM beats the f32 one (`qdot::gemm::residual_prefill`): else (and with exact activations,
    // at any count) the GEMM on the weight decoded panel by panel.
    let integer = !exact
        && quantized
        && (rows <= MAX_ROWS
            || config::activation_precision() == qdot::Precision::Single
            || qdot::gemm::residual_prefill(Family::best(), w.dtype(), rows));
    let panels = quantized && !integer;
    if rows == 0 || k == 0 || n == 0 || (!integer && !panels) {
        return None;
    }
    let xv = x.as_f32().ok()?;
    let bv = match bias {
        Some(b) => Some(b.as_f32().ok()?),
        None => None,
    };
    let packed = w.packed_in().ok()?;
    let row_bytes = w.dtype().bytes_for(k)?;
    let out_shape = out_shape.unwrap_or_else(|| linear::out_shape(x.shape(), n));
    if panels {
        return Some(super::decoded_b::product(
            w.dtype(),
            packed,
            row_bytes,
            xv,
            bv,
            activation,
            (rows, k, n),
            &out_shape,
        ));
    }
    Some(integer_product(
        w.dtype(),
        packed,
        row_bytes,
        xv,
        bv,
        activation,
        (rows, k, n),
        &out_shape,
    ))
}

/// The product with 8-bit activations and integer dot products ([`qdot::product_t`]).
#[allow(clippy::too_many_arguments)]
fn integer_product(
    dtype: DType,
    packed: (&[u8], Layout),
    row_bytes: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    activation: Activation,
    (rows, k, n): (usize, usize, usize),
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    let (family, precision) = (Family::best(), config::activation_precision());
    #[cfg(target_arch = "x86_64")]
    if qdot::into_rows::takes_into_rows(family, dtype, rows, n) {
        // Prefill on the eight-row GEMM: the output written as `[rows, n]`, bias included.
        let mut out = super::buffers::zeroed(rows * n, "matmul")?;
        let args = (packed, row_bytes, x, (rows, k, n), bias);
        if qdot::into_rows::product_into_rows(family, precision, dtype, args, &mut out)? {
            if activation != Activation::None {
                let grain = (1usize << 16).div_ceil(n);
                super::pool::for_slices(&mut out, n, grain, &|_, part| {
                    part.iter_mut()
                        .for_each(|v| *v = linear::act(activation, *v));
                    Ok(())
                })?;
            }
            return Ok(vec![Tensor::from_f32(out_shape, out)?]);
        }
    }
    let mut t = super::buffers::zeroed(rows * n, "matmul")?;
    qdot::product_t_in(
        family,
        precision,
        dtype,
        packed,
        row_bytes,
        x,
        (rows, k, n),
        &mut t,
    )?;
    super::transposed::finish(t, (rows, n), bias, activation, out_shape)
}

/// Row `j` of a weight of `n` rows in the plain layout: the bytes themselves, or (interleaved)
/// from its group unpacked into `cache` (group index + 1 and its plain bytes, kept for the
/// next row of the same group, reserved fallibly). Errs where the packed bytes do not hold
/// row `j` or the cache cannot be had.
fn plain_row<'a>(
    dtype: DType,
    (packed, layout): (&'a [u8], Layout),
    row_bytes: usize,
    n: usize,
    j: usize,
    cache: &'a mut (usize, Vec<u8>),
) -> Result<&'a [u8]> {
    let g = interleave::GROUP;
    let short = || {
        Error::bad_shape(
            "embedding",
            "weight",
            &[n, row_bytes],
            alloc::format!("its bytes do not hold row {j}"),
        )
    };
    if layout == Layout::Plain || j >= n / g * g {
        let at = j.checked_mul(row_bytes).ok_or_else(short)?;
        let end = at.checked_add(row_bytes).ok_or_else(short)?;
        return packed.get(at..end).ok_or_else(short);
    }
    let g0 = j / g * g;
    let group_bytes = g.checked_mul(row_bytes).ok_or_else(short)?;
    if cache.0 != j / g + 1 {
        super::buffers::grow(&mut cache.1, group_bytes, 0, "embedding row group")?;
        let at = g0.checked_mul(row_bytes).ok_or_else(short)?;
        let end = at.checked_add(group_bytes).ok_or_else(short)?;
        let src = packed.get(at..end).ok_or_else(short)?;
        interleave::unpack_group(dtype, src, row_bytes, &mut cache.1[..group_bytes]);
        cache.0 = j / g + 1;
    }
    let at = (j - g0) * row_bytes;
    Ok(&cache.1[at..at + row_bytes])
}

/// Weight rows per grain of [`panel_product`]'s ranges: the pool cuts `0..n` at multiples of
/// it.
const PANEL_GRAIN: usize = 16;

/// The most f32 values of one decoded panel (2 MiB): a panel stays in L2/L3 while the GEMM
/// reads it.
const PANEL_VALUES: usize = 1 << 19;

/// `out_t[j * rows + r] = dot(w row j, x row r)` (the transposed product) with f32
/// activations, on `threads` threads of the pool: each range of weight rows (whole
/// `PANEL_GRAIN`s) decodes its rows a panel at a time and runs the single-threaded blocked
/// GEMM `panel . x^T` into its own rows of `out_t`. Every output is one dot product of the
/// blocked GEMM whose arithmetic does not depend on the tile, panel or range it falls in, so
/// the bits are the same on any number of threads.
pub fn panel_product_t(
    threads: usize,
    dtype: DType,
    packed: &[u8],
    row_bytes: usize,
    x: &[f32],
    dims: (usize, usize, usize),
    out_t: &mut [f32],
) -> Result<()> {
    panel_product_t_in(
        threads,
        dtype,
        (packed, Layout::Plain),
        row_bytes,
        x,
        dims,
        out_t,
    )
}

/// [`panel_product_t`] on a weight in either layout ([`qdot::interleave`]): each panel's rows
/// unpacked to the plain layout before they are decoded.
pub fn panel_product_t_in(
    threads: usize,
    dtype: DType,
    (packed, layout): (&[u8], Layout),
    row_bytes: usize,
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    out_t: &mut [f32],
) -> Result<()> {
    check_panel_operands(dtype, packed, row_bytes, x, (rows, k, n), out_t.len())?;
    if rows == 0 || n == 0 {
        return Ok(());
    }
    let kernel = Kernel::best();
    let count = super::pool::ranges(threads, n, PANEL_GRAIN).count();
    let mut scratch: Vec<(Gemm, Vec<f32>)> = Vec::new();
    scratch
        .try_reserve_exact(count)
        .map_err(|_| panel_error((n, k), "too many ranges"))?;
    scratch.extend((0..count).map(|_| (Gemm::new(kernel).with_threads(1), Vec::new())));
    // `x^T` (`k x rows`): the GEMM's right operand, packed once for every panel (packing it per
    // panel was about 12% of a 256-token prefill).
    let xt = PackedB::new(kernel, MatRef::new(x, rows, k, false)?.t())?;
    let dims = (rows, k, n);
    super::pool::for_slices_scratch_on(threads, out_t, rows, PANEL_GRAIN, &mut scratch, &|js,
                                                                                          out,
                                                                                          (
        gemm,
        buf,
    )| {
        // The GEMM accumulates: the outputs start at 0 whatever `out_t` held.
        out.fill(0.0);
        panel_range(
            dtype,
            (packed, layout),
            row_bytes,
            (&xt, dims),
            js,
            out,
            (gemm, buf),
        )
    })
}

fn panel_error((n, k): (usize, usize), why: &str) -> crate::error::Error {
    crate::error::Error::bad_shape("matmul", "w", &[n, k], alloc::string::String::from(why))
}

/// Whether a panel product's operands have its sizes ([`qdot::sizes_agree`], `out_len` outputs).
fn check_panel_operands(
    dtype: DType,
    packed: &[u8],
    row_bytes: usize,
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    out_len: usize,
) -> Result<()> {
    let sizes = packed.len() >= n.saturating_mul(row_bytes)
        && x.len() == rows.saturating_mul(k)
        && Some(out_len) == n.checked_mul(rows);
    if dtype.bytes_for(k) != Some(row_bytes) || !sizes {
        return Err(panel_error((n, k), "operand sizes disagree"));
    }
    Ok(())
}

/// Weight rows `js` (whole `PANEL_GRAIN`s) of a panel product into `out` (`[js, rows]`,
/// zeroed): decoded a panel at a time into `buf` and multiplied by `x^T` (`xt`) on `gemm`.
#[allow(clippy::too_many_arguments)]
fn panel_range(
    dtype: DType,
    (packed, layout): (&[u8], Layout),
    row_bytes: usize,
    (xt, (rows, k, n)): (&PackedB, (usize, usize, usize)),
    js: core::ops::Range<usize>,
    out: &mut [f32],
    (gemm, buf): (&mut Gemm, &mut Vec<f32>),
) -> Result<()> {
    // Rows per panel: whole grains, at most `PANEL_VALUES` values.
    let p = (PANEL_VALUES / k.max(1)).clamp(PANEL_GRAIN, 512) / PANEL_GRAIN * PANEL_GRAIN;
    let mut j0 = js.start;
    while j0 < js.end {
        let pn = p.min(js.end - j0);
        super::buffers::grow(buf, pn * k, 0.0, "matmul weight panel")?;
        let w = &packed[j0 * row_bytes..(j0 + pn) * row_bytes];
        // Interleaved groups (panels start at whole grains, whole groups) decode straight
        // from their layout; plain rows (and the tail) as they are.
        let grouped = match layout {
            Layout::Rows8 => (n / interleave::GROUP * interleave::GROUP).saturating_sub(j0),
            Layout::Plain => 0,
        }
        .min(pn)
            / interleave::GROUP
            * interleave::GROUP;
        let (wg, wp) = w.split_at(grouped * row_bytes);
        let (og, op) = buf[..pn * k].split_at_mut(grouped * k);
        let gbytes = interleave::GROUP * row_bytes;
        for (g, o) in wg
            .chunks_exact(gbytes)
            .zip(og.chunks_exact_mut(interleave::GROUP * k))
        {
            interleave::decode_group(dtype, g, row_bytes, o);
        }
        for (wr, o) in wp.chunks_exact(row_bytes).zip(op.chunks_exact_mut(k)) {
            quant::decode_blocks(dtype, wr, o);
        }
        let a = MatRef::new(&buf[..pn * k], pn, k, false)?;
        let at = (j0 - js.start) * rows;
        gemm.run_blocked_packed(a, xt, &mut out[at..at + pn * rows], rows)?;
        j0 += pn;
    }
    Ok(())
}

#[cfg(test)]
mod repack_tests;
#[cfg(test)]
mod tests;
