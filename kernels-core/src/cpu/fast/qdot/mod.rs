//! Products with a block-quantized weight (`Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `Q4_K`, `Q6_K`) and
//! 8-bit activations, as llama.cpp's CPU backend computes them:
//!
//! 1. Each row of `x` is quantized once per product ([`Acts`]): to blocks of 32 values with an
//!    f32 scale for the 32-element formats (llama.cpp's `Q8_0`/`Q8_1`), to super-blocks of 256
//!    with an f32 scale for the K-quants (`Q8_K`); both keep the integer sum of every 16 values
//!    (the `Q8_1` sum and the `Q8_K` `bsums`), which the formats with a min (`Q4_1`, `Q4_K`)
//!    need.
//! 2. Integer dot products run straight on the packed weight blocks (nothing is decoded to
//!    f32): 8-bit by 8-bit products summed in `i32`, then scaled by the weight's and the
//!    activation's block scales in f32.
//!
//! Kernel families ([`Family`]): plain Rust ([`portable`], every target, the reference of the
//! integer path), and on x86_64 AVX2 (`maddubs` + `madd`), AVX-512 VNNI (`vpdpbusd` on
//! 256-bit vectors, with AVX-512VL) and AVX-VNNI (the VEX `vpdpbusd`), chosen at run time;
//! on wasm32 built with `simd128` (the browser build), `simd128` (`i32x4.dot_i16x8_s`).
//! `KERNELS_CPU_KERNEL` forces one (see [`Family::best`]).
//!
//! Decode (one row of `x`) and prefill (many) share one driver ([`product_t`]): the weight
//! rows are split over threads (`split_rows`), and each weight row is unpacked once per tile
//! of up to [`TILE`] rows of `x`. On x86, decode (one row of `x`, or its two residual terms)
//! on the 32-element formats takes four weight rows at a time: each activation block is loaded
//! once for the four, their block sums are reduced together and scaled as one vector, and each
//! row's stream is prefetched ahead. A weight the CPU backend repacked at load into the
//! eight-row interleaved layout ([`interleave`], `q4_0` / `q5_0` / `q8_0` on x86) takes eight
//! rows at a time instead ([`product_t_in`]), with the same bits. Prefill (more than two rows
//! of quantized `x`) on those formats takes the same group kernel over many rows of `x` on x86
//! (the eight-row GEMM; a plain weight is interleaved a span at a time for it), which writes
//! the op's `[rows, n]` output and its bias itself ([`into_rows`]); every other case on an
//! interleaved weight unpacks its groups to the plain layout first.
//!
//! A row of `x` holding a NaN or an infinity is not quantized: it takes the decoded weight rows
//! and an f32 dot product, so NaN and infinity land where the reference puts them.
//!
//! The numbers differ from the dequantize-then-f32 reference by the activations' rounding.
//! [`Precision::Residual`] (the default) quantizes each row twice, `x` and then what its 8-bit
//! rounding missed, so two integer products per weight block give about 16 bits of activation
//! precision ([`RESIDUAL_ACTIVATION_BUDGETS`]); `KERNELS_ACTIVATION_PRECISION=single` takes
//! llama.cpp's one 8-bit pass ([`QUANTIZED_ACTIVATION_BUDGETS`]), twice as fast and about 250
//! times the error. `KERNELS_EXACT_ACTIVATIONS=1` (or
//! [`crate::backend::CpuBackend::with_exact_activations`]) keeps f32 activations instead.

use alloc::vec::Vec;

use super::buffers::{grow, out_of_memory_of, scratch};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::numerics::Budget;
use crate::quant;
pub use interleave::Layout;

pub mod gemm;
pub mod interleave;
#[cfg(target_arch = "x86_64")]
pub mod into_rows;
pub mod portable;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod interleave_tests;
#[cfg(test)]
#[cfg(target_arch = "x86_64")]
mod into_rows_tests;
#[cfg(test)]
pub(crate) mod tests;

/// Rows of `x` one unpacked weight row is dotted with at a time (prefill's register tile).
pub const TILE: usize = 4;

