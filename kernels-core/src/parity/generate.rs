//! The random inputs of the parity cases: distributions drawn from each op's valid domain.

use alloc::vec;
use alloc::vec::Vec;

use crate::error::Result;
use crate::rng::Rng;
use crate::tensor::{DType, Tensor, numel};

#[derive(Clone, Copy)]
pub(super) enum Dist {
    /// Standard normal.
    Normal,
    /// Uniform in [lo, hi).
    Uniform(f32, f32),
    /// Normal, pushed away from zero by at least 0.05 (kinks, divisors).
    AwayFromZero,
    /// Uniform in [0.1, 4): log, sqrt.
    Positive,
}

pub(super) struct Gen {
    pub(super) rng: Rng,
}

impl Gen {
    pub(super) fn f(&mut self, shape: &[usize], d: Dist) -> Result<Tensor> {
        let n = numel(shape).unwrap_or(0);
        let v: Vec<f32> = (0..n)
            .map(|_| match d {
                Dist::Normal => self.rng.normal(),
                Dist::Uniform(lo, hi) => self.rng.uniform_range(lo, hi),
                Dist::AwayFromZero => {
                    let x = self.rng.normal();
                    if x.abs() < 0.05 {
                        if x < 0.0 { x - 0.05 } else { x + 0.05 }
                    } else {
                        x
                    }
                }
                Dist::Positive => self.rng.uniform_range(0.1, 4.0),
            })
            .collect();
        Tensor::from_f32(shape, v)
    }
    /// A normal `[.., n]` tensor stored as the weight dtype `dtype` (quantized by
    /// [`crate::quant`]; `q6_k`, which it does not write, as random blocks with finite scales
    /// from 0.001 to 0.01, whose values run to tens).
    pub(super) fn weight(&mut self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.weight_with(shape, dtype, 1.0, (0.001, 0.01))
    }
    /// A weight of values about `size`: a normal times `size`, quantized; `q6_k` as random blocks
    /// whose scales (`size` times 1e-4 to 1e-3) give its random quants about that size.
    pub(super) fn weight_of_size(
        &mut self,
        shape: &[usize],
        dtype: DType,
        size: f32,
    ) -> Result<Tensor> {
        self.weight_with(shape, dtype, size, (1e-4 * size, 1e-3 * size))
    }
    fn weight_with(
        &mut self,
        shape: &[usize],
        dtype: DType,
        size: f32,
        (d_lo, d_hi): (f32, f32),
    ) -> Result<Tensor> {
        if dtype == DType::Q6_K {
            let n = numel(shape).unwrap_or(0);
            let blocks = n / dtype.block_elems();
            let mut bytes = Vec::with_capacity(blocks * dtype.block_bytes());
            for _ in 0..blocks {
                let start = bytes.len();
                bytes.extend((0..dtype.block_bytes()).map(|_| self.rng.below(256) as u8));
                let d = half::f16::from_f32(self.rng.uniform_range(d_lo, d_hi)).to_bits();
                bytes[start + 208..start + 210].copy_from_slice(&d.to_le_bytes());
            }
            return Tensor::from_raw(shape, dtype, bytes);
        }
        let x = self.f(shape, Dist::Normal)?;
        if size == 1.0 {
            return x.quantize(dtype);
        }
        let v = x.as_f32()?.iter().map(|v| v * size).collect();
        Tensor::from_f32(shape, v)?.quantize(dtype)
    }
    pub(super) fn ids_i64(&mut self, shape: &[usize], bound: usize) -> Result<Tensor> {
        let n = numel(shape).unwrap_or(0);
        Tensor::from_i64(
            shape,
            (0..n)
                .map(|_| self.rng.below(bound as u64) as i64)
                .collect(),
        )
    }
    pub(super) fn ids_i32(&mut self, shape: &[usize], bound: usize) -> Result<Tensor> {
        let n = numel(shape).unwrap_or(0);
        Tensor::from_i32(
            shape,
            (0..n)
                .map(|_| self.rng.below(bound as u64) as i32)
                .collect(),
        )
    }
    /// A rank-`r` matrix `[m, n]`, as a product of normal factors.
    pub(super) fn low_rank(&mut self, m: usize, n: usize, r: usize) -> Result<Tensor> {
        let a: Vec<f32> = (0..m * r).map(|_| self.rng.normal()).collect();
        let b: Vec<f32> = (0..r * n).map(|_| self.rng.normal()).collect();
        let mut out = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..r).map(|k| a[i * r + k] * b[k * n + j]).sum();
            }
        }
        Tensor::from_f32(&[m, n], out)
    }
    /// `[m, n]` with singular values decaying like 0.7^i.
    pub(super) fn decaying(&mut self, m: usize, n: usize) -> Result<Tensor> {
        let r = m.min(n);
        let mut out = vec![0.0f32; m * n];
        for k in 0..r {
            let s = libm::powf(0.7, k as f32);
            let u: Vec<f32> = (0..m)
                .map(|_| self.rng.normal() / libm::sqrtf(m as f32))
                .collect();
            let v: Vec<f32> = (0..n)
                .map(|_| self.rng.normal() / libm::sqrtf(n as f32))
                .collect();
            for i in 0..m {
                for j in 0..n {
                    out[i * n + j] += s * u[i] * v[j];
                }
            }
        }
        Tensor::from_f32(&[m, n], out)
    }
}
