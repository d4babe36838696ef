//! Op dispatch for the CUDA backend: one launcher per op family, an exhaustive `match` over the
//! op vocabulary (a new op is a compile error here under `--features cuda` until handled).
//! Shapes are checked with the wgpu launchers' checks (`crate::shapes`, the CPU reference's
//! own) before anything is launched.

use kernels_core::cpu::attention::{Dims, scale_value};
use kernels_core::cpu::svd::{fix_signs, gaussian_omega, jacobi_svd, orthonormalize_columns};
use kernels_core::op::{Activation, BinaryOp, Direction, GeluApprox, Op, ReduceOp, UnaryOp};
use kernels_core::{Backend, DType, Error, Result, Tensor};

use super::CudaBackend;
use super::engine::{Gemm, Grid, Kernel, Params};
use super::kernels::Family;
use crate::shapes;

/// Threads per block of the one-thread-per-element kernels.
const ELEM_THREADS: u32 = 256;
/// Elements per block of the mse partial sums.
const MSE_CHUNK: usize = 4096;

fn u32_of(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: format!("{op}: {what}"),
        value: v as u64,
        limit: u64::from(u32::MAX),
    })
}

fn arg<'a>(args: &[&'a Tensor], i: usize) -> &'a Tensor {
    // Arity was checked against the spec before any family launcher indexes.
    args[i]
}

fn k(family: Family, entry: &'static str) -> Kernel {
    Kernel { family, entry }
}

/// One thread per element over `n` elements.
fn elems(op: &'static str, n: usize) -> Result<Grid> {
    Ok(Grid {
        blocks: u32_of(op, "blocks", n.div_ceil(ELEM_THREADS as usize))?.min(i32::MAX as u32),
        threads: ELEM_THREADS,
        cooperative: false,
    })
    .and_then(|g| {
        if n.div_ceil(ELEM_THREADS as usize) > i32::MAX as usize {
            Err(Error::LimitExceeded {
                what: format!("{op}: blocks"),
                value: n.div_ceil(ELEM_THREADS as usize) as u64,
                limit: i32::MAX as u64,
            })
        } else {
            Ok(g)
        }
    })
}

/// One block per row, the threads of a block cooperating.
fn rows_grid(be: &CudaBackend, op: &'static str, rows: usize) -> Result<Grid> {
    if rows > i32::MAX as usize {
        return Err(Error::LimitExceeded {
            what: format!("{op}: rows (one block each)"),
            value: rows as u64,
            limit: i32::MAX as u64,
        });
    }
    Ok(Grid {
        blocks: rows as u32,
        threads: be.row_threads(),
        cooperative: true,
    })
}

/// Runs one op (arity, dtypes and shapes checked first).
pub(crate) fn run(
    be: &CudaBackend,
    op: &Op,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dtypes: Vec<DType> = args.iter().map(|t| t.dtype()).collect();
    op.check_signature(dir, &dtypes)?;
    use Direction::{Backward as B, Forward as F};
    let name = op.name();
    match (*op, dir) {
        (Op::Matmul { trans_a, trans_b }, F) => Ok(vec![matmul(
            be,
            name,
            arg(args, 0),
            arg(args, 1),
            trans_a,
            trans_b,
        )?]),
        (Op::Matmul { trans_a, trans_b }, B) => matmul_backward(be, name, args, trans_a, trans_b),
        (Op::Linear { activation }, F) => Ok(vec![linear_forward(be, name, activation, args)?]),
        (Op::Linear { activation }, B) => linear_backward(be, name, activation, args),
        (Op::Binary(b), F) => Ok(vec![binary_forward(be, name, b, args)?]),
        (Op::Binary(b), B) => binary_backward(be, name, b, args),
        (Op::Scale { factor }, d) => Ok(vec![unary(be, name, 10, factor, args, d == B)?]),
        (Op::Unary(u), d) => {
            let code = match u {
                UnaryOp::Neg => 0,
                UnaryOp::Exp => 1,
                UnaryOp::Log => 2,
                UnaryOp::Sqrt => 3,
                UnaryOp::Relu => 4,
                UnaryOp::Sigmoid => 5,
                UnaryOp::Tanh => 6,
                UnaryOp::Silu => 7,
            };
            Ok(vec![unary(be, name, code, 0.0, args, d == B)?])
        }
        (Op::Gelu { approximate }, d) => {
            let code = match approximate {
                GeluApprox::None => 8,
                GeluApprox::Tanh => 9,
            };
            Ok(vec![unary(be, name, code, 0.0, args, d == B)?])
        }
        (Op::Softmax { causal }, d) => Ok(vec![softmax(be, name, false, causal, args, d == B)?]),
        (Op::LogSoftmax { causal }, d) => Ok(vec![softmax(be, name, true, causal, args, d == B)?]),
        (Op::LayerNorm { eps }, F) => Ok(vec![norm_forward(be, name, false, eps, args)?]),
        (Op::LayerNorm { eps }, B) => norm_backward(be, name, false, eps, args),
        (Op::RmsNorm { eps }, F) => Ok(vec![norm_forward(be, name, true, eps, args)?]),
        (Op::RmsNorm { eps }, B) => norm_backward(be, name, true, eps, args),
        (Op::Embedding, F) => Ok(vec![embedding(be, name, args)?]),
        (Op::Embedding, B) => Ok(vec![embedding_backward(be, name, args)?]),
        (Op::Reduce(r), d) => Ok(vec![reduce(be, name, r, args, d == B)?]),
        (Op::Argmax, F) => Ok(vec![argmax(be, name, arg(args, 0))?]),
        (
            Op::Sample {
                temperature,
                top_k,
                top_p,
            },
            F,
        ) => Ok(vec![sample(be, name, temperature, top_k, top_p, args)?]),
        (Op::Transpose, F) => Ok(vec![transpose(be, name, arg(args, 0))?]),
        (Op::Transpose, B) => {
            let (x, g) = (arg(args, 0), arg(args, 2));
            shapes::same(name, g.shape(), &transposed_shape(x.shape()))?;
            Ok(vec![transpose(be, name, g)?])
        }
        (Op::Concat, F) => Ok(vec![concat(be, name, arg(args, 0), arg(args, 1))?]),
        (Op::Concat, B) => concat_backward(be, name, args),
        (
            Op::AdamwStep {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                step,
            },
            F,
        ) => {
            let bc1 = 1.0 - f64::from(beta1).powf(step as f64);
            let bc2 = (1.0 - f64::from(beta2).powf(step as f64)).sqrt();
            let p = Params::default().with_f(&[
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                bc1 as f32,
                bc2 as f32,
            ]);
            optim(be, name, "adamw_step", p, args, 3)
        }
        (
            Op::SgdStep {
                lr,
                momentum,
                weight_decay,
                nesterov,
            },
            F,
        ) => {
            let p = Params::u(&[0, u32::from(nesterov)]).with_f(&[lr, momentum, weight_decay]);
            optim(be, name, "sgd_step", p, args, 2)
        }
        (
            Op::Rope {
                theta,
                offset,
                interleaved,
            },
            F,
        ) => Ok(vec![rope(
            be,
            name,
            theta,
            offset,
            interleaved,
            false,
            arg(args, 0),
        )?]),
        (
            Op::Rope {
                theta,
                offset,
                interleaved,
            },
            B,
        ) => {
            let (x, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2));
            shapes::same(name, x.shape(), out.shape())?;
            shapes::same(name, x.shape(), g.shape())?;
            Ok(vec![rope(be, name, theta, offset, interleaved, true, g)?])
        }
        (Op::CrossEntropy, F) => Ok(vec![cross_entropy_forward(be, name, args)?]),
        (Op::CrossEntropy, B) => Ok(vec![cross_entropy_backward(be, name, args)?]),
        (Op::Mse, F) => Ok(vec![mse_forward(be, name, args)?]),
        (Op::Mse, B) => mse_backward(be, name, args),
        (Op::Attention { causal, scale }, F) => {
            Ok(vec![attention_forward(be, name, causal, scale, args)?])
        }
        (Op::Attention { causal, scale }, B) => attention_backward(be, name, causal, scale, args),
        (Op::GruCell, F) => {
            let dm = gru_dims(name, false, args)?;
            let f = gru_forward(be, name, dm, args, false, false)?;
            Ok(vec![f.output.reshape(&[dm.batch, dm.hidden])?])
        }
        (Op::GruCell, B) => gru_backward(be, name, false, args),
        (Op::GruSequence, F) => {
            let dm = gru_dims(name, true, args)?;
            let f = gru_forward(be, name, dm, args, true, false)?;
            Ok(vec![f.output, f.h_n])
        }
        (Op::GruSequence, B) => gru_backward(be, name, true, args),
        (
            Op::SvdLowrank {
                rank,
                power_iters,
                seed,
            },
            F,
        ) => svd_lowrank(be, name, rank, power_iters, seed, arg(args, 0)),
        // Non-differentiable ops: rejected by `check_signature` above.
        (
            Op::Argmax
            | Op::Sample { .. }
            | Op::AdamwStep { .. }
            | Op::SgdStep { .. }
            | Op::SvdLowrank { .. },
            B,
        ) => Err(Error::NoBackward { op: name }),
    }
}

