//! The eight-row interleaved layout of `Q4_0`, `Q5_0` and `Q8_0` weights (llama.cpp's CPU
//! "repack", `block_q4_0x8`, in a layout of our own), made once per weight for x86 decode.
//!
//! Each group of [`GROUP`] whole weight rows keeps its place in the tensor (`8 * row_bytes`
//! bytes at `8 g * row_bytes`), and within it, for each block index `b`, one *group-block* of
//! `8 * block_bytes` bytes (the same size as the eight plain blocks):
//!
//! - the eight rows' f16 scales (16 bytes), so one load and one conversion give eight scales;
//! - `Q5_0` only: eight `u32` masks of the fifth bits, mask `2c + h` with bit `4j + t` the
//!   fifth bit of row `j`'s element `16h + 4c + t` (32 bytes): one mask is the byte mask of
//!   one chunk of nibbles below;
//! - the quants in chunks of 4 bytes, chunk `c` of row `j` at `4 (8c + j)`: one 32-byte load
//!   holds 4 bytes of each of the eight rows, the four bytes a `vpdpbusd` lane sums, so lane
//!   `j` is row `j`'s partial dot product and no horizontal add is needed. `Q4_0` and `Q5_0`
//!   chunk their 16 nibble bytes (chunk `c`'s low nibbles are elements `4c..4c + 4`, its high
//!   ones `16 + 4c..`); `Q8_0` chunks its 32 values, stored plus 128 (`v ^ 0x80`, unsigned),
//!   so `vpdpbusd` takes them as they are and 128 times the activation sum comes off.
//!
//! Made at load by the CLI's model build on the CPU backend ([`repack_tensor`], where
//! [`repacks_for`] the kernel family: the x86 ones; `KERNELS_CPU_REPACK=0` turns it off), never
//! for a GPU backend, which takes the plain bytes. Rows after the last whole group (the tail)
//! stay in the plain layout. [`unpack_group`]
//! gives a group's plain bytes back, so every path that needs them (another family, prefill,
//! a row of `x` with NaN or infinity) runs on a repacked weight.

use alloc::vec::Vec;

use super::Family;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Weight rows per interleaved group.
pub const GROUP: usize = 8;

pub use crate::packed::Layout;

/// Whether `dtype` has the interleaved layout.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q5_0 | DType::Q8_0)
}

/// `plain`'s `n` rows (`row_bytes` each, of `dtype`) in the interleaved layout: the same
/// number of bytes. Fails for another dtype or sizes that disagree, or when the copy cannot be
/// reserved.
pub fn repack(dtype: DType, plain: &[u8], row_bytes: usize, n: usize) -> Result<Vec<u8>> {
    repack_in(dtype, plain, row_bytes, n, Vec::new())
}

/// [`repack`] into `out` (emptied first; its capacity is used where it suffices, so a caller
/// can hand in memory it prepared, such as memory advised into huge pages).
pub fn repack_in(
    dtype: DType,
    plain: &[u8],
    row_bytes: usize,
    n: usize,
    mut out: Vec<u8>,
) -> Result<Vec<u8>> {
    let bb = dtype.block_bytes();
    let bad = |why: &str| {
        Error::bad_shape(
            "repack",
            "w",
            &[n, row_bytes],
            alloc::string::String::from(why),
        )
    };
    if !supports(dtype) || row_bytes == 0 || !row_bytes.is_multiple_of(bb) {
        return Err(bad("not a q4_0, q5_0 or q8_0 weight of whole blocks"));
    }
    if n.checked_mul(row_bytes) != Some(plain.len()) {
        return Err(bad("the bytes are not n rows"));
    }
    out.clear();
    out.try_reserve_exact(plain.len())
        .map_err(|_| Error::OutOfMemory {
            what: alloc::format!("a repacked {dtype} weight"),
            bytes: plain.len() as u64,
        })?;
    out.resize(plain.len(), 0);
    let gb = GROUP * row_bytes;
    let whole = n / GROUP * gb;
    for (src, dst) in plain[..whole]
        .chunks_exact(gb)
        .zip(out[..whole].chunks_exact_mut(gb))
    {
        repack_group(dtype, src, row_bytes, dst);
    }
    out[whole..].copy_from_slice(&plain[whole..]);
    Ok(out)
}

