//! attention: the reference's geometry checks, the scale, and the backward's shape checks,
//! around the device's attention hooks (their kernel geometries differ between wgpu and CUDA).

use kernels_core::cpu::attention::{Dims, scale_value};
use kernels_core::{Result, Tensor};

use super::common::arg;
use crate::device::Device;
use crate::shapes;

pub(super) fn forward(
    be: &dyn Device,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (q, k, v) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let dm = Dims::new(q.shape(), k.shape(), v.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    be.attention_forward(name, &dm, causal, scale, [q, k, v])
}

pub(super) fn backward(
    be: &dyn Device,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (q, k, v, out, g) = (
        arg(args, 0),
        arg(args, 1),
        arg(args, 2),
        arg(args, 3),
        arg(args, 4),
    );
    let dm = Dims::new(q.shape(), k.shape(), v.shape())?;
    let out_shape = [dm.batch, dm.hq, dm.s, dm.dv];
    shapes::same(name, &out_shape, out.shape())?;
    shapes::same(name, &out_shape, g.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    be.attention_backward(name, &dm, causal, scale, [q, k, v, g])
}