// --- elementwise ---------------------------------------------------------------------------

fn unary(
    be: &CudaBackend,
    name: &'static str,
    code: u32,
    factor: f32,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::non_empty(name, "x", x.shape())?;
    let n = x.numel();
    let p = Params::u(&[u32_of(name, "elements", n)?])
        .with_f(&[factor])
        .code(code);
    let out = be.alloc(name, x.shape(), DType::F32)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
        be.launch(
            name,
            k(Family::Elementwise, "unary_backward"),
            elems(name, n)?,
            p,
            &[x, y, g],
            &[&out],
        )?;
    } else {
        be.launch(
            name,
            k(Family::Elementwise, "unary_forward"),
            elems(name, n)?,
            p,
            &[x],
            &[&out],
        )?;
    }
    Ok(out)
}

fn bop_code(b: BinaryOp) -> u32 {
    match b {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
    }
}

fn binary_forward(
    be: &CudaBackend,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (a, bt) = (arg(args, 0), arg(args, 1));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    let out = be.alloc(name, a.shape(), DType::F32)?;
    let p =
        Params::u(&[u32_of(name, "elements", n)?, u32_of(name, "elements", nb)?]).code(bop_code(b));
    be.launch(
        name,
        k(Family::Elementwise, "binary_forward"),
        elems(name, n)?,
        p,
        &[a, bt],
        &[&out],
    )?;
    Ok(out)
}

fn binary_backward(
    be: &CudaBackend,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (a, bt, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    shapes::same(name, a.shape(), g.shape())?;
    let p =
        Params::u(&[u32_of(name, "elements", n)?, u32_of(name, "elements", nb)?]).code(bop_code(b));
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    be.launch(
        name,
        k(Family::Elementwise, "binary_backward_a"),
        elems(name, n)?,
        p,
        &[a, bt, g],
        &[&ga],
    )?;
    let gb = be.alloc(name, bt.shape(), DType::F32)?;
    be.launch(
        name,
        k(Family::Elementwise, "binary_backward_b"),
        elems(name, nb)?,
        p,
        &[a, bt, g],
        &[&gb],
    )?;
    Ok(vec![ga, gb])
}

/// Sums `x` viewed as `[rows, cols]` over rows into a tensor of `shape` (`cols` elements).
fn sum_rows(be: &CudaBackend, name: &'static str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let cols: usize = shape.iter().product();
    let p = Params::u(&[
        u32_of(name, "elements", x.numel())?,
        u32_of(name, "elements", cols)?,
    ]);
    let out = be.alloc(name, shape, DType::F32)?;
    be.launch(
        name,
        k(Family::Elementwise, "sum_rows"),
        elems(name, cols)?,
        p,
        &[x],
        &[&out],
    )?;
    Ok(out)
}

// --- matmul (cuBLAS) -----------------------------------------------------------------------

fn act_code(a: Activation) -> u32 {
    match a {
        Activation::None => 0,
        Activation::Relu => 1,
        Activation::Tanh => 2,
        Activation::Sigmoid => 3,
    }
}

/// `linear` forward: cuBLAS `x @ weight^T`, then bias and activation in place.
fn linear_forward(
    be: &CudaBackend,
    name: &'static str,
    activation: Activation,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, w, b) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let (rows, in_f, out_f) = kernels_core::cpu::linear::check(x.shape(), w.shape(), b.shape())?;
    let out = be.alloc(
        name,
        &kernels_core::cpu::linear::out_shape(x.shape(), out_f),
        DType::F32,
    )?;
    matmul_at(
        be,
        name,
        (x, 0, false),
        (w, 0, true),
        &out,
        (rows, out_f, in_f),
    )?;
    let n = rows * out_f;
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "elements", out_f)?,
    ])
    .code(act_code(activation));
    be.launch(
        name,
        k(Family::Elementwise, "linear_epilogue"),
        elems(name, n)?,
        p,
        &[b],
        &[&out],
    )?;
    Ok(out)
}