/// One group: `src` holds [`GROUP`] plain rows, `dst` gets them interleaved.
pub fn repack_group(dtype: DType, src: &[u8], row_bytes: usize, dst: &mut [u8]) {
    match dtype {
        DType::Q8_0 => repack_blocks::<34, 8, 2, 16>(src, row_bytes, dst, 0x8080_8080),
        DType::Q5_0 => repack_blocks::<22, 4, 6, 48>(src, row_bytes, dst, 0),
        _ => repack_blocks::<18, 4, 2, 16>(src, row_bytes, dst, 0),
    }
}

/// [`repack_group`] for blocks of `BB` bytes with `NC` chunks of quants at `QS` in a plain
/// block and at `Q` in a group-block (`flip` added to the stored quants, as a word).
#[inline(always)]
fn repack_blocks<const BB: usize, const NC: usize, const QS: usize, const Q: usize>(
    src: &[u8],
    row_bytes: usize,
    dst: &mut [u8],
    flip: u32,
) {
    let nb = row_bytes / BB;
    for b in 0..nb {
        let g = &mut dst[b * GROUP * BB..(b + 1) * GROUP * BB];
        let mut words = [[0u32; GROUP]; NC];
        let mut qh = [0u32; GROUP];
        for j in 0..GROUP {
            let at = j * row_bytes + b * BB;
            let blk: &[u8; BB] = match src[at..at + BB].try_into() {
                Ok(b) => b,
                Err(_) => return,
            };
            g[2 * j..2 * j + 2].copy_from_slice(&blk[..2]);
            qh[j] = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
            for (c, wc) in words.iter_mut().enumerate() {
                let r = &blk[QS + 4 * c..QS + 4 * c + 4];
                wc[j] = u32::from_le_bytes([r[0], r[1], r[2], r[3]]) ^ flip;
            }
        }
        if Q == 48 {
            for m in 0..8 {
                let (c, h) = (m / 2, m % 2);
                let mask = qh.iter().enumerate().fold(0u32, |a, (j, qh)| {
                    a | ((qh >> (16 * h + 4 * c)) & 0xF) << (4 * j)
                });
                g[16 + 4 * m..20 + 4 * m].copy_from_slice(&mask.to_le_bytes());
            }
        }
        // Chunk `8c + j` of the quants is row `j`'s chunk `c`.
        for (c, wc) in words.iter().enumerate() {
            for (j, w) in wc.iter().enumerate() {
                let at = Q + 4 * (GROUP * c + j);
                g[at..at + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
}

/// The inverse of [`repack_group`]: `dst` gets the [`GROUP`] plain rows of the interleaved
/// `src`.
pub fn unpack_group(dtype: DType, src: &[u8], row_bytes: usize, dst: &mut [u8]) {
    match dtype {
        DType::Q8_0 => unpack_blocks::<34, 8, 2, 16>(src, row_bytes, dst, 0x8080_8080),
        DType::Q5_0 => unpack_blocks::<22, 4, 6, 48>(src, row_bytes, dst, 0),
        _ => unpack_blocks::<18, 4, 2, 16>(src, row_bytes, dst, 0),
    }
}

/// [`unpack_group`] for blocks of `BB` bytes with `NC` chunks of quants at `QS` in a plain
/// block and at `Q` in a group-block (`flip` added to the stored quants, as a word).
#[inline(always)]
fn unpack_blocks<const BB: usize, const NC: usize, const QS: usize, const Q: usize>(
    src: &[u8],
    row_bytes: usize,
    dst: &mut [u8],
    flip: u32,
) {
    let nb = row_bytes / BB;
    for b in 0..nb {
        let g = &src[b * GROUP * BB..(b + 1) * GROUP * BB];
        // Chunk `8c + j` of the quants is row `j`'s chunk `c`.
        let mut words = [[0u32; GROUP]; NC];
        for (c, wc) in words.iter_mut().enumerate() {
            for (j, w) in wc.iter_mut().enumerate() {
                let at = Q + 4 * (GROUP * c + j);
                *w = u32::from_le_bytes([g[at], g[at + 1], g[at + 2], g[at + 3]]) ^ flip;
            }
        }
        let mut qh = [0u32; GROUP];
        if Q == 48 {
            for m in 0..8 {
                let (c, h) = (m / 2, m % 2);
                let at = 16 + 4 * m;
                let mask = u32::from_le_bytes([g[at], g[at + 1], g[at + 2], g[at + 3]]);
                for (j, qh) in qh.iter_mut().enumerate() {
                    *qh |= ((mask >> (4 * j)) & 0xF) << (16 * h + 4 * c);
                }
            }
        }
        for j in 0..GROUP {
            let at = j * row_bytes + b * BB;
            let blk: &mut [u8; BB] = match (&mut dst[at..at + BB]).try_into() {
                Ok(b) => b,
                Err(_) => return,
            };
            blk[..2].copy_from_slice(&g[2 * j..2 * j + 2]);
            if Q == 48 {
                blk[2..6].copy_from_slice(&qh[j].to_le_bytes());
            }
            for (c, wc) in words.iter().enumerate() {
                blk[QS + 4 * c..QS + 4 * c + 4].copy_from_slice(&wc[j].to_le_bytes());
            }
        }
    }
}

/// The [`GROUP`] rows of the interleaved group `g` (`row_bytes` each, `k` values) decoded to
/// f32 into `out` (`GROUP * k`, row after row): the values `quant::decode_blocks` gives the
/// plain rows, bit for bit (the same `d * q` per value), without unpacking them first.
#[inline(always)]
pub fn decode_group(dtype: DType, g: &[u8], row_bytes: usize, out: &mut [f32]) {
    match dtype {
        DType::Q8_0 => decode_blocks::<34, 8, 16>(g, row_bytes, out),
        DType::Q5_0 => decode_blocks::<22, 4, 48>(g, row_bytes, out),
        _ => decode_blocks::<18, 4, 16>(g, row_bytes, out),
    }
}

#[inline(always)]
fn decode_blocks<const BB: usize, const NC: usize, const Q: usize>(
    g: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    let nb = row_bytes / BB;
    let k = 32 * nb;
    let out = &mut out[..GROUP * k];
    for (b, gb) in g[..GROUP * row_bytes].chunks_exact(GROUP * BB).enumerate() {
        for j in 0..GROUP {
            let d = crate::quant::decode::f16_at(gb, 2 * j);
            let o: &mut [f32; 32] = match (&mut out[j * k + 32 * b..j * k + 32 * b + 32]).try_into()
            {
                Ok(o) => o,
                Err(_) => return,
            };
            for c in 0..NC {
                let at = Q + 4 * (GROUP * c + j);
                let w = [gb[at], gb[at + 1], gb[at + 2], gb[at + 3]];
                if NC == 8 {
                    // Q8_0: stored plus 128.
                    for t in 0..4 {
                        o[4 * c + t] = ((w[t] ^ 0x80) as i8) as f32 * d;
                    }
                } else if Q == 48 {
                    // Q5_0: the fifth bits from the chunk's two masks.
                    let m = |h: usize| {
                        let a = 16 + 4 * (2 * c + h);
                        u32::from_le_bytes([gb[a], gb[a + 1], gb[a + 2], gb[a + 3]]) >> (4 * j)
                    };
                    let (ml, mh) = (m(0), m(1));
                    for t in 0..4 {
                        let lo = (w[t] & 0x0F) as u32 | (((ml >> t) & 1) << 4);
                        let hi = (w[t] >> 4) as u32 | (((mh >> t) & 1) << 4);
                        o[4 * c + t] = d * (lo as i32 - 16) as f32;
                        o[16 + 4 * c + t] = d * (hi as i32 - 16) as f32;
                    }
                } else {
                    for t in 0..4 {
                        o[4 * c + t] = d * ((w[t] & 0x0F) as i32 - 8) as f32;
                        o[16 + 4 * c + t] = d * ((w[t] >> 4) as i32 - 8) as f32;
                    }
                }
            }
        }
    }
}

/// The plain bytes of rows `j0..j0 + count` of a weight in `layout` (`w` the whole weight,
/// `n` rows), written to `dst` (`count * row_bytes`); `j0` and `count` whole groups where they
/// fall among the interleaved rows.
pub fn plain_rows(
    dtype: DType,
    layout: Layout,
    w: &[u8],
    row_bytes: usize,
    n: usize,
    (j0, count): (usize, usize),
    dst: &mut [u8],
) {
    let whole = n / GROUP * GROUP;
    let mut j = j0;
    let end = j0 + count;
    while j < end {
        let o = (j - j0) * row_bytes;
        if layout == Layout::Rows8 && j < whole && j.is_multiple_of(GROUP) && j + GROUP <= end {
            let src = &w[j * row_bytes..(j + GROUP) * row_bytes];
            unpack_group(dtype, src, row_bytes, &mut dst[o..o + GROUP * row_bytes]);
            j += GROUP;
        } else {
            dst[o..o + row_bytes].copy_from_slice(&w[j * row_bytes..(j + 1) * row_bytes]);
            j += 1;
        }
    }
}

/// The plain bytes of a tensor of a weight dtype in any layout (a copy).
pub fn plain_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let (b, layout) = t.packed_in()?;
    let (n, k) = match t.shape() {
        &[n, k] => (n, k),
        _ => (1, t.numel()),
    };
    let row_bytes = t.dtype().bytes_for(k).unwrap_or(b.len());
    let mut out = Vec::new();
    out.try_reserve_exact(b.len())
        .map_err(|_| Error::OutOfMemory {
            what: alloc::format!("the plain bytes of a {} weight", t.dtype()),
            bytes: b.len() as u64,
        })?;
    out.resize(b.len(), 0);
    if layout == Layout::Plain || row_bytes == 0 || n.checked_mul(row_bytes) != Some(b.len()) {
        out.copy_from_slice(b);
    } else {
        plain_rows(t.dtype(), layout, b, row_bytes, n, (0, n), &mut out);
    }
    Ok(out)
}

/// Whether the CPU backend repacks weights for `family`: where it has the eight-row decode
/// kernels (x86), unless `KERNELS_CPU_REPACK=0` (read once with `std`).
pub fn repacks_for(family: Family) -> bool {
    let kernels = matches!(family, Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni)
        && family.missing().is_none();
    #[cfg(feature = "std")]
    {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let off =
            *OFF.get_or_init(|| std::env::var("KERNELS_CPU_REPACK").is_ok_and(|v| v.trim() == "0"));
        kernels && !off
    }
    #[cfg(not(feature = "std"))]
    kernels
}

/// `t` in the interleaved layout when the CPU backend on [`Family::best`] repacks it (a
/// `q4_0`, `q5_0` or `q8_0` matrix of at least [`GROUP`] rows, in the plain layout, where
/// [`repacks_for`] the family): `None` when it stays as it is.
pub fn repack_tensor(t: &Tensor) -> Result<Option<Tensor>> {
    repack_tensor_with(t, &mut |_| Ok(Vec::new()))
}

/// [`repack_tensor`] into the buffer `buffer(bytes)` returns (empty; its capacity is used where
/// it holds `bytes`).
pub fn repack_tensor_with(
    t: &Tensor,
    buffer: &mut dyn FnMut(usize) -> Result<Vec<u8>>,
) -> Result<Option<Tensor>> {
    let &[n, k] = t.shape() else {
        return Ok(None);
    };
    if !supports(t.dtype()) || n < GROUP || !t.is_host() || !repacks_for(Family::best()) {
        return Ok(None);
    }
    let (b, layout) = t.packed_in()?;
    let Some(row_bytes) = t.dtype().bytes_for(k) else {
        return Ok(None);
    };
    if layout != Layout::Plain {
        return Ok(None);
    }
    let bytes = repack_in(t.dtype(), b, row_bytes, n, buffer(b.len())?)?;
    Tensor::from_raw_in(t.shape(), t.dtype(), bytes, Layout::Rows8).map(Some)
}