/// The budgets of the products with 8-bit activations against the dequantize-then-f32
/// reference, per weight format, for inputs of unit scale (activations in `[-1, 1]`, weights
/// quantized from `[-1, 1]`; scale the budget with the operands' largest values otherwise).
/// They are absolute and grow with `sqrt(k)`: the activation rounding is at most half a step,
/// `max|x| / 254`, per element, so the error is a random walk over the `k` terms, however
/// small the result (a relative budget would fail on results near 0).
///
/// Derived as `HALF_PRODUCT_BUDGETS` was: the worst `|got - ref| / sqrt(k)` over 200 seeds per
/// format (`k` of 1 block, 3 blocks and 4864; 1 to 5 rows of `x`; 16 weight rows), on every
/// kernel family this machine runs (`derive_budgets`:
/// `cargo test -p kernels-core --lib qdot::tests::derive_budgets -- --ignored --nocapture`),
/// then doubled and rounded up. Worst cases measured (2026-11-26, AMD EPYC Zen 4, portable,
/// AVX2 and AVX-512 VNNI): q8_0 4.96e-3, q4_0 4.81e-3, q4_1 4.98e-3, q5_0 5.00e-3,
/// q4_k 5.16e-3, q6_k 2.83e-3 (its weights are 6-bit: smaller on average).
pub const QUANTIZED_ACTIVATION_BUDGETS: [(DType, Budget); 6] = [
    (DType::Q8_0, Budget::per_k(1e-2, 0.0)),
    (DType::Q4_0, Budget::per_k(1e-2, 0.0)),
    (DType::Q4_1, Budget::per_k(1e-2, 0.0)),
    (DType::Q5_0, Budget::per_k(1.1e-2, 0.0)),
    (DType::Q4_K, Budget::per_k(1.1e-2, 0.0)),
    (DType::Q6_K, Budget::per_k(6e-3, 0.0)),
];

/// [`QUANTIZED_ACTIVATION_BUDGETS`] for [`Precision::Residual`] (the default): the same
/// derivation; worst cases measured (same machine and
/// date) q8_0 2.04e-5, q4_0 2.00e-5, q4_1 2.07e-5, q5_0 1.95e-5, q4_k 1.78e-5, q6_k 1.24e-5
/// (the f32 sums' rounding is now a visible part of it).
pub const RESIDUAL_ACTIVATION_BUDGETS: [(DType, Budget); 6] = [
    (DType::Q8_0, Budget::per_k(4.1e-5, 0.0)),
    (DType::Q4_0, Budget::per_k(4e-5, 0.0)),
    (DType::Q4_1, Budget::per_k(4.2e-5, 0.0)),
    (DType::Q5_0, Budget::per_k(4e-5, 0.0)),
    (DType::Q4_K, Budget::per_k(3.6e-5, 0.0)),
    (DType::Q6_K, Budget::per_k(2.5e-5, 0.0)),
];

/// The budget of a product with quantized activations at `precision` on a weight of `dtype`
/// (see [`QUANTIZED_ACTIVATION_BUDGETS`]); `None` for a dtype that keeps f32 activations.
pub fn quantized_activation_budget(dtype: DType, precision: Precision) -> Option<Budget> {
    match precision {
        Precision::Single => &QUANTIZED_ACTIVATION_BUDGETS,
        Precision::Residual => &RESIDUAL_ACTIVATION_BUDGETS,
    }
    .iter()
    .find(|(d, _)| *d == dtype)
    .map(|(_, b)| *b)
}

/// Whether products with a weight of `dtype` take 8-bit activations (by default).
pub fn takes(dtype: DType) -> bool {
    quantized_activation_budget(dtype, Precision::Single).is_some()
}

/// How the activations are quantized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Each row of `x` to 8 bits once (llama.cpp's trade).
    Single,
    /// Each row to 8 bits, then its rounding error to 8 bits again: two integer products per
    /// weight block (the unpacked weight shared), about 16 bits of activation precision.
    Residual,
}

/// A kernel family of the integer products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Plain Rust: every target; the reference of the integer path.
    Portable,
    /// x86_64 AVX2: `vpmaddubsw` + `vpmaddwd`.
    Avx2,
    /// x86_64 AVX-VNNI: the VEX-encoded 256-bit `vpdpbusd`.
    AvxVnni,
    /// x86_64 AVX-512 VNNI with AVX-512VL: the EVEX `vpdpbusd`.
    Avx512Vnni,
    /// wasm32 `simd128` (compile-time): `i16x8` widening and `i32x4.dot_i16x8_s`.
    Simd128,
}