/// `linear` backward: `g' = g * act'(out)`, then cuBLAS `g' @ weight` and `g'^T @ x`, and the
/// column sums of `g'`.
fn linear_backward(
    be: &CudaBackend,
    name: &'static str,
    activation: Activation,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (x, w, b) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let (y, g) = (arg(args, 3), arg(args, 4));
    let (rows, in_f, out_f) = kernels_core::cpu::linear::check(x.shape(), w.shape(), b.shape())?;
    let want = kernels_core::cpu::linear::out_shape(x.shape(), out_f);
    shapes::same(name, y.shape(), &want)?;
    shapes::same(name, g.shape(), &want)?;
    let n = rows * out_f;
    let gp = be.alloc(name, &[rows, out_f], DType::F32)?;
    let p = Params::u(&[u32_of(name, "elements", n)?]).code(act_code(activation));
    be.launch(
        name,
        k(Family::Elementwise, "linear_grad_pre"),
        elems(name, n)?,
        p,
        &[g, y],
        &[&gp],
    )?;
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&gp, 0, false),
        (w, 0, false),
        &gx,
        (rows, in_f, out_f),
    )?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&gp, 0, true),
        (x, 0, false),
        &gw,
        (out_f, in_f, rows),
    )?;
    let gb = sum_rows(be, name, &gp, b.shape())?;
    Ok(vec![gx, gw, gb])
}

fn matmul(
    be: &CudaBackend,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    let d = shapes::matmul(name, a.shape(), b.shape(), trans_a, trans_b)?;
    let out = be.alloc(name, &d.out_shape, DType::F32)?;
    let g = Gemm {
        m: d.m,
        n: d.n,
        k: d.k,
        trans_a,
        trans_b,
        batch: d.batch,
        stride_a: d.a_step,
        stride_b: d.b_step,
        offset_a: 0,
        offset_b: 0,
        offset_c: 0,
    };
    be.gemm(name, &g, a, b, &out)?;
    Ok(out)
}

/// `out [m, n] = op(a) @ op(b)` for one matrix each, read from element offsets of larger
/// buffers (one step of a sequence, say).
#[allow(clippy::too_many_arguments)]
fn matmul_at(
    be: &CudaBackend,
    name: &'static str,
    (a, offset_a, trans_a): (&Tensor, usize, bool),
    (b, offset_b, trans_b): (&Tensor, usize, bool),
    out: &Tensor,
    (m, n, k): (usize, usize, usize),
) -> Result<()> {
    let g = Gemm {
        m,
        n,
        k,
        trans_a,
        trans_b,
        batch: 1,
        stride_a: 0,
        stride_b: 0,
        offset_a,
        offset_b,
        offset_c: 0,
    };
    be.gemm(name, &g, a, b, out)
}

fn grad_operand(
    be: &CudaBackend,
    name: &'static str,
    (x, tx): (&Tensor, bool),
    (y, ty): (&Tensor, bool),
    target: &[usize],
) -> Result<Tensor> {
    let full = matmul(be, name, x, y, tx, ty)?;
    if full.shape() == target {
        return Ok(full);
    }
    // A shared 2-D operand: its gradient sums over the batch.
    sum_rows(be, name, &full, target)
}

fn matmul_backward(
    be: &CudaBackend,
    name: &'static str,
    args: &[&Tensor],
    ta: bool,
    tb: bool,
) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let d = shapes::matmul(name, a.shape(), b.shape(), ta, tb)?;
    shapes::same(name, g.shape(), &d.out_shape)?;
    // Gradients of C = op(A) op(B) as products with transpose flags: no transposed copies.
    let (ga, gb) = match (ta, tb) {
        (false, false) => (
            grad_operand(be, name, (g, false), (b, true), a.shape())?,
            grad_operand(be, name, (a, true), (g, false), b.shape())?,
        ),
        (true, false) => (
            grad_operand(be, name, (b, false), (g, true), a.shape())?,
            grad_operand(be, name, (a, false), (g, false), b.shape())?,
        ),
        (false, true) => (
            grad_operand(be, name, (g, false), (b, false), a.shape())?,
            grad_operand(be, name, (g, true), (a, false), b.shape())?,
        ),
        (true, true) => (
            grad_operand(be, name, (b, true), (g, true), a.shape())?,
            grad_operand(be, name, (g, true), (a, true), b.shape())?,
        ),
    };
    Ok(vec![ga, gb])
}

// --- rows: reduce, softmax, norms ----------------------------------------------------------

