//! Weights larger than one storage binding (128 MiB by WebGPU's default, the adapter's maximum
//! when larger): the ops that read a model's big matrices take them in row blocks, each bound
//! on its own at an aligned offset of the one buffer the tensor lives in. `x @ W^T` (`linear`,
//! and `matmul` with a transposed 2-D `b`) computes one column block of the output per row block
//! of `W`; the embedding lookup runs once per block of the table, each launch writing the rows
//! whose ids it holds. CUDA binds any tensor whole (`chunk_elems` is unbounded): nothing splits
//! there.

use kernels_core::op::Activation;
use kernels_core::{DType, Error, Result, Tensor};

use crate::device::{
    Device, ElemRange, Family, Fused, Grid, Matmul, OutAt, device_words, u32_of, weight_code,
};
use crate::params::DequantizeParams;
use kernels_core::cpu::matmul::MatmulShape;

/// Byte alignment of every block's offset: WebGPU's largest allowed
/// `minStorageBufferOffsetAlignment`, so any device accepts it.
const ALIGN: usize = 256;

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Most bytes one binding may hold on `be`.
fn binding_bytes(be: &dyn Device) -> usize {
    be.chunk_elems().saturating_mul(4)
}

/// Bytes per row of a `[rows, cols]` tensor of `dtype`; `None` when a row is not a whole number
/// of blocks (such a tensor cannot be cut between rows).
pub(crate) fn row_bytes(dtype: DType, cols: usize) -> Option<usize> {
    if dtype.is_weight() {
        dtype.bytes_for(cols)
    } else {
        cols.checked_mul(4)
    }
}

/// Row blocks `(first, rows)` of a tensor of `n_rows` rows of `row_bytes`, each starting at an
/// aligned byte offset and small enough that its rows, at `fit_bytes` each (`row_bytes`, or
/// the bytes of their decoded f32 form), fit one binding; one block when all of them fit.
/// `LimitExceeded` naming the op when even the smallest aligned block does not fit.
pub(crate) fn row_blocks(
    be: &dyn Device,
    name: &'static str,
    what: &str,
    n_rows: usize,
    (row_bytes, fit_bytes): (usize, usize),
) -> Result<Vec<(usize, usize)>> {
    let limit = binding_bytes(be);
    let fit_bytes = fit_bytes.max(1);
    if n_rows.saturating_mul(fit_bytes) <= limit {
        return Ok(vec![(0, n_rows)]);
    }
    let granule = ALIGN / gcd(row_bytes.max(1), ALIGN);
    let per = (limit / fit_bytes) / granule * granule;
    if per == 0 {
        return Err(Error::LimitExceeded {
            what: format!(
                "{name}: bytes of {granule} rows of {what} ({fit_bytes} bytes each; a block of \
                 a split tensor must start on a {ALIGN}-byte offset) in one storage binding"
            ),
            value: (granule as u64).saturating_mul(fit_bytes as u64),
            limit: limit as u64,
        });
    }
    Ok((0..n_rows.div_ceil(per))
        .map(|b| (b * per, per.min(n_rows - b * per)))
        .collect())
}

/// The binding range, in 4-byte words, of rows `(first, rows)` of `t` (rows of `row_bytes`):
/// `None` (the whole tensor) when the block is all of it.
fn words_of(
    t: &Tensor,
    (first, rows): (usize, usize),
    row_bytes: usize,
    n_rows: usize,
) -> Option<(usize, usize)> {
    if first == 0 && rows == n_rows {
        return None;
    }
    // Blocks start on aligned byte offsets, so `start` is exact.
    let start = first * row_bytes / 4;
    let end = ((first + rows) * row_bytes)
        .div_ceil(4)
        .min(device_words(t));
    Some((start, end - start))
}

/// Whether the 2-D `w` (rows of `cols`) is too large for one binding, or its decoded f32 form
/// would be; with its row bytes `(packed, f32)`.
fn too_big(be: &dyn Device, w: &Tensor) -> Option<(usize, usize)> {
    if w.rank() != 2 {
        return None;
    }
    let (rows, cols) = (w.shape()[0], w.shape()[1]);
    let f32_row = cols.saturating_mul(4);
    let packed_row = row_bytes(w.dtype(), cols).unwrap_or(f32_row);
    (rows.saturating_mul(f32_row) > binding_bytes(be)).then_some((packed_row, f32_row))
}