impl Family {
    /// Every family, portable first, fastest last.
    pub const ALL: [Family; 5] = [
        Family::Portable,
        Family::Avx2,
        Family::AvxVnni,
        Family::Avx512Vnni,
        Family::Simd128,
    ];

    /// Short name for logs, benchmarks and `KERNELS_CPU_KERNEL`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Portable => "portable",
            Family::Avx2 => "avx2",
            Family::AvxVnni => "avxvnni",
            Family::Avx512Vnni => "avx512vnni",
            Family::Simd128 => "simd128",
        }
    }

    /// The family a `KERNELS_CPU_KERNEL` value names (`avx512` names AVX-512 VNNI here).
    pub fn parse(s: &str) -> Option<Family> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("avx512") {
            return Some(Family::Avx512Vnni);
        }
        Family::ALL
            .into_iter()
            .find(|f| s.eq_ignore_ascii_case(f.name()))
    }

    /// Why this machine cannot run the family, or `None` when it can.
    pub fn missing(self) -> Option<&'static str> {
        match self {
            Family::Portable => None,
            #[cfg(target_arch = "x86_64")]
            Family::Avx2 => (!x86::has_avx2()).then_some("the CPU has no AVX2"),
            #[cfg(target_arch = "x86_64")]
            Family::AvxVnni => (!x86::has_avxvnni()).then_some("the CPU has no AVX-VNNI"),
            #[cfg(target_arch = "x86_64")]
            Family::Avx512Vnni => {
                (!x86::has_avx512vnni()).then_some("the CPU has no AVX-512 VNNI with AVX-512VL")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni => Some("not an x86_64 build"),
            Family::Simd128 => (!cfg!(all(target_arch = "wasm32", target_feature = "simd128")))
                .then_some("not a wasm32 build with simd128"),
        }
    }

    /// Every family this machine can run, portable first.
    pub fn available() -> Vec<Family> {
        Family::ALL
            .into_iter()
            .filter(|f| f.missing().is_none())
            .collect()
    }

    /// The fastest family this machine runs.
    pub fn fastest() -> Family {
        [
            Family::Avx512Vnni,
            Family::AvxVnni,
            Family::Avx2,
            Family::Simd128,
        ]
        .into_iter()
        .find(|f| f.missing().is_none())
        .unwrap_or(Family::Portable)
    }

    /// The family the products use: the one `KERNELS_CPU_KERNEL` names if this machine runs
    /// it, else [`Family::fastest`] (read once with `std`).
    pub fn best() -> Family {
        #[cfg(feature = "std")]
        {
            static BEST: std::sync::OnceLock<Family> = std::sync::OnceLock::new();
            *BEST.get_or_init(|| {
                std::env::var("KERNELS_CPU_KERNEL")
                    .ok()
                    .and_then(|v| Family::parse(&v))
                    .filter(|f| f.missing().is_none())
                    .unwrap_or_else(Family::fastest)
            })
        }
        #[cfg(not(feature = "std"))]
        Family::fastest()
    }
}

/// The rows of `x` quantized to 8 bits for a product with a weight of one format.
#[derive(Debug, Clone)]
pub struct Acts {
    k: usize,
    /// Values per scale: 32, or 256 for the K-quants.
    block: usize,
    qs: Vec<i8>,
    d: Vec<f32>,
    /// The integer sum of every 16 quantized values.
    sums: Vec<i32>,
    /// Rows that hold a NaN or an infinity (not quantized: they take the f32 path).
    pub(crate) special: Vec<bool>,
}

/// One quantized row of `x`.
#[derive(Debug, Clone, Copy)]
pub struct XRow<'a> {
    pub qs: &'a [i8],
    /// One scale per block of 32 (or 256 for the K-quants).
    pub d: &'a [f32],
    /// The integer sum of every 16 values.
    pub sums: &'a [i32],
}

/// GGML's `nearest_int`: round half to even through the float's mantissa (`|v| < 2^22`).
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    let v = v + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Values per activation scale for a weight of `dtype`.
pub fn act_block(dtype: DType) -> usize {
    if dtype.block_elems() == quant::QK_K {
        quant::QK_K
    } else {
        quant::QK
    }
}

