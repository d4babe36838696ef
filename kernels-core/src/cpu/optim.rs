//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn adamw_step<T: Real>(
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
    step: u64,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "optim",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn sgd_step<T: Real>(
    lr: f32,
    momentum: f32,
    weight_decay: f32,
    nesterov: bool,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "optim",
        backend: "cpu (stub)".into(),
    })
}
