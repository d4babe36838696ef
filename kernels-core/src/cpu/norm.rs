//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn layer_norm_forward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "norm",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn layer_norm_backward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "norm",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn rms_norm_forward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "norm",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn rms_norm_backward<T: Real>(eps: f32, args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "norm",
        backend: "cpu (stub)".into(),
    })
}
