//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn forward<T: Real>(
    causal: bool,
    scale: Option<f32>,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "attention",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn backward<T: Real>(
    causal: bool,
    scale: Option<f32>,
    args: &[View<T>],
) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "attention",
        backend: "cpu (stub)".into(),
    })
}