/// A product whose 2-D weight operand is too large for one binding (or whose decoded f32 form
/// would be), in row blocks of the weight, one launch each; `None` when neither operand needs
/// it (the unsplit kernels run). The weight is `b` read transposed (`x @ W^T`: each block makes
/// a column block of the output, adding its part of the bias) or `a` read as it is (`W @ y`:
/// each block makes a row block). A packed block is decoded into an f32 temporary of its own
/// size first. `dims` are the product's, `linear`'s flattened to one batch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product(
    be: &dyn Device,
    name: &'static str,
    (a, trans_a): (&Tensor, bool),
    (b, trans_b): (&Tensor, bool),
    d: &MatmulShape,
    bias: Option<&Tensor>,
    act: Activation,
    acc: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let side_b = trans_b && d.b_step == 0 && b.rank() == 2;
    let side_a = !trans_a && d.a_step == 0 && a.rank() == 2 && bias.is_none();
    let (w, (packed_row, f32_row)) = match (
        side_b.then(|| too_big(be, b)).flatten(),
        side_a.then(|| too_big(be, a)).flatten(),
    ) {
        (Some(rb), _) => (b, rb),
        (None, Some(rb)) => (a, rb),
        (None, None) => return Ok(None),
    };
    let on_b = core::ptr::eq(w, b);
    // The other operand is bound whole: when it does not fit either, splitting the weight
    // cannot help, and the unsplit path names the op, the operand and the limit.
    let other = if on_b { a } else { b };
    if device_words(other).saturating_mul(4) > binding_bytes(be) {
        return Ok(None);
    }
    let (rows, k) = (w.shape()[0], w.shape()[1]);
    if w.dtype().is_weight() && row_bytes(w.dtype(), k).is_none() {
        return Err(Error::LimitExceeded {
            what: format!(
                "{name}: bytes of a {:?} {} weight in one storage binding (its rows are not whole \
                 blocks, so it cannot be split between rows)",
                w.shape(),
                w.dtype().name()
            ),
            value: w.byte_len() as u64,
            limit: binding_bytes(be) as u64,
        });
    }
    let blocks = row_blocks(be, name, "the weight", rows, (packed_row, f32_row))?;
    let out = super::matmul::product_out(be, name, &d.out_shape, acc)?;
    for &(first, cnt) in &blocks {
        let range = words_of(w, (first, cnt), packed_row, rows);
        let (blk, blk_range) = weight_block(be, name, w, cnt, range)?;
        let blk = &blk;
        let mm = if on_b {
            Matmul {
                a: (a, 0, trans_a),
                b: (blk, 0, true),
                out: &out,
                mnk: (d.m, cnt, d.k),
                steps_batch: (d.a_step, 0, d.batch),
                fused: Fused {
                    bias,
                    act: Some(act),
                    a_dact: None,
                    accumulate: acc.is_some(),
                },
                a_range: None,
                b_range: blk_range,
                out_at: Some(OutAt {
                    ldc: d.n,
                    offset: first,
                    batch_stride: d.m * d.n,
                    bias_offset: first,
                }),
            }
        } else {
            Matmul {
                a: (blk, 0, false),
                b: (b, 0, trans_b),
                out: &out,
                mnk: (cnt, d.n, d.k),
                steps_batch: (0, d.b_step, d.batch),
                fused: Fused {
                    bias: None,
                    act: Some(act),
                    a_dact: None,
                    accumulate: acc.is_some(),
                },
                a_range: blk_range,
                b_range: None,
                out_at: Some(OutAt {
                    ldc: d.n,
                    offset: first * d.n,
                    batch_stride: d.m * d.n,
                    bias_offset: 0,
                }),
            }
        };
        be.matmul(name, &mm)?;
    }
    Ok(Some(out))
}

/// A block of `cnt` rows of the 2-D weight `w`, bound as `range`, as a matmul operand: the
/// weight itself with that range (f32), or the packed block decoded into an f32 temporary of its
/// own size.
fn weight_block(
    be: &dyn Device,
    name: &'static str,
    w: &Tensor,
    cnt: usize,
    range: ElemRange,
) -> Result<(Tensor, ElemRange)> {
    if !w.dtype().is_weight() {
        return Ok((w.clone(), range));
    }
    let k = w.shape().get(1).copied().unwrap_or(0);
    let temp = be.alloc(name, &[cnt, k], DType::F32)?;
    let p = DequantizeParams {
        n: u32_of(name, "elements", cnt * k)?,
        dtype: weight_code(w.dtype()),
        ..Default::default()
    };
    let wr = (w, range);
    be.run_ranges(
        name,
        Family::Quant,
        "dequantize",
        &[],
        p,
        &[wr, wr, wr, wr],
        &[(&temp, None)],
        Grid::Elems(cnt * k),
    )?;
    Ok((temp, None))
}