fn reduce(
    be: &CudaBackend,
    name: &'static str,
    r: ReduceOp,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, n) = shapes::rows_last(x.shape());
    let out_shape = &x.shape()[..x.rank() - 1];
    let code = match r {
        ReduceOp::Sum => 0,
        ReduceOp::Mean => 1,
        ReduceOp::Max => 2,
    };
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]).code(code);
    let grid = rows_grid(be, name, rows)?;
    if backward {
        let g = arg(args, 2);
        shapes::same(name, g.shape(), out_shape)?;
        let gx = be.alloc(name, x.shape(), DType::F32)?;
        be.launch(
            name,
            k(Family::Reduce, "reduce_backward"),
            grid,
            p,
            &[x, x, g],
            &[&gx],
        )?;
        return Ok(gx);
    }
    let out = be.alloc(name, out_shape, DType::F32)?;
    be.launch(
        name,
        k(Family::Reduce, "reduce_forward"),
        grid,
        p,
        &[x],
        &[&out],
    )?;
    Ok(out)
}

fn argmax(be: &CudaBackend, name: &'static str, x: &Tensor) -> Result<Tensor> {
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, n) = shapes::rows_last(x.shape());
    let out = be.alloc(name, &x.shape()[..x.rank() - 1], DType::I32)?;
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]);
    // The i32 output sits in the second output slot, as in the WGSL.
    be.launch(
        name,
        k(Family::Reduce, "argmax"),
        rows_grid(be, name, rows)?,
        p,
        &[x],
        &[&out, &out],
    )?;
    Ok(out)
}

/// Next-token sampling, one block per row (kernels-core's `cpu::sample` is the definition).
fn sample(
    be: &CudaBackend,
    name: &'static str,
    temperature: f32,
    top_k: usize,
    top_p: f32,
    args: &[&Tensor],
) -> Result<Tensor> {
    kernels_core::cpu::sample::check_attrs(temperature, top_k, top_p)?;
    let (logits, uniform) = (arg(args, 0), arg(args, 1));
    let (rows, n) = kernels_core::cpu::sample::check_shapes(logits.shape(), uniform.shape())?;
    let out = be.alloc(name, &[rows], DType::I32)?;
    let p = Params::u(&[
        u32_of(name, "rows", rows)?,
        u32_of(name, "row length", n)?,
        u32_of(name, "top_k", top_k)?,
    ])
    .with_f(&[temperature, top_p]);
    be.launch(
        name,
        k(Family::Reduce, "sample"),
        rows_grid(be, name, rows)?,
        p,
        &[logits, uniform],
        &[&out, &out],
    )?;
    Ok(out)
}

fn softmax(
    be: &CudaBackend,
    name: &'static str,
    log: bool,
    causal: bool,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, t) = shapes::rows_last(x.shape());
    let s = if x.rank() >= 2 {
        x.shape()[x.rank() - 2]
    } else {
        1
    };
    let mut p = Params::u(&[
        u32_of(name, "rows", rows)?,
        u32_of(name, "row length", t)?,
        u32_of(name, "rows", s)?,
    ])
    .code(u32::from(log));
    p.u[6] = u32::from(causal);
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let grid = rows_grid(be, name, rows)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
        be.launch(
            name,
            k(Family::Softmax, "softmax_backward"),
            grid,
            p,
            &[x, y, g],
            &[&out],
        )?;
    } else {
        be.launch(
            name,
            k(Family::Softmax, "softmax_forward"),
            grid,
            p,
            &[x],
            &[&out],
        )?;
    }
    Ok(out)
}

fn norm_dims(name: &'static str, rms: bool, args: &[&Tensor]) -> Result<(usize, usize)> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    if rms {
        shapes::norm(name, x.shape(), &[("weight", w.shape())])
    } else {
        shapes::norm(
            name,
            x.shape(),
            &[("weight", w.shape()), ("bias", arg(args, 2).shape())],
        )
    }
}

fn norm_forward(
    be: &CudaBackend,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (rows, n) = norm_dims(name, rms, args)?;
    let x = arg(args, 0);
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?])
        .with_f(&[eps])
        .code(u32::from(rms));
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let ins: Vec<&Tensor> = if rms {
        vec![x, arg(args, 1)]
    } else {
        vec![x, arg(args, 1), arg(args, 2)]
    };
    be.launch(
        name,
        k(Family::Norm, "norm_forward"),
        rows_grid(be, name, rows)?,
        p,
        &ins,
        &[&out],
    )?;
    Ok(out)
}

fn norm_backward(
    be: &CudaBackend,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (rows, n) = norm_dims(name, rms, args)?;
    let (x, w) = (arg(args, 0), arg(args, 1));
    let g = if rms { arg(args, 3) } else { arg(args, 4) };
    shapes::same(name, g.shape(), x.shape())?;
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?])
        .with_f(&[eps])
        .code(u32::from(rms));
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 2], DType::F32)?;
    be.launch(
        name,
        k(Family::Norm, "norm_backward_rows"),
        rows_grid(be, name, rows)?,
        p,
        &[x, w, g],
        &[&gx, &stats],
    )?;
    let gw = be.alloc(name, &[n], DType::F32)?;
    let gb = be.alloc(name, &[n], DType::F32)?;
    be.launch(
        name,
        k(Family::Norm, "norm_backward_cols"),
        elems(name, n)?,
        p,
        &[x, g, &stats],
        &[&gw, &gb],
    )?;
    Ok(if rms { vec![gx, gw] } else { vec![gx, gw, gb] })
}

// --- layout --------------------------------------------------------------------------------

fn transposed_shape(s: &[usize]) -> Vec<usize> {
    let mut out = s.to_vec();
    let r = out.len();
    if r >= 2 {
        out.swap(r - 1, r - 2);
    }
    out
}

fn transpose(be: &CudaBackend, name: &'static str, x: &Tensor) -> Result<Tensor> {
    shapes::min_rank(name, "x", x.shape(), 2)?;
    shapes::non_empty(name, "x", x.shape())?;
    let r = x.rank();
    let (rr, cc) = (x.shape()[r - 2], x.shape()[r - 1]);
    let n = x.numel();
    let out = be.alloc(name, &transposed_shape(x.shape()), DType::F32)?;
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "rows", rr)?,
        u32_of(name, "cols", cc)?,
    ]);
    be.launch(
        name,
        k(Family::Layout, "transpose"),
        elems(name, n)?,
        p,
        &[x],
        &[&out],
    )?;
    Ok(out)
}

