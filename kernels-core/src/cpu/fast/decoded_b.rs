//! Prefill on a block-quantized weight with f32 activations, the weight on the GEMM's right:
//! `out [rows, n] = x [rows, k] . W^T`, `x` packed once as `A~` (panels of the kernel's `MR`
//! rows) and `W` decoded straight into `B~`, one micro-panel of `NR` weight rows by `KC`
//! columns at a time, each weight value once. Nothing larger than a micro-panel is ever
//! decoded, no pass transposes a decoded weight, and the tiles land in `[rows, n]` order.
//!
//! Each output is the blocked GEMM's dot product: within a `KC` block one chain of
//! multiply-adds in `p` order, the blocks added in order, then `act(t + bias)` (`+ 0.0` without
//! a bias). That is the arithmetic of [`super::packed::panel_product_t`] (the weight on the
//! left, `x^T` on the right), with the two factors of each product swapped, so the bits are the
//! same, on any number of threads.
//!
//! On x86 with AVX2 the eight-row interleaved `Q8_0` and `Q4_0` groups
//! ([`super::qdot::interleave`]) decode in registers: one 32-byte load holds four values of each
//! of the group's eight rows, a byte shuffle turns it into four columns of eight rows, and each
//! column is one widening, one conversion and one multiply by the eight rows' scales. Every
//! other format and layout decodes a micro-panel's rows into a small row-major buffer (L1)
//! that is transposed into `B~` eight by eight; there the decoders are compiled for AVX2 and
//! F16C where the CPU has them, and `Q4_K` and `Q6_K` rows take vector decoders
//! (`decoded_b/kquant_x86.rs`), each value the reference decoder's bits.
//!
//! Prefill on a weight of this path streams it from memory (a 0.5B model's matrices are far
//! larger than the caches), and a micro-panel reads short segments of rows far apart, which the
//! hardware prefetcher does not follow: the next micro-panel's bytes are prefetched into L2
//! while one is decoded and multiplied. Exact activations (`KERNELS_EXACT_ACTIVATIONS=1`) take
//! this path for decode's few rows too.

use alloc::vec;
use alloc::vec::Vec;

use super::buffers;
use super::gemm::{Kernel, MatRef};
use super::kernels::MicroKernel;
use super::pool;
use super::qdot::{Layout, interleave};
use super::transposed::too_large;
use crate::cpu::linear;
use crate::error::{Error, Result};
use crate::op::Activation;
use crate::quant;
use crate::tensor::{DType, Tensor};

/// Values of one range's block of outputs (`[rows, block]`, 64 KiB): it stays in L2 while the
/// `KC` blocks add into it, and is written out once.
const BLOCK_VALUES: usize = 1 << 14;

/// Weight rows per grain of the pool's ranges: whole groups of eight, whole micro-panels of
/// every kernel but AVX-512's (32 rows; its ranges may end in a short panel).
const GRAIN: usize = 16;

/// The weight (`n` rows of `row_bytes` bytes of `dtype`, in `layout`).
#[derive(Clone, Copy)]
struct Weight<'a> {
    dtype: DType,
    bytes: &'a [u8],
    layout: Layout,
    row_bytes: usize,
    n: usize,
}