/// `matmul_swiglu`'s product when `x [rows, k] @ W^T` (`W [2 half, k]`) is larger than one
/// binding: its gate and up halves, `x @ W[..half]^T` and `x @ W[half..]^T`, as two products
/// of `[rows, half]`, each in row blocks of its half of the weight (the sums of the whole
/// product's, computed by the same kernels). `LimitExceeded` naming the op when the up rows do
/// not start on an aligned offset, or a block does not fit.
pub(crate) fn gate_up_halves(
    be: &dyn Device,
    name: &'static str,
    x: &Tensor,
    w: &Tensor,
    half: usize,
) -> Result<[Tensor; 2]> {
    let (rows, k) = (x.shape()[0], w.shape()[1]);
    let f32_row = k.saturating_mul(4);
    let Some(packed_row) = row_bytes(w.dtype(), k) else {
        return Err(Error::LimitExceeded {
            what: format!(
                "{name}: bytes of a [{rows}, {}] product in one storage binding (the {} weight's \
                 rows are not whole blocks, so its halves cannot be bound apart)",
                2 * half,
                w.dtype().name()
            ),
            value: (rows * 2 * half * 4) as u64,
            limit: binding_bytes(be) as u64,
        });
    };
    if !(half * packed_row).is_multiple_of(ALIGN) {
        return Err(Error::LimitExceeded {
            what: format!(
                "{name}: bytes of a [{rows}, {}] product in one storage binding (the up rows \
                 start at byte {} of the weight, not on a {ALIGN}-byte offset, so the halves \
                 cannot be bound apart)",
                2 * half,
                half * packed_row
            ),
            value: (rows * 2 * half * 4) as u64,
            limit: binding_bytes(be) as u64,
        });
    }
    let half_out = |h0: usize| -> Result<Tensor> {
        let out = be.alloc(name, &[rows, half], DType::F32)?;
        for (first, cnt) in row_blocks(be, name, "the weight", half, (packed_row, f32_row))? {
            let range = words_of(w, (h0 + first, cnt), packed_row, 2 * half);
            let (blk, blk_range) = weight_block(be, name, w, cnt, range)?;
            be.matmul(
                name,
                &Matmul {
                    a: (x, 0, false),
                    b: (&blk, 0, true),
                    out: &out,
                    mnk: (rows, cnt, k),
                    steps_batch: (0, 0, 1),
                    fused: Fused::default(),
                    a_range: None,
                    b_range: blk_range,
                    out_at: Some(OutAt {
                        ldc: half,
                        offset: first,
                        batch_stride: rows * half,
                        bias_offset: 0,
                    }),
                },
            )?;
        }
        Ok(out)
    };
    Ok([half_out(0)?, half_out(half)?])
}

/// Rows `(first, rows)` of a tensor, with their binding range in words (`None`: whole).
pub(crate) type Block = ((usize, usize), ElemRange);

/// The row blocks of the embedding table `w [vocab, dim]`, with their binding ranges: see
/// [`row_blocks`].
pub(crate) fn table_blocks(be: &dyn Device, name: &'static str, w: &Tensor) -> Result<Vec<Block>> {
    blocks_of(be, name, "the table", w)
}

/// The row blocks of a packed `w [n, k]` for decode's `matvec`, with their binding ranges.
pub(crate) fn weight_blocks(be: &dyn Device, name: &'static str, w: &Tensor) -> Result<Vec<Block>> {
    blocks_of(be, name, "the weight", w)
}

fn blocks_of(be: &dyn Device, name: &'static str, what: &str, w: &Tensor) -> Result<Vec<Block>> {
    let (vocab, dim) = (w.shape()[0], w.shape()[1]);
    let Some(row) = row_bytes(w.dtype(), dim) else {
        // Rows that are not whole blocks: bound whole (the launch checks the limit).
        return Ok(vec![((0, vocab), None)]);
    };
    Ok(row_blocks(be, name, what, vocab, (row, row))?
        .into_iter()
        .map(|b| (b, words_of(w, b, row, vocab)))
        .collect())
}