fn concat(be: &CudaBackend, name: &'static str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (_, m, kk, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "width", m)?,
        u32_of(name, "width", kk)?,
    ]);
    be.launch(
        name,
        k(Family::Layout, "concat"),
        elems(name, n)?,
        p,
        &[a, b],
        &[&out],
    )?;
    Ok(out)
}

fn concat_backward(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (_, m, kk, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    shapes::same(name, g.shape(), &out_shape)?;
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let n = g.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "width", m)?,
        u32_of(name, "width", kk)?,
    ]);
    be.launch(
        name,
        k(Family::Layout, "concat_backward"),
        elems(name, n)?,
        p,
        &[g],
        &[&ga, &gb],
    )?;
    Ok(vec![ga, gb])
}

/// Checks integer indices against `bound` from the host copy kept at upload (indices made on
/// the device are clamped by the kernels instead).
fn check_ints(
    be: &CudaBackend,
    name: &'static str,
    what: &str,
    t: &Tensor,
    bound: usize,
) -> Result<()> {
    if let Some(host) = be.buffer_of(name, t)?.host_ints()
        && let Some(&bad) = host.iter().find(|&&i| i < 0 || i as u64 >= bound as u64)
    {
        return Err(Error::IndexOutOfRange {
            op: name,
            tensor: what.into(),
            index: bad,
            bound,
        });
    }
    Ok(())
}

fn embedding_dims(
    be: &CudaBackend,
    name: &'static str,
    ids: &Tensor,
    w: &Tensor,
) -> Result<(usize, usize, Vec<usize>)> {
    if w.rank() != 2 {
        return Err(Error::bad_shape(
            name,
            "weight",
            w.shape(),
            "expected [vocab, dim]",
        ));
    }
    shapes::non_empty(name, "weight", w.shape())?;
    shapes::non_empty(name, "ids", ids.shape())?;
    let (vocab, d) = (w.shape()[0], w.shape()[1]);
    check_ints(be, name, "ids", ids, vocab)?;
    let mut out_shape = ids.shape().to_vec();
    out_shape.push(d);
    Ok((vocab, d, out_shape))
}

fn embedding(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w) = (arg(args, 0), arg(args, 1));
    let (vocab, d, out_shape) = embedding_dims(be, name, ids, w)?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "dim", d)?,
        u32_of(name, "vocab", vocab)?,
    ]);
    be.launch(
        name,
        k(Family::Layout, "embedding"),
        elems(name, n)?,
        p,
        &[w, w, w, ids],
        &[&out],
    )?;
    Ok(out)
}

fn embedding_backward(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (_, d, out_shape) = embedding_dims(be, name, ids, w)?;
    shapes::same(name, g.shape(), &out_shape)?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    let n = gw.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "dim", d)?,
        u32_of(name, "tokens", ids.numel())?,
    ]);
    be.launch(
        name,
        k(Family::Layout, "embedding_backward"),
        elems(name, n)?,
        p,
        &[g, g, g, ids],
        &[&gw],
    )?;
    Ok(gw)
}

// --- optimizers ----------------------------------------------------------------------------

fn optim(
    be: &CudaBackend,
    name: &'static str,
    entry: &'static str,
    mut p: Params,
    args: &[&Tensor],
    outputs: usize,
) -> Result<Vec<Tensor>> {
    let param = arg(args, 0);
    shapes::non_empty(name, "param", param.shape())?;
    for t in &args[1..] {
        shapes::same(name, param.shape(), t.shape())?;
    }
    let n = param.numel();
    p.u[0] = u32_of(name, "elements", n)?;
    let outs = (0..outputs)
        .map(|_| be.alloc(name, param.shape(), DType::F32))
        .collect::<Result<Vec<_>>>()?;
    let out_refs: Vec<&Tensor> = outs.iter().collect();
    be.launch(
        name,
        k(Family::Optim, entry),
        elems(name, n)?,
        p,
        args,
        &out_refs,
    )?;
    Ok(outs)
}

// --- rope ----------------------------------------------------------------------------------

/// `[half, 2]` words `(high, low)` of `frac(inv_freq_i / 2pi) * 2^64`, bit-cast to i32 (the
/// same table as the wgpu backend's).
fn turn_table(theta: f32, head_dim: usize) -> Result<Tensor> {
    let half = head_dim / 2;
    let theta = f64::from(theta);
    let mut words = Vec::with_capacity(2 * half);
    for i in 0..half {
        let inv_freq = theta.powf(-((2 * i) as f64) / head_dim as f64);
        let turns = inv_freq / std::f64::consts::TAU;
        let frac = turns - turns.floor();
        let fixed = (frac * 18_446_744_073_709_551_616.0) as u64;
        words.push((fixed >> 32) as u32 as i32);
        words.push(fixed as u32 as i32);
    }
    Tensor::from_i32(&[half, 2], words)
}

#[allow(clippy::too_many_arguments)]
fn rope(
    be: &CudaBackend,
    name: &'static str,
    theta: f32,
    offset: usize,
    interleaved: bool,
    inverse: bool,
    x: &Tensor,
) -> Result<Tensor> {
    let (seq, head_dim) = kernels_core::cpu::rope::check(theta, offset, x.shape())?;
    let last = offset.checked_add(seq - 1);
    if last.is_none_or(|p| p > u32::MAX as usize) {
        return Err(Error::LimitExceeded {
            what: format!("{name}: position offset + seq - 1 (offset {offset}, seq {seq})"),
            value: last.map_or(u64::MAX, |p| p as u64),
            limit: u64::from(u32::MAX),
        });
    }
    let half = head_dim / 2;
    let rows = x.numel() / head_dim;
    let table = be.table(format!("rope {:08x} {head_dim}", theta.to_bits()), || {
        turn_table(theta, head_dim)
    })?;
    let pairs = rows * half;
    let p = Params::u(&[
        u32_of(name, "pairs", pairs)?,
        u32_of(name, "seq", seq)?,
        u32_of(name, "half", half)?,
        u32_of(name, "offset", offset)?,
        u32::from(interleaved),
        u32::from(inverse),
    ]);
    let out = be.alloc(name, x.shape(), DType::F32)?;
    be.launch(
        name,
        k(Family::Rope, "rope"),
        elems(name, pairs)?,
        p,
        &[x, x, x, &table],
        &[&out],
    )?;
    Ok(out)
}

