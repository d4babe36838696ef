//! `gru_ensemble`: a deep ensemble of one-layer GRUs over stacked weights. The specification
//! is the definition: member `m` is `gru_sequence` of the `m`-th slice of every input along the
//! leading member axis, and the results are stacked along the same axis.

use alloc::format;
use alloc::vec::Vec;

use super::{MatmulFn, sequence_backward_with, sequence_forward_with};
use crate::cpu::args::{Owned, OwnedData, View, float_arg, non_empty};
use crate::error::{Error, Result};
use crate::numerics::Real;

const ENS: &str = "gru_ensemble";

/// Names and ranks (member axis included) of the forward's inputs, then the backward's
/// outputs and output gradients.
const ARGS: [(&str, usize); 10] = [
    ("x", 4),
    ("h0", 3),
    ("weight_ih", 3),
    ("weight_hh", 3),
    ("bias_ih", 2),
    ("bias_hh", 2),
    ("output", 4),
    ("h_n", 3),
    ("grad_output", 4),
    ("grad_h_n", 3),
];

/// The first `count` arguments split along the member axis: `members` lists of per-member views.
fn split<'a, T: Real>(args: &[View<'a, T>], count: usize) -> Result<Vec<Vec<View<'a, T>>>> {
    let (x_shape, _) = float_arg(ENS, args, 0, "x")?;
    let members = match x_shape {
        &[m, _, _, _] => m,
        _ => {
            return Err(Error::bad_shape(
                ENS,
                "x",
                x_shape,
                "needs rank 4 [members, seq, batch, input]",
            ));
        }
    };
    non_empty(ENS, "x", x_shape)?;
    let mut out: Vec<Vec<View<'a, T>>> = (0..members).map(|_| Vec::with_capacity(count)).collect();
    for (i, &(name, rank)) in ARGS.iter().enumerate().take(count) {
        let (shape, data) = float_arg(ENS, args, i, name)?;
        if shape.len() != rank || shape.first() != Some(&members) {
            return Err(Error::bad_shape(
                ENS,
                name,
                shape,
                format!("expected rank {rank} with {members} members first"),
            ));
        }
        let per = data.len() / members;
        for (m, views) in out.iter_mut().enumerate() {
            let part = data.get(m * per..(m + 1) * per).unwrap_or(&[]);
            views.push(View::float(&shape[1..], part));
        }
    }
    Ok(out)
}

/// Stacks each member's results (the same count and shapes for every member) along a new
/// leading axis.
fn stack<T: Real>(per_member: Vec<Vec<Owned<T>>>) -> Result<Vec<Owned<T>>> {
    let members = per_member.len();
    let mut stacked: Vec<(Vec<usize>, Vec<T>)> = Vec::new();
    for results in per_member {
        if stacked.is_empty() {
            stacked = results
                .iter()
                .map(|r| {
                    let mut shape = alloc::vec![members];
                    shape.extend_from_slice(&r.shape);
                    (shape, Vec::with_capacity(members * r.floats().len()))
                })
                .collect();
        }
        for ((_, data), r) in stacked.iter_mut().zip(results) {
            match r.data {
                OwnedData::Float(v) => data.extend(v),
                _ => {
                    return Err(Error::Autograd {
                        why: format!("{ENS}: a member's result is not float"),
                    });
                }
            }
        }
    }
    Ok(stacked
        .into_iter()
        .map(|(shape, data)| Owned::float(shape, data))
        .collect())
}

/// Forward: `output [members, seq, batch, hidden]` and `h_n [members, batch, hidden]`.
pub fn ensemble_forward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let members = split(args, 6)?;
    stack(
        members
            .iter()
            .map(|a| sequence_forward_with(a, mm))
            .collect::<Result<Vec<_>>>()?,
    )
}

/// Backward. Args: the six inputs, `output`, `h_n`, `grad_output`, `grad_h_n`. Returns the six
/// inputs' gradients, each stacked over the members.
pub fn ensemble_backward_with<T: Real>(args: &[View<T>], mm: MatmulFn<T>) -> Result<Vec<Owned<T>>> {
    let members = split(args, 10)?;
    stack(
        members
            .iter()
            .map(|a| sequence_backward_with(a, mm))
            .collect::<Result<Vec<_>>>()?,
    )
}
