//! Products computed transposed (`t [n, rows]`: each thread owns whole weight rows, so its
//! outputs are contiguous) and written back as the op's `[rows, n]` output, `act(t + bias)`:
//!
//! - [`by_ranges`]: each range of weight rows computes its `t` a block at a time into a scratch
//!   buffer and turns each block straight into its columns of the output while it is still in
//!   cache (prefill's f32 GEMMs on f16 and decoded quantized panels). No whole `t`, no second
//!   pass.
//! - [`finish`]: a whole `t` turned back (the other quantized paths).
//!
//! Both go through [`put`], 16 columns by 8 rows at a time. The arithmetic is the same either
//! way (`t + bias`, `+ 0.0` without one, then the activation), so the bits are too.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use super::buffers;
use super::pool::{self, Columns};
use crate::cpu::linear;
use crate::error::Result;
use crate::op::Activation;
use crate::tensor::Tensor;

/// What [`by_ranges`] runs on each block of weight rows: with its range's state, the block's
/// `t` (`[block, rows]`, zeroed) to fill.
pub type BlockFn<'a, S> = dyn Fn(&mut S, Range<usize>, &mut [f32]) -> Result<()> + Sync + 'a;

/// Values of `t` per block of [`by_ranges`] (64 KiB): a block is still in L2 when it is written
/// out. One block for a whole range (a whole product on one thread: 5 MiB for a 0.5B model's
/// 256-token FFN) went out to memory and back and was zeroed in full first.
const BLOCK_VALUES: usize = 1 << 14;
/// Weight rows of a block come in multiples of 48, of every GEMM kernel's `MR` (4, 6, 8): no
/// tile but a range's last computes rows it throws away.
const BLOCK_UNIT: usize = 48;

/// The op's output, shaped `out_shape`, from a transposed product computed block by block:
/// `0..n` cut into ranges of whole `grain`s over the pool ([`pool::for_columns`]); each range
/// makes its state with `state`, then cuts its columns into blocks of [`BLOCK_UNIT`]s (about
/// [`BLOCK_VALUES`] values of `t` each), and each block's `t` made by `block_t` into a zeroed
/// scratch buffer is written straight into the block's columns, `act(t + bias)`. `block_t` must
/// give the same bits for a weight row whatever block or range it falls in.
#[allow(clippy::too_many_arguments)]
pub fn by_ranges<S>(
    (rows, n): (usize, usize),
    grain: usize,
    bias: Option<&[f32]>,
    activation: Activation,
    out_shape: &[usize],
    state: &(dyn Fn() -> Result<S> + Sync),
    block_t: &BlockFn<S>,
) -> Result<Vec<Tensor>> {
    let len = rows.checked_mul(n).ok_or_else(|| too_large(rows, n))?;
    let mut out = buffers::zeroed(len, "matmul")?;
    let block = (BLOCK_VALUES / rows.max(1) / BLOCK_UNIT).max(1) * BLOCK_UNIT;
    pool::for_columns(&mut out, n.max(1), grain.max(1), &|js, mut view| {
        let mut s = state()?;
        let mut tb = Vec::new();
        buffers::grow(&mut tb, block.min(js.len()) * rows, 0.0, "matmul")?;
        for b0 in js.clone().step_by(block) {
            let b1 = (b0 + block).min(js.end);
            let t = &mut tb[..(b1 - b0) * rows];
            t.fill(0.0);
            block_t(&mut s, b0..b1, t)?;
            let bias = bias.and_then(|b| b.get(b0..b1));
            put(t, &mut view, b0 - js.start, bias, activation);
        }
        Ok(())
    })?;
    Ok(vec![Tensor::from_f32(out_shape, out)?])
}

/// The op's output from a whole transposed product `t [n, rows]`: turned back to `[rows, n]`,
/// `act(t + bias)`. One row (decode) is its own transpose: `t` becomes the output in place.
pub fn finish(
    mut t: Vec<f32>,
    (rows, n): (usize, usize),
    bias: Option<&[f32]>,
    activation: Activation,
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    if rows == 1 && t.len() == n {
        // The same arithmetic as `put` (`+ 0.0` without a bias included).
        for (j, v) in t.iter_mut().enumerate() {
            let b = bias.map_or(0.0, |b| b[j]);
            *v = linear::act(activation, *v + b);
        }
        return Ok(vec![Tensor::from_f32(out_shape, t)?]);
    }
    let len = rows.checked_mul(n).ok_or_else(|| too_large(rows, n))?;
    let mut out = buffers::zeroed(len, "matmul")?;
    // Ranges of whole 16s of columns, about 64K values each.
    let grain = (1usize << 16).div_ceil(rows.max(1)).next_multiple_of(COLS);
    pool::for_columns(&mut out, n.max(1), grain, &|js, mut view| {
        let tb = t.get(js.start * rows..js.end * rows).unwrap_or_default();
        put(tb, &mut view, 0, bias.and_then(|b| b.get(js)), activation);
        Ok(())
    })?;
    Ok(vec![Tensor::from_f32(out_shape, out)?])
}

/// Columns of `out` per block: each row of a block gets 16 adjacent values (one cache line).
const COLS: usize = 16;
/// Rows of `out` per tile within a block (16 loads of 8 adjacent values of `t`, 8 stores of 16
/// adjacent outputs); the rest one row at a time.
const ROWS: usize = 8;

/// `tb` (`[cols, rows]`, the transposed outputs of `cols` weight rows) into columns
/// `at..at + cols` of `view`'s rows, `act(t + bias)` (`bias` holding `cols` values).
pub fn put(
    tb: &[f32],
    view: &mut Columns<'_, f32>,
    at: usize,
    bias: Option<&[f32]>,
    activation: Activation,
) {
    let rows = view.rows();
    if rows == 0 {
        return;
    }
    for (jb, tc) in tb.chunks(COLS * rows).enumerate() {
        let j0 = jb * COLS;
        let cols = tc.len() / rows;
        let mut bs = [0.0f32; COLS];
        for (c, b) in bs.iter_mut().enumerate().take(cols) {
            *b = bias.and_then(|b| b.get(j0 + c)).copied().unwrap_or(0.0);
        }
        let c0 = at + j0;
        let mut r = 0;
        if cols == COLS {
            while r + ROWS <= rows {
                let mut tile = [[0.0f32; ROWS]; COLS];
                for (c, t) in tile.iter_mut().enumerate() {
                    t.copy_from_slice(&tc[c * rows + r..c * rows + r + ROWS]);
                }
                // `i` picks the tile's column and the output row together.
                #[allow(clippy::needless_range_loop)]
                for i in 0..ROWS {
                    let Some(o) = view.row(r + i).and_then(|o| o.get_mut(c0..c0 + COLS)) else {
                        continue;
                    };
                    for (c, v) in o.iter_mut().enumerate() {
                        *v = linear::act(activation, tile[c][i] + bs[c]);
                    }
                }
                r += ROWS;
            }
        }
        for r in r..rows {
            let Some(o) = view.row(r).and_then(|o| o.get_mut(c0..c0 + cols)) else {
                continue;
            };
            for (c, v) in o.iter_mut().enumerate() {
                *v = linear::act(activation, tc[c * rows + r] + bs[c]);
            }
        }
    }
}

pub(super) fn too_large(rows: usize, n: usize) -> crate::error::Error {
    crate::error::Error::bad_shape(
        "matmul",
        "out",
        &[rows, n],
        alloc::string::String::from("output size overflows"),
    )
}