// --- losses --------------------------------------------------------------------------------

fn sum_scale(
    be: &CudaBackend,
    name: &'static str,
    partials: &Tensor,
    scale: f32,
) -> Result<Tensor> {
    let out = be.alloc(name, &[], DType::F32)?;
    let p = Params::u(&[u32_of(name, "partials", partials.numel())?]).with_f(&[scale]);
    be.launch(
        name,
        k(Family::Loss, "sum_scale"),
        rows_grid(be, name, 1)?,
        p,
        &[partials],
        &[&out],
    )?;
    Ok(out)
}

fn ce_dims(
    be: &CudaBackend,
    name: &'static str,
    logits: &Tensor,
    targets: &Tensor,
) -> Result<(usize, usize)> {
    let (rows, c) = shapes::cross_entropy(name, logits.shape(), targets.shape())?;
    check_ints(be, name, "targets", targets, c)?;
    Ok((rows, c))
}

fn cross_entropy_forward(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (x, t) = (arg(args, 0), arg(args, 1));
    let (rows, c) = ce_dims(be, name, x, t)?;
    let partial = be.alloc(name, &[rows], DType::F32)?;
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "classes", c)?]);
    be.launch(
        name,
        k(Family::Loss, "ce_rows"),
        rows_grid(be, name, rows)?,
        p,
        &[x, x, x, t],
        &[&partial],
    )?;
    sum_scale(be, name, &partial, (1.0 / rows as f64) as f32)
}

fn cross_entropy_backward(
    be: &CudaBackend,
    name: &'static str,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, t, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let (rows, c) = ce_dims(be, name, x, t)?;
    shapes::same(name, out.shape(), &[])?;
    shapes::same(name, g.shape(), &[])?;
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "classes", c)?])
        .with_f(&[(1.0 / rows as f64) as f32]);
    be.launch(
        name,
        k(Family::Loss, "ce_backward"),
        rows_grid(be, name, rows)?,
        p,
        &[x, x, g, t],
        &[&gx],
    )?;
    Ok(gx)
}

fn mse_check(name: &'static str, a: &Tensor, b: &Tensor) -> Result<usize> {
    shapes::non_empty(name, "a", a.shape())?;
    shapes::non_empty(name, "b", b.shape())?;
    shapes::same(name, a.shape(), b.shape())?;
    Ok(a.numel())
}

fn mse_forward(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (a, b) = (arg(args, 0), arg(args, 1));
    let n = mse_check(name, a, b)?;
    let chunks = n.div_ceil(MSE_CHUNK);
    let partial = be.alloc(name, &[chunks], DType::F32)?;
    let p = Params::u(&[u32_of(name, "elements", n)?, MSE_CHUNK as u32]);
    be.launch(
        name,
        k(Family::Loss, "mse_chunks"),
        rows_grid(be, name, chunks)?,
        p,
        &[a, b],
        &[&partial],
    )?;
    sum_scale(be, name, &partial, (1.0 / n as f64) as f32)
}

fn mse_backward(be: &CudaBackend, name: &'static str, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let (a, b, out, g) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let n = mse_check(name, a, b)?;
    shapes::same(name, out.shape(), &[])?;
    shapes::same(name, g.shape(), &[])?;
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let p = Params::u(&[u32_of(name, "elements", n)?]).with_f(&[(2.0 / n as f64) as f32]);
    be.launch(
        name,
        k(Family::Loss, "mse_backward"),
        elems(name, n)?,
        p,
        &[a, b, g],
        &[&ga, &gb],
    )?;
    Ok(vec![ga, gb])
}

// --- attention -----------------------------------------------------------------------------

fn attention_params(name: &'static str, dm: &Dims, causal: bool, scale: f32) -> Result<Params> {
    Ok(Params::u(&[
        u32_of(name, "seq_q", dm.s)?,
        u32_of(name, "seq_kv", dm.t)?,
        u32_of(name, "head_dim", dm.d)?,
        u32_of(name, "head_dim_v", dm.dv)?,
        u32_of(name, "heads_q", dm.hq)?,
        u32_of(name, "group", dm.hq / dm.hkv)?,
        u32::from(causal),
    ])
    .with_f(&[scale]))
}

fn attention_forward(
    be: &CudaBackend,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (q, kt, v) = (arg(args, 0), arg(args, 1), arg(args, 2));
    let dm = Dims::new(q.shape(), kt.shape(), v.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let rows = dm.batch * dm.hq * dm.s;
    let out = be.alloc(name, &[dm.batch, dm.hq, dm.s, dm.dv], DType::F32)?;
    be.launch(
        name,
        k(Family::Attention, "attn_forward"),
        rows_grid(be, name, rows)?,
        attention_params(name, &dm, causal, scale)?,
        &[q, kt, v],
        &[&out],
    )?;
    Ok(out)
}

fn attention_backward(
    be: &CudaBackend,
    name: &'static str,
    causal: bool,
    scale: Option<f32>,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (q, kt, v, out, g) = (
        arg(args, 0),
        arg(args, 1),
        arg(args, 2),
        arg(args, 3),
        arg(args, 4),
    );
    let dm = Dims::new(q.shape(), kt.shape(), v.shape())?;
    let out_shape = [dm.batch, dm.hq, dm.s, dm.dv];
    shapes::same(name, &out_shape, out.shape())?;
    shapes::same(name, &out_shape, g.shape())?;
    let scale = scale_value::<f32>(scale, dm.d)?;
    let p = attention_params(name, &dm, causal, scale)?;
    let rows = dm.batch * dm.hq * dm.s;
    let gq = be.alloc(name, q.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 4], DType::F32)?;
    be.launch(
        name,
        k(Family::Attention, "attn_dq"),
        rows_grid(be, name, rows)?,
        p,
        &[q, kt, v, g],
        &[&gq, &gq, &stats],
    )?;
    let gk = be.alloc(name, kt.shape(), DType::F32)?;
    let gv = be.alloc(name, v.shape(), DType::F32)?;
    let keys = dm.batch * dm.hkv * dm.t;
    be.launch(
        name,
        k(Family::Attention, "attn_dkv"),
        rows_grid(be, name, keys)?,
        p,
        &[q, kt, v, g],
        &[&gk, &gv, &stats],
    )?;
    Ok(vec![gq, gk, gv])
}

