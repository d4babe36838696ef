//! (stub: to be written)

use alloc::vec::Vec;

use super::{Owned, View};
use crate::error::{Error, Result};
use crate::numerics::Real;
#[allow(unused_imports)]
use crate::op::*;

#[allow(unused_variables)]
pub fn cross_entropy_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "loss",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn cross_entropy_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "loss",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn mse_forward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "loss",
        backend: "cpu (stub)".into(),
    })
}

#[allow(unused_variables)]
pub fn mse_backward<T: Real>(args: &[View<T>]) -> Result<Vec<Owned<T>>> {
    Err(Error::UnsupportedOnBackend {
        op: "loss",
        backend: "cpu (stub)".into(),
    })
}