impl Acts {
    /// Quantizes the `x.len() / k` rows of `x` for a weight of `dtype` (`k` a whole number of
    /// its blocks). With `residual`, each row becomes two quantized rows: `x` to 8 bits, then
    /// what that missed (`x - d q`) to 8 bits again, so their products sum to about 16 bits'
    /// precision ([`Precision::Residual`]).
    pub fn new(dtype: DType, x: &[f32], k: usize, residual: bool) -> Result<Acts> {
        let block = act_block(dtype);
        if k == 0 || !k.is_multiple_of(block) || !x.len().is_multiple_of(k) {
            return Err(Error::bad_shape(
                "matmul",
                "x",
                &[x.len()],
                alloc::format!("rows of {k} are not whole blocks of {block}"),
            ));
        }
        let rows = x.len() / k;
        let terms = if residual { 2 } else { 1 };
        let nq = x.len() * terms;
        let mut a = Acts {
            k,
            block,
            qs: scratch(nq, 0, "quantized activations")?,
            d: scratch(nq / block, 0.0, "activation scales")?,
            sums: scratch(nq / 16, 0, "activation block sums")?,
            special: scratch(rows, false, "activation rows")?,
        };
        // Rows on the pool (prefill quantizes hundreds), a range at least ~32K values.
        let grain = (1usize << 15).div_ceil(k * terms).max(1);
        super::pool::for_slices(&mut a.special, 1, grain, &|range, part| {
            for (s, r) in part.iter_mut().zip(range) {
                // An OR over the row (no early exit), which vectorizes.
                *s = x[r * k..(r + 1) * k]
                    .iter()
                    .fold(false, |any, v| any | !v.is_finite());
            }
            Ok(())
        })?;
        let special = &a.special;
        let units = (k * terms, k * terms / block, k * terms / 16);
        super::pool::for_rows3(
            rows,
            grain,
            (&mut a.qs, &mut a.d, &mut a.sums),
            units,
            &|range, qs, d, sums| {
                let mut res =
                    scratch(if residual { k } else { 0 }, 0.0f32, "activation residuals")?;
                for (i, r) in range.enumerate() {
                    if special[r] {
                        continue;
                    }
                    let xr = &x[r * k..(r + 1) * k];
                    let at = |u: usize, t: usize| {
                        (i * terms + t) * u / terms..(i * terms + t + 1) * u / terms
                    };
                    let (q0, d0, s0) = (at(units.0, 0), at(units.1, 0), at(units.2, 0));
                    let first = (&mut qs[q0], &mut d[d0], &mut sums[s0]);
                    quantize_term(xr, block, first, residual.then_some(&mut res[..]));
                    if residual {
                        // What the first term missed, quantized again as the second.
                        let (q1, d1, s1) = (at(units.0, 1), at(units.1, 1), at(units.2, 1));
                        let second = (&mut qs[q1], &mut d[d1], &mut sums[s1]);
                        quantize_term(&res, block, second, None);
                    }
                }
                Ok(())
            },
        )?;
        Ok(a)
    }

    /// Row `r` (quantized; meaningless for a special row).
    pub fn row(&self, r: usize) -> XRow<'_> {
        let k = self.k;
        XRow {
            qs: &self.qs[r * k..(r + 1) * k],
            d: &self.d[r * k / self.block..(r + 1) * k / self.block],
            sums: &self.sums[r * k / 16..(r + 1) * k / 16],
        }
    }
}

/// One term of a quantized row: each block of `x` (`block` values) into `qs` with its scale in
/// `d` ([`quantize_block`]), the sum of every 16 values into `sums`, and (given `res`) what the
/// 8 bits missed, `x - d q`, into `res` (the residual's second term). AVX2 where the CPU has
/// it, with the same bits.
fn quantize_term(
    x: &[f32],
    block: usize,
    (qs, d, sums): (&mut [i8], &mut [f32], &mut [i32]),
    mut res: Option<&mut [f32]>,
) {
    #[cfg(target_arch = "x86_64")]
    if x86::quantize_blocks(
        x,
        block,
        (&mut *qs, &mut *d, &mut *sums),
        res.as_deref_mut(),
    ) {
        return;
    }
    for (b, ((xb, qb), db)) in x
        .chunks_exact(block)
        .zip(qs.chunks_exact_mut(block))
        .zip(d.iter_mut())
        .enumerate()
    {
        *db = quantize_block(xb, qb);
        let sb = &mut sums[b * block / 16..(b + 1) * block / 16];
        let rb = res
            .as_deref_mut()
            .map(|r| &mut r[b * block..(b + 1) * block]);
        block_sums_and_residual(xb, qb, *db, sb, rb);
    }
}