// --- GRU -----------------------------------------------------------------------------------

use crate::shapes::GruDims;

/// The GRU geometry checks shared with the wgpu launcher (`crate::shapes::gru`).
fn gru_dims(name: &'static str, sequence: bool, args: &[&Tensor]) -> Result<GruDims> {
    let shapes: Vec<&[usize]> = args.iter().take(6).map(|t| t.shape()).collect();
    crate::shapes::gru(name, sequence, &shapes)
}

struct GruForward {
    output: Tensor,
    h_n: Tensor,
    trace: Option<Tensor>,
}

/// The recomputable forward: `output [seq, batch, hidden]`, `h_n` and (when asked) the gate
/// trace `[seq, batch, 4*hidden]`. One SGEMM for all input projections, then per step one
/// SGEMM and one gate kernel.
fn gru_forward(
    be: &CudaBackend,
    name: &'static str,
    dm: GruDims,
    args: &[&Tensor],
    want_h_n: bool,
    want_trace: bool,
) -> Result<GruForward> {
    let (x, h0, w_ih, w_hh) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let GruDims {
        seq,
        batch,
        input,
        hidden: hd,
    } = dm;
    let rows = seq * batch;
    let gi = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    matmul_at(
        be,
        name,
        (x, 0, false),
        (w_ih, 0, true),
        &gi,
        (rows, 3 * hd, input),
    )?;
    let biases = concat(be, name, arg(args, 4), arg(args, 5))?;
    let output = be.alloc(name, &[seq, batch, hd], DType::F32)?;
    let trace = if want_trace {
        Some(be.alloc(name, &[seq, batch, 4 * hd], DType::F32)?)
    } else {
        None
    };
    let h_n = be.alloc(name, &[batch, hd], DType::F32)?;
    let gh = be.alloc(name, &[batch, 3 * hd], DType::F32)?;
    let bh = batch * hd;
    let flags = u32::from(want_h_n) | (u32::from(want_trace) << 1);
    for t in 0..seq {
        let (h_prev, off) = if t == 0 {
            (h0, 0)
        } else {
            (&output, (t - 1) * bh)
        };
        matmul_at(
            be,
            name,
            (h_prev, off, false),
            (w_hh, 0, true),
            &gh,
            (batch, 3 * hd, hd),
        )?;
        let p = Params::u(&[
            u32_of(name, "batch * hidden", bh)?,
            u32_of(name, "hidden", hd)?,
            u32_of(name, "step", t)?,
            0,
            u32_of(name, "batch", batch)?,
            flags,
        ]);
        let mut outs = vec![&output, &h_n];
        if let Some(tr) = trace.as_ref() {
            outs.push(tr);
        }
        be.launch(
            name,
            k(Family::Gru, "gate_forward"),
            elems(name, bh)?,
            p,
            &[&gi, &gh, h0, &biases],
            &outs,
        )?;
    }
    Ok(GruForward { output, h_n, trace })
}

