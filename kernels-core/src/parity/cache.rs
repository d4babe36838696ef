//! The parity cases of the KV-cache writes: `kv_write` and `rope_kv_write`.

use alloc::vec;
use alloc::vec::Vec;

use super::generate::{Dist::Normal, Gen};
use super::{Case, case};
use crate::error::Result;
use crate::op::{Op, ROPE_THETA, RopeScaling};

pub(super) fn kv_write(g: &mut Gen) -> Result<Vec<Case>> {
    Ok(vec![
        // A decode step at the last position, batch > 1; a prefill filling the whole
        // cache; rows in the middle of a cache with a row above a workgroup; rank 3.
        case(
            Op::KvWrite { pos: 16 },
            vec![g.f(&[2, 3, 17, 5], Normal)?, g.f(&[2, 3, 1, 5], Normal)?],
        ),
        case(
            Op::KvWrite { pos: 0 },
            vec![g.f(&[1, 1, 7, 3], Normal)?, g.f(&[1, 1, 7, 3], Normal)?],
        ),
        case(
            Op::KvWrite { pos: 2 },
            vec![g.f(&[3, 2, 9, 130], Normal)?, g.f(&[3, 2, 4, 130], Normal)?],
        ),
        case(
            Op::KvWrite { pos: 5 },
            vec![g.f(&[6, 11, 8], Normal)?, g.f(&[6, 2, 8], Normal)?],
        ),
    ])
}

pub(super) fn rope_kv_write(g: &mut Gen) -> Result<Vec<Case>> {
    Ok(vec![
        // A GQA decode step at the cache's last position with batch > 1; a prefill
        // filling the whole cache, interleaved, one head of each; rows in the middle of a
        // cache, head_dim above a workgroup, scaled frequencies.
        case(
            Op::rope_kv_write(ROPE_THETA, 16, false),
            vec![
                g.f(&[2, 2, 17, 8], Normal)?,
                g.f(&[2, 2, 17, 8], Normal)?,
                g.f(&[2, 8, 1, 8], Normal)?,
            ],
        ),
        case(
            Op::rope_kv_write(500000.0, 0, true),
            vec![
                g.f(&[1, 1, 7, 6], Normal)?,
                g.f(&[1, 1, 7, 6], Normal)?,
                g.f(&[1, 3, 7, 6], Normal)?,
            ],
        ),
        case(
            Op::RopeKvWrite {
                pos: 2,
                theta: ROPE_THETA,
                interleaved: false,
                scaling: RopeScaling::Linear,
                factor: 4.0,
                low: 1.0,
                high: 4.0,
                original_context: 0,
            },
            vec![
                g.f(&[1, 2, 9, 260], Normal)?,
                g.f(&[1, 2, 9, 260], Normal)?,
                g.f(&[1, 5, 4, 260], Normal)?,
            ],
        ),
    ])
}