/// A quantized block's sums of 16 values, and (given `res`) `x - d q`.
fn block_sums_and_residual(x: &[f32], q: &[i8], d: f32, sums: &mut [i32], res: Option<&mut [f32]>) {
    for (s, qv) in sums.iter_mut().zip(q.chunks_exact(16)) {
        *s = qv.iter().map(|&v| v as i32).sum();
    }
    if let Some(res) = res {
        for ((r, &xv), &qv) in res.iter_mut().zip(x).zip(q) {
            *r = xv - d * qv as f32;
        }
    }
}

/// One block to `[-127, 127]` with scale `max|x| / 127` (symmetric, so the AVX2 sign trick
/// never meets -128); returns the scale.
fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let id = 127.0 / amax;
    if id.is_finite() {
        for (q, &v) in q.iter_mut().zip(x) {
            *q = nearest_int(v * id).clamp(-127, 127) as i8;
        }
    } else {
        // A subnormal largest value: scale by division, which stays finite.
        for (q, &v) in q.iter_mut().zip(x) {
            *q = nearest_int(v / amax * 127.0).clamp(-127, 127) as i8;
        }
    }
    amax / 127.0
}

/// Whether a transposed product's operands have its sizes: `n` packed rows of `row_bytes`, `rows`
/// rows of `k` in `x`, and `n x rows` outputs (what [`product_t`] and prefill's panel product
/// check).
pub(crate) fn sizes_agree(
    packed: &[u8],
    row_bytes: usize,
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    out_t: &[f32],
) -> bool {
    packed.len() >= n.saturating_mul(row_bytes)
        && x.len() == rows.saturating_mul(k)
        && out_t.len() == n.saturating_mul(rows)
}

/// `out_t[j * rows + r] = dot(w row j, x row r)` for the `n` rows of a packed `w` of `dtype`
/// (`row_bytes` each) and the `rows` rows of `x` (`k` each), with 8-bit activations on
/// `family`'s kernels: the transposed product, so that each thread owns whole weight rows.
#[allow(clippy::too_many_arguments)]
pub fn product_t(
    family: Family,
    precision: Precision,
    dtype: DType,
    packed: &[u8],
    row_bytes: usize,
    x: &[f32],
    dims: (usize, usize, usize),
    out_t: &mut [f32],
) -> Result<()> {
    product_t_in(
        family,
        precision,
        dtype,
        (packed, Layout::Plain),
        row_bytes,
        x,
        dims,
        out_t,
    )
}