/// Backward of either GRU op (BPTT over the recomputed forward). Args: the six inputs, the
/// outputs (`h_next`, or `output` and `h_n`), then their gradients.
fn gru_backward(
    be: &CudaBackend,
    name: &'static str,
    sequence: bool,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dm = gru_dims(name, sequence, args)?;
    let GruDims {
        seq,
        batch,
        input,
        hidden: hd,
    } = dm;
    let h_shape = [batch, hd];
    let (g_out, g_hn) = if sequence {
        let out_shape = [seq, batch, hd];
        shapes::same(name, &out_shape, arg(args, 6).shape())?;
        shapes::same(name, &h_shape, arg(args, 7).shape())?;
        shapes::same(name, &out_shape, arg(args, 8).shape())?;
        shapes::same(name, &h_shape, arg(args, 9).shape())?;
        (arg(args, 8), Some(arg(args, 9)))
    } else {
        shapes::same(name, &h_shape, arg(args, 6).shape())?;
        shapes::same(name, &h_shape, arg(args, 7).shape())?;
        (arg(args, 7), None)
    };
    let (x, h0, w_ih, w_hh) = (arg(args, 0), arg(args, 1), arg(args, 2), arg(args, 3));
    let f = gru_forward(be, name, dm, args, false, true)?;
    let trace = f
        .trace
        .ok_or_else(|| Error::bad_shape(name, "trace", &[], "not produced"))?;
    let output = f.output;
    let rows = seq * batch;
    let bh = batch * hd;
    let d_gi = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    let d_gh = be.alloc(name, &[rows, 3 * hd], DType::F32)?;
    let dh = be.alloc(name, &h_shape, DType::F32)?;
    let mm = be.alloc(name, &h_shape, DType::F32)?;
    for t in (0..seq).rev() {
        let (h_prev, off) = if t == 0 {
            (h0, 0)
        } else {
            (&output, (t - 1) * bh)
        };
        // mode 0: the cell's gradient only; 1: the last step also gets grad_h_n; 2: the
        // gradient carried from step t + 1 (z * grad in dh, d_gh @ W_hh in mm).
        let (mode, extra) = match (t + 1 == seq, g_hn) {
            (true, Some(g)) => (1, g),
            (true, None) => (0, g_out),
            (false, _) => (2, &mm),
        };
        let p = Params::u(&[
            u32_of(name, "batch * hidden", bh)?,
            u32_of(name, "hidden", hd)?,
            u32_of(name, "step", t)?,
            u32_of(name, "offset", off)?,
            u32_of(name, "batch", batch)?,
            mode,
        ]);
        be.launch(
            name,
            k(Family::Gru, "gate_backward"),
            elems(name, bh)?,
            p,
            &[&trace, h_prev, g_out, extra],
            &[&d_gi, &d_gh, &dh],
        )?;
        matmul_at(
            be,
            name,
            (&d_gh, t * batch * 3 * hd, false),
            (w_hh, 0, false),
            &mm,
            (batch, hd, 3 * hd),
        )?;
    }
    let grad_h0 = binary_forward(be, name, BinaryOp::Add, &[&dh, &mm])?;
    let grad_x = be.alloc(name, x.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gi, 0, false),
        (w_ih, 0, false),
        &grad_x,
        (rows, input, 3 * hd),
    )?;
    let grad_w_ih = be.alloc(name, w_ih.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gi, 0, true),
        (x, 0, false),
        &grad_w_ih,
        (3 * hd, input, rows),
    )?;
    let first = be.alloc(name, w_hh.shape(), DType::F32)?;
    matmul_at(
        be,
        name,
        (&d_gh, 0, true),
        (h0, 0, false),
        &first,
        (3 * hd, hd, batch),
    )?;
    let grad_w_hh = if seq > 1 {
        let rest = be.alloc(name, w_hh.shape(), DType::F32)?;
        matmul_at(
            be,
            name,
            (&d_gh, batch * 3 * hd, true),
            (&output, 0, false),
            &rest,
            (3 * hd, hd, (seq - 1) * batch),
        )?;
        binary_forward(be, name, BinaryOp::Add, &[&first, &rest])?
    } else {
        first
    };
    let grad_b_ih = sum_rows(be, name, &d_gi, &[3 * hd])?;
    let grad_b_hh = sum_rows(be, name, &d_gh, &[3 * hd])?;
    Ok(vec![
        grad_x, grad_h0, grad_w_ih, grad_w_hh, grad_b_ih, grad_b_hh,
    ])
}

// --- svd_lowrank ---------------------------------------------------------------------------

/// Downloads a product with `a`, refusing non-finite values (as the wgpu backend).
fn download_finite(be: &CudaBackend, name: &'static str, t: &Tensor) -> Result<Vec<f32>> {
    let v = be.download_blocking(t)?.as_f32()?.to_vec();
    if let Some((index, &value)) = v.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NonFinite {
            op: name,
            tensor: "a (a product with a)".into(),
            index,
            value: f64::from(value),
        });
    }
    Ok(v)
}

fn with(lead: &[usize], tail: &[usize]) -> Vec<usize> {
    lead.iter().chain(tail).copied().collect()
}

/// Downloads `y [..., rows, cols]`, orthonormalizes the columns of each matrix, uploads.
fn orth(
    be: &CudaBackend,
    name: &'static str,
    y: &Tensor,
    rows: usize,
    cols: usize,
) -> Result<Tensor> {
    let mut v = download_finite(be, name, y)?;
    for mat in v.chunks_exact_mut(rows * cols) {
        orthonormalize_columns(mat, rows, cols)?;
    }
    be.upload(&Tensor::from_f32(y.shape(), v)?)
}

/// svd_lowrank: the products with `a` are cuBLAS SGEMMs; the tall-skinny orthonormalizations,
/// the small SVD and the sign fix run on the host with the CPU reference's own helpers, on the
/// same `omega` (same seed), as the wgpu backend does.
fn svd_lowrank(
    be: &CudaBackend,
    name: &'static str,
    rank: usize,
    power_iters: usize,
    seed: u64,
    a: &Tensor,
) -> Result<Vec<Tensor>> {
    let shape = a.shape();
    shapes::min_rank(name, "a", shape, 2)?;
    shapes::non_empty(name, "a", shape)?;
    if rank == 0 {
        return Err(Error::BadAttr {
            op: name,
            attr: "rank",
            value: "0".into(),
            why: "must be >= 1".into(),
        });
    }
    let (lead, mn) = shape.split_at(shape.len() - 2);
    let (m, n) = (mn[0], mn[1]);
    let q = rank.min(m).min(n);
    let omega = be.upload(&Tensor::from_f32(
        &[n, q],
        gaussian_omega::<f32>(seed, n, q),
    )?)?;
    let mut qm = orth(be, name, &matmul(be, name, a, &omega, false, false)?, m, q)?;
    for _ in 0..power_iters {
        let z = orth(be, name, &matmul(be, name, a, &qm, true, false)?, n, q)?;
        qm = orth(be, name, &matmul(be, name, a, &z, false, false)?, m, q)?;
    }
    let b = download_finite(be, name, &matmul(be, name, &qm, a, true, false)?)?;
    let (mut ub, mut s, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for bm in b.chunks_exact(q * n) {
        let (u1, s1, v1) = jacobi_svd(bm, q, n)?;
        ub.extend(u1);
        s.extend(s1);
        v.extend(v1);
    }
    let ub = be.upload(&Tensor::from_f32(&with(lead, &[q, q]), ub)?)?;
    let mut u = download_finite(be, name, &matmul(be, name, &qm, &ub, false, false)?)?;
    for (um, vm) in u.chunks_exact_mut(m * q).zip(v.chunks_exact_mut(n * q)) {
        fix_signs(um, q, vm);
    }
    Ok(vec![
        be.upload(&Tensor::from_f32(&with(lead, &[m, q]), u)?)?,
        be.upload(&Tensor::from_f32(&with(lead, &[q]), s)?)?,
        be.upload(&Tensor::from_f32(&with(lead, &[n, q]), v)?)?,
    ])
}
