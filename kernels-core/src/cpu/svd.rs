//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn svd_lowrank<T: Real>(
    rank: usize,
    power_iters: usize,
    seed: u64,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "svd",
        backend: "cpu (stub)".into(),
    })
}