/// [`product_t`] on a weight in either layout ([`interleave`]): the interleaved groups take the
/// eight-row kernels on x86, for decode (one row of `x`, or its two residual terms) and for
/// prefill (the eight-row GEMM, which also takes a plain weight of those formats, interleaved a
/// span at a time); every other case unpacks a group at a time into the plain layout and takes
/// the plain kernels, so the numbers do not depend on the layout.
#[allow(clippy::too_many_arguments)]
pub fn product_t_in(
    family: Family,
    precision: Precision,
    dtype: DType,
    (packed, layout): (&[u8], Layout),
    row_bytes: usize,
    x: &[f32],
    (rows, k, n): (usize, usize, usize),
    out_t: &mut [f32],
) -> Result<()> {
    let bad =
        |why: &str| Error::bad_shape("matmul", "w", &[n, k], alloc::string::String::from(why));
    if !takes(dtype) || dtype.bytes_for(k) != Some(row_bytes) {
        return Err(bad("not a quantized weight of whole blocks"));
    }
    if !sizes_agree(packed, row_bytes, x, (rows, k, n), out_t) {
        return Err(bad("operand sizes disagree"));
    }
    if layout == Layout::Rows8 && !interleave::supports(dtype) {
        return Err(bad("no interleaved layout for this dtype"));
    }
    let residual = precision == Precision::Residual;
    let terms = if residual { 2 } else { 1 };
    let acts = Acts::new(dtype, x, k, residual)?;
    let mut xrows: Vec<XRow> = Vec::new();
    xrows
        .try_reserve_exact(rows * terms)
        .map_err(|_| out_of_memory_of::<XRow>("activation rows".into(), rows * terms))?;
    xrows.extend((0..rows * terms).map(|r| acts.row(r)));
    let work = n.saturating_mul(k).saturating_mul(rows * terms);
    // Prefill on a plain weight of a format with the interleaved layout takes the eight-row
    // GEMM too, its groups interleaved a span at a time into a scratch buffer (a weight row
    // serves many rows of x, so the shuffle is cheap beside the products).
    let fly = layout == Layout::Plain
        && interleave::supports(dtype)
        && xrows.len() > 2
        && has_groups_kernel(family);
    // The whole groups (the ranges split at multiples of a group).
    let grouped = if layout == Layout::Rows8 || fly {
        n / interleave::GROUP * interleave::GROUP
    } else {
        0
    };
    // Ranges start at multiples of the kernels' row tiles (a group of 8, else the x86 decode
    // kernels' four rows): a row's tile, and so its bits, does not depend on the thread count
    // (the one-row kernel, which takes only the rows past the last whole tile, sums in another
    // order).
    let align = if grouped > 0 { interleave::GROUP } else { 4 };
    // The plain kernels on plain rows `w`, each residual pair summed.
    let plain = |w: &[u8], out: &mut [f32]| -> Result<()> {
        if residual {
            let mut both = scratch(out.len() * 2, 0.0f32, "residual products")?;
            rows_of(family, dtype, w, row_bytes, &xrows, &mut both)?;
            for (o, p) in out.iter_mut().zip(both.chunks_exact(2)) {
                *o = p[0] + p[1];
            }
            Ok(())
        } else {
            rows_of(family, dtype, w, row_bytes, &xrows, out)
        }
    };
    split_rows(n, rows, work, align, out_t, &|j0, out| {
        let jn = out.len() / rows.max(1);
        let gi = grouped.saturating_sub(j0).min(jn);
        let (og, orest) = out.split_at_mut(gi * rows);
        plain(&packed[(j0 + gi) * row_bytes..(j0 + jn) * row_bytes], orest)?;
        let wg = &packed[j0 * row_bytes..(j0 + gi) * row_bytes];
        let gbytes = interleave::GROUP * row_bytes;
        let special = acts.special.iter().any(|&s| s);
        let mut unpacked = Vec::new();
        // Rows a fallback unpacks (or prefill interleaves) at a time (whole groups, about 512
        // KiB): prefill's kernels want many weight rows per call.
        let span = ((1 << 19) / row_bytes.max(1))
            .max(1)
            .next_multiple_of(interleave::GROUP);
        let mut at = 0;
        if fly {
            while at < gi {
                let m = span.min(gi - at);
                grow(&mut unpacked, m * row_bytes, 0, "unpacked weight rows")?;
                let span_bytes = &mut unpacked[..m * row_bytes];
                let src = &wg[at * row_bytes..(at + m) * row_bytes];
                for (g, u) in src
                    .chunks_exact(gbytes)
                    .zip(span_bytes.chunks_exact_mut(gbytes))
                {
                    interleave::repack_group(dtype, g, row_bytes, u);
                }
                let o = &mut og[at * rows..(at + m) * rows];
                groups_kernel(family, dtype, span_bytes, row_bytes, &xrows, residual, o)?;
                at += m;
            }
        } else if groups_kernel(family, dtype, wg, row_bytes, &xrows, residual, og)? {
            at = gi;
        }
        // No group kernel here (another family): a span of groups unpacked at a time.
        while at < gi {
            let m = span.min(gi - at);
            grow(&mut unpacked, m * row_bytes, 0, "unpacked weight rows")?;
            let span_bytes = &mut unpacked[..m * row_bytes];
            let src = &wg[at * row_bytes..(at + m) * row_bytes];
            for (g, u) in src
                .chunks_exact(gbytes)
                .zip(span_bytes.chunks_exact_mut(gbytes))
            {
                interleave::unpack_group(dtype, g, row_bytes, u);
            }
            plain(span_bytes, &mut og[at * rows..(at + m) * rows])?;
            at += m;
        }
        // Rows with NaN or infinity: decoded weight rows and an f32 dot, as the reference.
        if special {
            let mut wrow = scratch(k, 0.0f32, "decoded weight row")?;
            grow(&mut unpacked, gbytes, 0, "unpacked weight rows")?;
            for jj in 0..jn {
                let wr = if jj < gi && layout == Layout::Rows8 {
                    if jj % interleave::GROUP == 0 {
                        let g = &wg[jj * row_bytes..(jj + interleave::GROUP) * row_bytes];
                        interleave::unpack_group(dtype, g, row_bytes, &mut unpacked[..gbytes]);
                    }
                    let at = jj % interleave::GROUP * row_bytes;
                    &unpacked[at..at + row_bytes]
                } else {
                    &packed[(j0 + jj) * row_bytes..(j0 + jj + 1) * row_bytes]
                };
                quant::decode_blocks(dtype, wr, &mut wrow);
                for r in (0..rows).filter(|&r| acts.special[r]) {
                    let xr = &x[r * k..(r + 1) * k];
                    out[jj * rows + r] = xr.iter().zip(&wrow).fold(0.0, |s, (a, b)| s + a * b);
                }
            }
        }
        Ok(())
    })
}

