//! The fast `transpose` (`x [..., m, n]` -> `[..., n, m]`): blocks of 16 x 16, so that both
//! sides move whole cache lines, with the output's rows split over the pool. A copy, so the
//! bits are the reference's (`crate::cpu::layout`), NaN payloads included.
//!
//! Prefill of a llama-family model transposes q, k and v to heads and back, and the products
//! on packed weights return their `[rows, n]` results through [`transposed`]. Run by the
//! reference's strided loop on the calling thread, these were 3.5% of a 2-thread prefill of the
//! 0.5B Qwen (Q4_0, 256 tokens, `perf`), with the other thread waiting.

use alloc::vec;
use alloc::vec::Vec;

use super::{buffers, pool};
use crate::cpu::{Owned, View, float_arg, layout};
use crate::error::{Error, Result};
use crate::op::Op;

/// Side of the square blocks.
const BLOCK: usize = 16;

/// Fewest values a range of the pool copies.
const GRAIN_VALUES: usize = 1 << 14;

/// The forward of [`Op::Transpose`] (arguments checked by the caller as the reference does).
pub fn forward(args: &[View<f32>]) -> Result<Vec<Owned<f32>>> {
    let name = Op::Transpose.name();
    let (shape, x) = float_arg(name, args, 0, "x")?;
    let (_, m, n) = layout::matrices(name, "x", shape)?;
    let out = transposed(x, m, n, name)?;
    Ok(vec![Owned::float(layout::swapped(shape), out)])
}

/// A new vector holding each matrix of `src` (`[batches, m, n]` in memory) transposed:
/// `out[b][j * m + i] = src[b][i * n + j]`. Every value is written once (no zeroing first); an
/// allocation failure names `what`.
pub fn transposed(src: &[f32], m: usize, n: usize, what: &str) -> Result<Vec<f32>> {
    transposed_on(super::config::threads(), src, m, n, what)
}

/// [`transposed`] on at most `threads` threads.
fn transposed_on(threads: usize, src: &[f32], m: usize, n: usize, what: &str) -> Result<Vec<f32>> {
    let mut out: Vec<f32> = Vec::new();
    if src.is_empty() {
        return Ok(out);
    }
    let mn = m.checked_mul(n).unwrap_or(0);
    if mn == 0 || !src.len().is_multiple_of(mn) {
        return Err(Error::bad_shape(
            Op::Transpose.name(),
            "x",
            &[src.len(), m, n],
            alloc::format!("{} values are not whole [{m}, {n}] matrices", src.len()),
        ));
    }
    let len = src.len();
    out.try_reserve_exact(len)
        .map_err(|_| buffers::out_of_memory_of::<f32>(alloc::format!("{what} output"), len))?;
    let dst = out.spare_capacity_mut().get_mut(..len).unwrap_or_default();
    let written = dst.len();
    // Units are the output's rows of `m` values: row `r` is column `r % n` of matrix `r / n`.
    let grain = (GRAIN_VALUES / m).max(BLOCK);
    pool::for_slices_on(threads, dst, m, grain, &|rows, part| {
        let mut r = rows.start;
        let mut out = part;
        while r < rows.end {
            let (mat, j0) = (r / n, r % n);
            let count = (BLOCK - j0 % BLOCK).min(n - j0).min(rows.end - r);
            let src = &src[mat * mn..(mat + 1) * mn];
            let (block, rest) = out.split_at_mut(count * m);
            for i0 in (0..m).step_by(BLOCK) {
                let i1 = (i0 + BLOCK).min(m);
                for (dj, row) in block.chunks_exact_mut(m).enumerate() {
                    let j = j0 + dj;
                    for (o, i) in row[i0..i1].iter_mut().zip(i0..i1) {
                        o.write(src[i * n + j]);
                    }
                }
            }
            out = rest;
            r += count;
        }
        Ok(())
    })?;
    // SAFETY: `for_slices_on` returned Ok, so it ran the closure on every range of the
    // `written` (= `len`, reserved above) values' rows, and the closure wrote each row's `m`
    // values (`i0` blocks cover `0..m`): every value is initialized.
    unsafe { out.set_len(written) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Direction;

    /// The fast transpose gives the reference's bits on awkward shapes (batches, single rows
    /// and columns, sides off the block size, a range boundary inside a block), NaN payloads
    /// and infinities included, and the reference's errors.
    #[test]
    fn transpose_is_the_reference_copy() {
        let shapes: [&[usize]; 9] = [
            &[1, 1],
            &[1, 37],
            &[37, 1],
            &[16, 16],
            &[17, 33],
            &[3, 5, 7],
            &[2, 256, 896],
            &[2, 3, 100, 257],
            &[1000, 70],
        ];
        for shape in shapes {
            let len: usize = shape.iter().product();
            let x: Vec<f32> = (0..len)
                .map(|i| match i % 97 {
                    3 => f32::from_bits(0x7fc0_1234 + i as u32 % 7),
                    5 => f32::INFINITY,
                    6 => -0.0,
                    _ => (i as f32 * 0.37).sin(),
                })
                .collect();
            let args = [View::float(shape, &x)];
            let want = crate::cpu::run(&Op::Transpose, Direction::Forward, &args).unwrap();
            let got = forward(&args).unwrap();
            assert_eq!(got[0].shape, want[0].shape, "{shape:?}");
            let bits = |o: &Owned<f32>| o.floats().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[0]), bits(&want[0]), "{shape:?}");
            for threads in [1, 2, 3] {
                let (m, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
                let out = transposed_on(threads, &x, m, n, "test").unwrap();
                let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, bits(&want[0]), "{shape:?} on {threads} threads");
            }
        }
        let x = [1.0f32; 4];
        assert!(transposed(&x, 3, 1, "test").is_err());
        assert!(transposed(&x, 0, 2, "test").is_err());
        assert!(transposed(&[], 2, 2, "test").unwrap().is_empty());
    }
}