/// `act(x @ w^T + bias)` shaped `out_shape`, `w` (`[n, k]` of `dtype`, in `layout`) decoded
/// micro-panel by micro-panel into the blocked GEMM of [`Kernel::best`], the weight rows split
/// over the pool.
#[allow(clippy::too_many_arguments)]
pub fn product(
    dtype: DType,
    (bytes, layout): (&[u8], Layout),
    row_bytes: usize,
    x: &[f32],
    bias: Option<&[f32]>,
    activation: Activation,
    (rows, k, n): (usize, usize, usize),
    out_shape: &[usize],
) -> Result<Vec<Tensor>> {
    let sizes = bytes.len() >= n.saturating_mul(row_bytes)
        && x.len() == rows.saturating_mul(k)
        && bias.is_none_or(|b| b.len() == n);
    let be = dtype.block_elems();
    if !dtype.is_quantized() || dtype.bytes_for(k) != Some(row_bytes) || !sizes || be == 0 {
        return Err(Error::bad_shape(
            "matmul",
            "w",
            &[n, k],
            alloc::string::String::from("operand sizes disagree"),
        ));
    }
    let len = rows.checked_mul(n).ok_or_else(|| too_large(rows, n))?;
    let mut out = buffers::zeroed(len, "matmul")?;
    if len > 0 && k > 0 {
        let w = Weight {
            dtype,
            bytes,
            layout,
            row_bytes,
            n,
        };
        let ops = (w, x, bias, activation, (rows, k));
        match Kernel::best() {
            Kernel::Portable(kr) => run(kr, ops, &mut out)?,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2Fma(kr) => run(kr, ops, &mut out)?,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512(kr) => run(kr, ops, &mut out)?,
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Kernel::Simd128(kr) => run(kr, ops, &mut out)?,
        }
    }
    Ok(vec![Tensor::from_f32(out_shape, out)?])
}

type Operands<'a> = (
    Weight<'a>,
    &'a [f32],
    Option<&'a [f32]>,
    Activation,
    (usize, usize),
);

fn run<K: MicroKernel + Sync>(
    kernel: K,
    (w, x, bias, activation, (rows, k)): Operands,
    out: &mut [f32],
) -> Result<()> {
    let (mr, nr) = (K::MR, K::NR);
    // `x` as `A~`: for each `KC` block (`stride` values apart), every row in panels of `MR`
    // (`MR * kc` values each); the blocks packed over the pool.
    let panels = rows.div_ceil(mr);
    let blocks = k.div_ceil(K::KC);
    let stride = panels
        .checked_mul(mr)
        .and_then(|v| v.checked_mul(K::KC.min(k)))
        .ok_or_else(|| too_large(rows, k))?;
    let a_len = stride
        .checked_mul(blocks)
        .ok_or_else(|| too_large(rows, k))?;
    let mut a_pack = buffers::zeroed(a_len, "matmul activation panels")?;
    let xr = MatRef::new(x, rows, k, false)?;
    pool::for_slices(&mut a_pack, stride, 1, &|bs, part| {
        for (b, dst) in bs.zip(part.chunks_mut(stride)) {
            let (pc, kc) = (b * K::KC, K::KC.min(k - b * K::KC));
            K::pack_a(&mut dst[..panels * mr * kc], xr, 0, rows, pc, kc);
        }
        Ok(())
    })?;
    let block = (BLOCK_VALUES / rows.max(1) / nr).max(1) * nr;
    let grain = GRAIN.max(nr);
    pool::for_columns(out, w.n, grain, &|js, mut view| {
        let bw = block.min(js.len());
        let (mut c, mut b_buf, mut tmp) = (Vec::new(), Vec::new(), Vec::new());
        buffers::grow(&mut c, bw * rows, 0.0, "matmul")?;
        let b_pack = super::gemm::aligned(&mut b_buf, nr * K::KC.min(k))?;
        for b0 in js.clone().step_by(block) {
            let b1 = (b0 + block).min(js.end);
            let cols = b1 - b0;
            let c = &mut c[..cols * rows];
            c.fill(0.0);
            for pc in (0..k).step_by(K::KC) {
                let kc = K::KC.min(k - pc);
                let at = pc / K::KC * stride;
                let a_block = &a_pack[at..at + panels * mr * kc];
                for j0 in (b0..b1).step_by(nr) {
                    let nr_here = nr.min(b1 - j0);
                    // The next panel's bytes, fetched while this one is decoded and multiplied
                    // (its rows' short segments are too far apart for the hardware prefetcher).
                    if j0 + nr < b1 {
                        prefetch_panel(w, (j0 + nr, nr.min(b1 - j0 - nr)), (pc, kc));
                    } else if pc + K::KC < k {
                        prefetch_panel(
                            w,
                            (b0, nr.min(cols)),
                            (pc + K::KC, K::KC.min(k - pc - K::KC)),
                        );
                    }
                    let b_panel = &mut b_pack[..nr * kc];
                    decode_panel(w, (j0, nr_here), (pc, kc), nr, b_panel, &mut tmp)?;
                    for (ip, a_panel) in a_block.chunks_exact(mr * kc).enumerate() {
                        let i0 = ip * mr;
                        let tile = c.get_mut(i0 * cols + (j0 - b0)..).unwrap_or_default();
                        kernel.tile(a_panel, b_panel, tile, cols, mr.min(rows - i0), nr_here);
                    }
                }
            }
            // The block into its columns: `act(t + bias)`.
            let bias = bias.and_then(|b| b.get(b0..b1));
            let at = b0 - js.start;
            for (r, cr) in c.chunks_exact(cols).enumerate() {
                if let Some(o) = view.row(r).and_then(|o| o.get_mut(at..at + cols)) {
                    write_out(o, cr, bias, activation);
                }
            }
        }
        Ok(())
    })
}