/// Whether `family` has the eight-row kernel on interleaved groups (the x86 families).
fn has_groups_kernel(family: Family) -> bool {
    cfg!(target_arch = "x86_64")
        && matches!(family, Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni)
        && family.missing().is_none()
}

/// The whole interleaved groups in `w` against the rows `xs` (decode's one or two, prefill's
/// many) on the eight-row kernel of `family`, where it has one (x86): `out` as
/// [`product_t`]'s, residual pairs summed. `false` (nothing written) where it has none.
#[allow(unused_variables)]
fn groups_kernel(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    residual: bool,
    out: &mut [f32],
) -> Result<bool> {
    #[cfg(target_arch = "x86_64")]
    if has_groups_kernel(family) {
        if !residual {
            x86::groups(family, dtype, w, row_bytes, xs, out);
            return Ok(true);
        }
        // Residual pairs: a few groups at a time into a buffer of both terms, then summed.
        let gbytes = interleave::GROUP * row_bytes;
        let per = interleave::GROUP * xs.len();
        let chunk = 16;
        let len = chunk.min(w.len() / gbytes.max(1)) * per;
        let mut both = scratch(len, 0.0f32, "residual products")?;
        for (wc, oc) in w
            .chunks(chunk * gbytes)
            .zip(out.chunks_mut(chunk * per / 2))
        {
            let b = &mut both[..oc.len() * 2];
            x86::groups(family, dtype, wc, row_bytes, xs, b);
            for (o, p) in oc.iter_mut().zip(b.chunks_exact(2)) {
                *o = p[0] + p[1];
            }
        }
        return Ok(true);
    }
    Ok(false)
}

/// The products of the weight rows in `w` with every row in `xs` on `family`:
/// `out[j * xs.len() + r]`.
fn rows_of(
    family: Family,
    dtype: DType,
    w: &[u8],
    row_bytes: usize,
    xs: &[XRow],
    out: &mut [f32],
) -> Result<()> {
    match family {
        #[cfg(target_arch = "x86_64")]
        Family::Avx2 | Family::AvxVnni | Family::Avx512Vnni if family.missing().is_none() => {
            if gemm::tiled(family, dtype, xs.len()) {
                return gemm::rows(family, dtype, w, row_bytes, xs, out);
            }
            x86::rows(family, dtype, w, row_bytes, xs, out);
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Family::Simd128 => return wasm::rows(dtype, w, row_bytes, xs, out),
        _ => portable::rows(dtype, w, row_bytes, xs, out),
    }
    Ok(())
}

/// Multiply-adds per grain of weight rows handed to a thread: a product smaller than two
/// grains runs on the caller alone.
const GRAIN_WORK: usize = 1 << 16;

/// Splits the `n` weight rows of a product (`out_t`, `rows` outputs per weight row) into
/// ranges of whole grains on the persistent pool ([`super::pool`]) and runs
/// `f(first_row, its outputs)` on each. The one place the product's threads are chosen.
fn split_rows(
    n: usize,
    rows: usize,
    work: usize,
    align: usize,
    out_t: &mut [f32],
    f: &(dyn Fn(usize, &mut [f32]) -> Result<()> + Sync),
) -> Result<()> {
    let per_row = (work / n.max(1)).max(1);
    let grain = GRAIN_WORK.div_ceil(per_row).next_multiple_of(align.max(1));
    super::pool::for_slices(out_t, rows.max(1), grain, &|r, out| f(r.start, out))
}
