//! Prefill's eight-row GEMM writing the op's `[rows, n]` output itself ([`product_into_rows`]):
//! no transposed product to transpose back, no second output buffer, and the bias added as the
//! results are stored. Each thread owns a range of whole groups of eight weight rows, so
//! columns of the output ([`pool::for_columns`]); each store is one row of `x` against the
//! group's eight rows, eight adjacent values.
//!
//! The arithmetic is [`super::product_t_in`]'s: the same kernel's accumulators, a row's two residual
//! terms summed in the same order, then `+ bias` (or `+ 0.0`) as the transposing path adds it.
//! So the output holds the same bits as the transposed product turned back (tested).

use alloc::vec::Vec;

use super::super::{buffers, pool};
use super::{
    Acts, Family, GRAIN_WORK, Layout, Precision, XRow, has_groups_kernel, interleave, takes,
};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::quant;

/// Whether [`product_into_rows`] takes a product of `rows` rows of `x` against `n` weight rows of
/// `dtype` on `family`: prefill (more than one row of `x`), on a family with the eight-row kernel,
/// a format it reads and whole groups of eight weight rows.
pub fn takes_into_rows(family: Family, dtype: DType, rows: usize, n: usize) -> bool {
    rows > 1
        && n > 0
        && n.is_multiple_of(interleave::GROUP)
        && takes(dtype)
        && interleave::supports(dtype)
        && has_groups_kernel(family)
}

/// A product's operands: the packed weight and its layout, its bytes a row, `x`, the sizes
/// `(rows, k, n)` and the bias.
pub type Operands<'a> = (
    (&'a [u8], Layout),
    usize,
    &'a [f32],
    (usize, usize, usize),
    Option<&'a [f32]>,
);

/// `out[r * n + j] = dot(w row j, x row r) + bias[j]` (`+ 0.0` without a bias) for the `n` rows
/// of a packed `w` of `dtype` (`row_bytes` each, plain or interleaved) and the `rows` rows of
/// `x` (`k` each), on the eight-row kernel of `family` at `precision`: the bits of
/// [`super::product_t_in`] transposed, plus the bias.
///
/// `Ok(false)`, with nothing written, where [`takes_into_rows`] does not hold or a row of `x`
/// holds a NaN or an infinity (those rows take the reference's f32 dot on the transposing path).
pub fn product_into_rows(
    family: Family,
    precision: Precision,
    dtype: DType,
    ((packed, layout), row_bytes, x, (rows, k, n), bias): Operands,
    out: &mut [f32],
) -> Result<bool> {
    if !takes_into_rows(family, dtype, rows, n) {
        return Ok(false);
    }
    let bad =
        |why: &str| Error::bad_shape("matmul", "w", &[n, k], alloc::string::String::from(why));
    if dtype.bytes_for(k) != Some(row_bytes) {
        return Err(bad("not a quantized weight of whole blocks"));
    }
    let sizes = packed.len() >= n.saturating_mul(row_bytes)
        && x.len() == rows.saturating_mul(k)
        && out.len() == n.saturating_mul(rows)
        && bias.is_none_or(|b| b.len() == n);
    if !sizes {
        return Err(bad("operand sizes disagree"));
    }
    let residual = precision == Precision::Residual;
    let terms = if residual { 2 } else { 1 };
    let acts = Acts::new(dtype, x, k, residual)?;
    if acts.special.iter().any(|&s| s) {
        return Ok(false);
    }
    let xrows: Vec<XRow> = (0..rows * terms).map(|r| acts.row(r)).collect();
    let nb = k / quant::QK;
    let tiled = super::x86::tiled_x(family, dtype, &xrows, nb)?;
    let group = interleave::GROUP;
    let gbytes = group * row_bytes;
    let work = n.saturating_mul(k).saturating_mul(rows * terms);
    let per_row = (work / n).max(1);
    let grain = GRAIN_WORK.div_ceil(per_row).next_multiple_of(group);
    // A plain weight is interleaved a span of groups (about 512 KiB) at a time.
    let span = ((1 << 19) / row_bytes.max(1))
        .max(1)
        .next_multiple_of(group);
    pool::for_columns(out, n, grain, &|cols, mut view| {
        let ld = view.ld();
        let base = view.as_mut_ptr();
        let w = &packed[cols.start * row_bytes..cols.end * row_bytes];
        let bias = bias.map(|b| &b[cols.clone()]);
        // Columns `at..at + m` of this view from the interleaved groups `groups`.
        let run = |groups: &[u8], at: usize| {
            let m = groups.len() / row_bytes;
            // SAFETY: this view's columns are `cols` (whole groups, since `n` and the grain
            // are multiples of a group) of `rows` rows of `ld = n`; the kernel writes rows
            // `0..rows` (`xrows` holds `rows * terms`, summed in pairs with `residual`) and
            // columns `at..at + m` within them, which no other range holds. The CPU runs
            // `family` (`has_groups_kernel`).
            unsafe {
                super::x86::groups_rows(
                    family,
                    dtype,
                    groups,
                    row_bytes,
                    &tiled,
                    (base.wrapping_add(at), ld),
                    residual,
                    bias.map(|b| &b[at..at + m]),
                )
            };
        };
        if layout == Layout::Rows8 {
            run(w, 0);
            return Ok(());
        }
        let mut shuffled = Vec::new();
        for (s, src) in w.chunks(span * row_bytes).enumerate() {
            buffers::grow(&mut shuffled, src.len(), 0, "interleaved weight span")?;
            let groups = &mut shuffled[..src.len()];
            for (g, u) in src
                .chunks_exact(gbytes)
                .zip(groups.chunks_exact_mut(gbytes))
            {
                interleave::repack_group(dtype, g, row_bytes, u);
            }
            run(groups, s * span);
        }
        Ok(())
    })?;
    Ok(true)
}