/// `o = act(t + bias)` (`+ 0.0` without a bias), the activation chosen once per row so the
/// plain sum vectorizes.
fn write_out(o: &mut [f32], t: &[f32], bias: Option<&[f32]>, activation: Activation) {
    match (bias, activation) {
        (Some(b), Activation::None) => {
            for ((o, &t), &b) in o.iter_mut().zip(t).zip(b) {
                *o = t + b;
            }
        }
        (None, Activation::None) => {
            for (o, &t) in o.iter_mut().zip(t) {
                *o = t + 0.0;
            }
        }
        (Some(b), a) => {
            for ((o, &t), &b) in o.iter_mut().zip(t).zip(b) {
                *o = linear::act(a, t + b);
            }
        }
        (None, a) => {
            for (o, &t) in o.iter_mut().zip(t) {
                *o = linear::act(a, t + 0.0);
            }
        }
    }
}

/// Prefetches into L2 the bytes [`decode_panel`] reads for weight rows `j0..j0 + count`,
/// columns `pc..pc + kc`: a group's contiguous group-blocks (interleaved), or each row's blocks.
/// A hint only (nothing on other architectures); out-of-range rows are skipped.
#[inline(always)]
fn prefetch_panel(w: Weight, (j0, count): (usize, usize), (pc, kc): (usize, usize)) {
    #[cfg(target_arch = "x86_64")]
    {
        let (be, bb) = (w.dtype.block_elems(), w.dtype.block_bytes());
        if be == 0 {
            return;
        }
        let seg = pc / be * bb..(pc + kc).div_ceil(be) * bb;
        let g = interleave::GROUP;
        let whole = w.n / g * g;
        let fetch = |bytes: Option<&[u8]>| {
            for line in bytes.unwrap_or_default().chunks(64) {
                // SAFETY: a prefetch of an address inside the weight; it never faults.
                unsafe {
                    core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                        line.as_ptr() as *const i8,
                    )
                };
            }
        };
        let mut j = j0;
        while j < (j0 + count).min(w.n) {
            if w.layout == Layout::Rows8 && j < whole && j.is_multiple_of(g) {
                let at = j * w.row_bytes;
                fetch(w.bytes.get(at + seg.start * g..at + seg.end * g));
                j += g;
            } else {
                let at = j * w.row_bytes;
                fetch(w.bytes.get(at + seg.start..at + seg.end));
                j += 1;
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (w, j0, count, pc, kc);
}

/// Weight rows `j0..j0 + count` (`count <= nr`), columns `pc..pc + kc`, as one `B~`
/// micro-panel: `dst[p * nr + r]` is row `j0 + r`'s value `pc + p`, rows past `count` zero.
fn decode_panel(
    w: Weight,
    (j0, count): (usize, usize),
    (pc, kc): (usize, usize),
    nr: usize,
    dst: &mut [f32],
    tmp: &mut Vec<f32>,
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if w.layout == Layout::Rows8
        && j0.is_multiple_of(interleave::GROUP)
        && count.is_multiple_of(interleave::GROUP)
        && j0 + count <= w.n / interleave::GROUP * interleave::GROUP
        && matches!(w.dtype, DType::Q8_0 | DType::Q4_0)
        && nr.is_multiple_of(8)
        && pc.is_multiple_of(32)
        && kc.is_multiple_of(32)
        && super::isa::has_avx2_f16c()
    {
        if count < nr {
            dst.fill(0.0);
        }
        for g in 0..count / interleave::GROUP {
            let j = j0 + g * interleave::GROUP;
            let group = &w.bytes[j * w.row_bytes..(j + interleave::GROUP) * w.row_bytes];
            let bb = w.dtype.block_bytes();
            let src = &group[pc / 32 * 8 * bb..(pc + kc) / 32 * 8 * bb];
            // SAFETY: the CPU has AVX2 and F16C (checked); `src` holds `kc / 32` group-blocks
            // and `dst` `kc` columns of `nr >= 8 g + 8` values.
            unsafe { x86::group_into_panel(w.dtype, src, kc, nr, g * 8, dst) };
        }
        return Ok(());
    }
    // The blocks covering the columns, decoded row by row into `tmp` (`count` rows of `kw`).
    let be = w.dtype.block_elems();
    let (blk0, blk1) = (pc / be, (pc + kc).div_ceil(be));
    let (kw, off) = ((blk1 - blk0) * be, pc - blk0 * be);
    let bb = w.dtype.block_bytes();
    buffers::grow(tmp, count * kw, 0.0, "matmul weight panel")?;
    decode_rows(w, (j0, count), blk0 * bb..blk1 * bb, kw, tmp)?;
    transpose_into(&tmp[..count * kw], count, kw, off, kc, nr, dst);
    Ok(())
}

/// Rows `j0..j0 + count` of `w`, bytes `seg` of each (whole blocks), decoded into `tmp` (rows of
/// `kw` values). The decoders are inlined here: on x86 with AVX2 and F16C this is compiled for
/// them (the baseline build decoded with SSE2 scalar code, 12% of a Q4_K_M prefill), with the
/// same values (each is `d * q`, one f32 product, on any instruction set).
fn decode_rows(
    w: Weight,
    (j0, count): (usize, usize),
    seg: core::ops::Range<usize>,
    kw: usize,
    tmp: &mut [f32],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if super::isa::has_avx2_f16c() {
        #[target_feature(enable = "avx2,f16c")]
        fn avx2(
            w: Weight,
            rows: (usize, usize),
            seg: core::ops::Range<usize>,
            kw: usize,
            tmp: &mut [f32],
        ) -> Result<()> {
            decode_rows_with::<true, false>(w, rows, seg, kw, tmp)
        }
        #[target_feature(enable = "avx2,f16c,avx512f")]
        fn avx512(
            w: Weight,
            rows: (usize, usize),
            seg: core::ops::Range<usize>,
            kw: usize,
            tmp: &mut [f32],
        ) -> Result<()> {
            decode_rows_with::<true, true>(w, rows, seg, kw, tmp)
        }
        if super::isa::Isa::selected() == super::isa::Isa::Avx512 {
            // SAFETY: the CPU has AVX2, F16C (checked) and AVX-512F (the selected ISA).
            return unsafe { avx512(w, (j0, count), seg, kw, tmp) };
        }
        // SAFETY: the CPU has AVX2 and F16C (checked).
        return unsafe { avx2(w, (j0, count), seg, kw, tmp) };
    }
    decode_rows_with::<false, false>(w, (j0, count), seg, kw, tmp)
}

/// [`decode_rows`]' body, inlined into each instruction set's copy; with `AVX2` (the caller
/// runs AVX2 and F16C) the K-quant rows take their vector decoders ([`kquant_x86`]), sixteen
/// values at a time with `AVX512` (the caller runs AVX-512F too).
#[inline(always)]
fn decode_rows_with<const AVX2: bool, const AVX512: bool>(
    w: Weight,
    (j0, count): (usize, usize),
    seg: core::ops::Range<usize>,
    kw: usize,
    tmp: &mut [f32],
) -> Result<()> {
    let whole = w.n / interleave::GROUP * interleave::GROUP;
    let mut r = 0;
    while r < count {
        let j = j0 + r;
        if w.layout == Layout::Rows8 && j < whole {
            // Panels start at whole groups and end at one or at the weight's last row, so an
            // interleaved row comes with its whole group.
            let g = interleave::GROUP;
            if !j.is_multiple_of(g) || r + g > count {
                return Err(Error::bad_shape(
                    "matmul",
                    "w",
                    &[j0, count],
                    alloc::string::String::from("a panel cuts an interleaved group"),
                ));
            }
            let group = &w.bytes[j * w.row_bytes..(j + g) * w.row_bytes];
            let src = &group[seg.start * g..seg.end * g];
            interleave::decode_group(w.dtype, src, seg.len(), &mut tmp[r * kw..(r + g) * kw]);
            r += g;
        } else {
            let row = &w.bytes[j * w.row_bytes..(j + 1) * w.row_bytes];
            let out = &mut tmp[r * kw..(r + 1) * kw];
            r += 1;
            #[cfg(target_arch = "x86_64")]
            if AVX2 {
                type Decoder = unsafe fn(&[u8], &mut [f32]);
                let vector: Option<Decoder> = match (w.dtype, AVX512) {
                    (DType::Q4_K, true) => Some(kquant_x86::q4_k_blocks_512),
                    (DType::Q4_K, false) => Some(kquant_x86::q4_k_blocks),
                    (DType::Q6_K, true) => Some(kquant_x86::q6_k_blocks_512),
                    (DType::Q6_K, false) => Some(kquant_x86::q6_k_blocks),
                    // The other formats take the reference's decoder below.
                    _ => None,
                };
                if let Some(decode) = vector {
                    // SAFETY: the caller runs AVX2 and F16C, and AVX-512F with `AVX512` (the
                    // contract).
                    unsafe { decode(&row[seg.clone()], out) };
                    continue;
                }
            }
            quant::decode_blocks(w.dtype, &row[seg.clone()], out);
        }
    }
    Ok(())
}

/// `dst[p * nr + r] = rows[r * kw + off + p]` for `p < kc`, `r < count`; zero for `r >= count`.
fn transpose_into(
    rows: &[f32],
    count: usize,
    kw: usize,
    off: usize,
    kc: usize,
    nr: usize,
    dst: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if nr.is_multiple_of(8) && super::isa::has_avx2_f16c() {
        // SAFETY: the CPU has AVX2 (checked); `rows` holds `count` rows of `kw >= off + kc`
        // values, `dst` `kc` columns of `nr` (a multiple of 8).
        unsafe { x86::transpose_into(rows, count, kw, off, kc, nr, dst) };
        return;
    }
    for (p, col) in dst.chunks_exact_mut(nr).take(kc).enumerate() {
        for (r, v) in col.iter_mut().enumerate() {
            *v = if r < count {
                rows[r * kw + off + p]
            } else {
                0.0
            };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use crate::tensor::DType;

    /// One interleaved group's `kc / 32` group-blocks (`src`) into rows `r0..r0 + 8` of a
    /// `B~` panel of `nr` values per column: the values of [`super::interleave::decode_group`].
    ///
    /// # Safety
    /// The CPU has AVX2 and F16C; `src` holds `kc / 32` group-blocks of `dtype` (`Q8_0` or
    /// `Q4_0`), `dst` `kc * nr` values, `r0 + 8 <= nr`.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn group_into_panel(
        dtype: DType,
        src: &[u8],
        kc: usize,
        nr: usize,
        r0: usize,
        dst: &mut [f32],
    ) {
        let bb = dtype.block_bytes();
        if src.len() < kc / 32 * 8 * bb || dst.len() < kc * nr || r0 + 8 > nr {
            return;
        }
        // Within each 16-byte lane (four rows' four bytes, row-major), the four bytes of
        // column `t` side by side: byte `4 t + j` takes byte `4 j + t`.
        let by_column = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6,
            10, 14, 3, 7, 11, 15,
        );
        // Column `t` of rows 0-3 (low lane) next to column `t` of rows 4-7 (high lane).
        let pair = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        // SAFETY: the lengths were checked above: every load is within a group-block of
        // `src`, every store within column `32 b + p < kc` of `dst`, rows `r0..r0 + 8 <= nr`.
        unsafe {
            let o = dst.as_mut_ptr().add(r0);
            for (b, gb) in src.chunks_exact(8 * bb).take(kc / 32).enumerate() {
                let g = gb.as_ptr();
                // SAFETY (all loads): a group-block is `8 bb` bytes: 16 of scales, then quants.
                let d = _mm256_cvtph_ps(_mm_loadu_si128(g.cast()));
                // Columns `p` (block-relative) from one 32-byte chunk: `four[t]` the eight rows'
                // bytes of column `t`.
                let columns = |chunk: __m256i| -> [__m128i; 2] {
                    let v =
                        _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(chunk, by_column), pair);
                    [_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v)]
                };
                let put = |p: usize, q: __m256i| {
                    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(q), d);
                    _mm256_storeu_ps(o.add((32 * b + p) * nr), v);
                };
                if dtype == DType::Q8_0 {
                    let flip = _mm256_set1_epi8(-128);
                    for c in 0..8 {
                        let chunk = _mm256_loadu_si256(g.add(16 + 32 * c).cast());
                        let [lo, hi] = columns(_mm256_xor_si256(chunk, flip));
                        put(4 * c, _mm256_cvtepi8_epi32(lo));
                        put(4 * c + 1, _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(lo)));
                        put(4 * c + 2, _mm256_cvtepi8_epi32(hi));
                        put(4 * c + 3, _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(hi)));
                    }
                } else {
                    let (mask, eight) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi32(8));
                    for c in 0..4 {
                        let chunk = _mm256_loadu_si256(g.add(16 + 32 * c).cast());
                        let nib = [
                            _mm256_and_si256(chunk, mask),
                            _mm256_and_si256(_mm256_srli_epi16::<4>(chunk), mask),
                        ];
                        for (h, v) in nib.into_iter().enumerate() {
                            let [lo, hi] = columns(v);
                            let q = |x: __m128i| _mm256_sub_epi32(_mm256_cvtepu8_epi32(x), eight);
                            let p = 16 * h + 4 * c;
                            put(p, q(lo));
                            put(p + 1, q(_mm_srli_si128::<8>(lo)));
                            put(p + 2, q(hi));
                            put(p + 3, q(_mm_srli_si128::<8>(hi)));
                        }
                    }
                }
            }
        }
    }

    /// [`super::transpose_into`] with AVX2: eight rows by eight columns at a time.
    ///
    /// # Safety
    /// The CPU has AVX2; `rows` holds `count` rows of `kw >= off + kc` values, `dst`
    /// `kc * nr` values, `nr` a multiple of 8 and `count <= nr`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_into(
        rows: &[f32],
        count: usize,
        kw: usize,
        off: usize,
        kc: usize,
        nr: usize,
        dst: &mut [f32],
    ) {
        if rows.len() < count * kw || off + kc > kw || dst.len() < kc * nr || count > nr {
            return;
        }
        // SAFETY: the lengths were checked above: row `r0 + i < count` holds `off + kc`
        // values, and column `p < kc` of `dst` `nr` from `p * nr`.
        unsafe {
            let (src, o) = (rows.as_ptr(), dst.as_mut_ptr());
            for r0 in (0..nr).step_by(8) {
                let here = count.saturating_sub(r0).min(8);
                let mut p = 0;
                while p + 8 <= kc {
                    let v: [__m256i; 8] = core::array::from_fn(|i| {
                        if i < here {
                            _mm256_castps_si256(_mm256_loadu_ps(src.add((r0 + i) * kw + off + p)))
                        } else {
                            _mm256_setzero_si256()
                        }
                    });
                    let cols = super::super::matref::transpose8(v);
                    for (t, c) in cols.iter().enumerate() {
                        _mm256_storeu_si256(o.add((p + t) * nr + r0).cast(), *c);
                    }
                    p += 8;
                }
                for p in p..kc {
                    for i in 0..8 {
                        *o.add(p * nr + r0 + i) = if i < here {
                            *src.add((r0 + i) * kw + off + p)
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod kquant_x86;
#[cfg(test)]
mod tests;
