//! Op dispatch for the wgpu backend: one generic launcher per family, an exhaustive `match` over
//! the op vocabulary (a new op is a compile error here until handled).

use kernels_core::op::{Activation, BinaryOp, Direction, GeluApprox, Op, ReduceOp, UnaryOp};
use kernels_core::{DType, Error, Result, Tensor};

use crate::shapes;
use crate::wgpu_backend::{Family, Params, WgpuBackend};

mod attention;
mod gru;
mod loss;
mod rope;
mod svd;

pub use svd::MAX_Q as SVD_MAX_Q;

const WG: u64 = 256;

fn u32_of(op: &'static str, what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: format!("{op}: {what}"),
        value: v as u64,
        limit: u64::from(u32::MAX),
    })
}

fn arg<'a>(args: &[&'a Tensor], i: usize) -> &'a Tensor {
    // Arity was checked against the spec before any family runner indexes.
    args[i]
}

/// Runs one op (arity, dtypes and shapes checked first).
pub(crate) fn run(
    be: &WgpuBackend,
    op: &Op,
    dir: Direction,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let dtypes: Vec<DType> = args.iter().map(|t| t.dtype()).collect();
    op.check_signature(dir, &dtypes)?;
    use Direction::{Backward as B, Forward as F};
    let name = op.name();
    match (*op, dir) {
        (Op::Matmul { trans_a, trans_b }, F) => {
            let out = matmul(be, name, arg(args, 0), arg(args, 1), trans_a, trans_b)?;
            Ok(vec![out])
        }
        (Op::Matmul { trans_a, trans_b }, B) => matmul_backward(be, name, args, trans_a, trans_b),
        (Op::Linear { activation }, F) => Ok(vec![linear_forward(be, name, activation, args)?]),
        (Op::Linear { activation }, B) => linear_backward(be, name, activation, args),
        (Op::Binary(b), F) => Ok(vec![binary_forward(be, name, b, args)?]),
        (Op::Binary(b), B) => binary_backward(be, name, b, args),
        (Op::Scale { factor }, F) => Ok(vec![unary(be, name, 10, factor, args, false)?]),
        (Op::Scale { factor }, B) => Ok(vec![unary(be, name, 10, factor, args, true)?]),
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
            let out_shape = transposed_shape(x.shape());
            shapes::same(name, g.shape(), &out_shape)?;
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
            let p = Params::u(&[]).with_f(&[
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
        ) => Ok(vec![rope::rope(
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
        ) => Ok(vec![rope::rope_backward(
            be,
            name,
            theta,
            offset,
            interleaved,
            args,
        )?]),
        (Op::CrossEntropy, F) => Ok(vec![loss::cross_entropy_forward(be, name, args)?]),
        (Op::CrossEntropy, B) => Ok(vec![loss::cross_entropy_backward(be, name, args)?]),
        (Op::Mse, F) => Ok(vec![loss::mse_forward(be, name, args)?]),
        (Op::Mse, B) => loss::mse_backward(be, name, args),
        (Op::Attention { causal, scale }, F) => {
            Ok(vec![attention::forward(be, name, causal, scale, args)?])
        }
        (Op::Attention { causal, scale }, B) => attention::backward(be, name, causal, scale, args),
        (Op::GruCell, F) => Ok(vec![gru::cell_forward(be, name, args)?]),
        (Op::GruCell, B) => gru::backward(be, name, false, args),
        (Op::GruSequence, F) => gru::sequence_forward(be, name, args),
        (Op::GruSequence, B) => gru::backward(be, name, true, args),
        (
            Op::SvdLowrank {
                rank,
                power_iters,
                seed,
            },
            F,
        ) => svd::forward(be, name, rank, power_iters, seed, arg(args, 0)),
        // Non-differentiable ops: rejected by `check_args` above.
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

/// One thread per element over `n` elements.
fn grid_elems(be: &WgpuBackend, n: usize) -> Result<(u32, u32, u32)> {
    be.grid_1d((n as u64).div_ceil(WG))
}

/// One workgroup per row.
fn grid_rows(be: &WgpuBackend, rows: usize) -> Result<(u32, u32, u32)> {
    be.grid_1d(rows as u64)
}

/// Element ranges `(start, len)` covering `n` elements, each within one storage binding and
/// starting on the storage offset alignment (one range when the tensor fits).
fn elem_chunks(be: &WgpuBackend, n: usize) -> Vec<(usize, usize)> {
    let step = be.chunk_elems().max(1);
    (0..n.div_ceil(step))
        .map(|c| (c * step, step.min(n - c * step)))
        .collect()
}

/// Unary ops, scale and gelu, forward and backward: one thread per element, chunked over
/// tensors above the storage binding limit.
fn unary(
    be: &WgpuBackend,
    name: &'static str,
    code: u32,
    factor: f32,
    args: &[&Tensor],
    backward: bool,
) -> Result<Tensor> {
    let x = arg(args, 0);
    shapes::non_empty(name, "x", x.shape())?;
    let n = x.numel();
    u32_of(name, "elements", n)?;
    let consts = [("OP", f64::from(code))];
    let out = be.alloc(name, x.shape(), DType::F32)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
    }
    for (start, len) in elem_chunks(be, n) {
        let r = Some((start, len));
        let p = Params::u(&[u32_of(name, "elements", len)?]).with_f(&[factor]);
        if backward {
            let (y, g) = (arg(args, 1), arg(args, 2));
            be.launch_ranges(
                name,
                Family::Elementwise,
                "unary_backward",
                &consts,
                p,
                &[(x, r), (y, r), (g, r)],
                &[(&out, r)],
                grid_elems(be, len)?,
            )?;
        } else {
            be.launch_ranges(
                name,
                Family::Elementwise,
                "unary_forward",
                &consts,
                p,
                &[(x, r)],
                &[(&out, r)],
                grid_elems(be, len)?,
            )?;
        }
    }
    Ok(out)
}

fn bop_code(b: BinaryOp) -> f64 {
    match b {
        BinaryOp::Add => 0.0,
        BinaryOp::Sub => 1.0,
        BinaryOp::Mul => 2.0,
        BinaryOp::Div => 3.0,
    }
}

/// A binding's element range: `Some((start, len))`, or `None` for the whole tensor.
type ElemRange = Option<(usize, usize)>;

/// Binds `b` for the chunk `(start, len)` of `a`: the same chunk when `b` has `a`'s size,
/// else whole (it repeats every `nb`, and the kernel is told where the chunk starts).
fn b_chunk(
    name: &'static str,
    n: usize,
    nb: usize,
    (start, len): (usize, usize),
) -> Result<(ElemRange, [u32; 3])> {
    if nb == n {
        let l = u32_of(name, "elements", len)?;
        Ok((Some((start, len)), [l, l, 0]))
    } else {
        Ok((
            None,
            [
                u32_of(name, "elements", len)?,
                u32_of(name, "elements", nb)?,
                u32_of(name, "elements", start)?,
            ],
        ))
    }
}

fn binary_forward(
    be: &WgpuBackend,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (a, bt) = (arg(args, 0), arg(args, 1));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    let out = be.alloc(name, a.shape(), DType::F32)?;
    for chunk in elem_chunks(be, n) {
        let r = Some(chunk);
        let (rb, u) = b_chunk(name, n, nb, chunk)?;
        be.launch_ranges(
            name,
            Family::Elementwise,
            "binary_forward",
            &[("BOP", bop_code(b))],
            Params::u(&u),
            &[(a, r), (bt, rb)],
            &[(&out, r)],
            grid_elems(be, chunk.1)?,
        )?;
    }
    Ok(out)
}

fn binary_backward(
    be: &WgpuBackend,
    name: &'static str,
    b: BinaryOp,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (a, bt, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (n, nb) = shapes::broadcast_suffix(name, a.shape(), bt.shape())?;
    shapes::same(name, a.shape(), g.shape())?;
    let consts = [("BOP", bop_code(b))];
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    for chunk in elem_chunks(be, n) {
        let r = Some(chunk);
        let (rb, u) = b_chunk(name, n, nb, chunk)?;
        be.launch_ranges(
            name,
            Family::Elementwise,
            "binary_backward_a",
            &consts,
            Params::u(&u),
            &[(a, r), (bt, rb), (g, r)],
            &[(&ga, r)],
            grid_elems(be, chunk.1)?,
        )?;
    }
    let gb = be.alloc(name, bt.shape(), DType::F32)?;
    if nb == n {
        // No broadcast: grad_b is elementwise too, and chunks like grad_a.
        for chunk in elem_chunks(be, n) {
            let r = Some(chunk);
            let l = u32_of(name, "elements", chunk.1)?;
            be.launch_ranges(
                name,
                Family::Elementwise,
                "binary_backward_b",
                &consts,
                Params::u(&[l, l]),
                &[(a, r), (bt, r), (g, r)],
                &[(&gb, r)],
                grid_elems(be, chunk.1)?,
            )?;
        }
    } else {
        // A sum over the broadcast rows: needs `a` and `grad_out` whole.
        let p = Params::u(&[u32_of(name, "elements", n)?, u32_of(name, "elements", nb)?]);
        be.launch(
            name,
            Family::Elementwise,
            "binary_backward_b",
            &consts,
            p,
            &[a, bt, g],
            &[&gb],
            grid_elems(be, nb)?,
        )?;
    }
    Ok(vec![ga, gb])
}

/// Sums `x` viewed as `[rows, cols]` over rows into a tensor of `shape` (`cols` elements).
fn sum_rows(be: &WgpuBackend, name: &'static str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let cols: usize = shape.iter().product();
    let p = Params::u(&[
        u32_of(name, "elements", x.numel())?,
        u32_of(name, "elements", cols)?,
    ]);
    let out = be.alloc(name, shape, DType::F32)?;
    be.launch(
        name,
        Family::Elementwise,
        "sum_rows",
        &[],
        p,
        &[x],
        &[&out],
        grid_elems(be, cols)?,
    )?;
    Ok(out)
}

/// The matmul entry point: `matmul_vec4` when each operand's contiguous dim, batch stride and
/// offset are multiples of 4 (whole vec4 loads), else the scalar `matmul`.
fn matmul_entry(
    (m, n, k): (usize, usize, usize),
    trans_a: bool,
    trans_b: bool,
    strides: (usize, usize),
    offsets: (usize, usize),
) -> &'static str {
    let a_inner = if trans_a { m } else { k };
    let b_inner = if trans_b { k } else { n };
    let aligned = [a_inner, b_inner, strides.0, strides.1, offsets.0, offsets.1]
        .iter()
        .all(|v| v % 4 == 0);
    if aligned { "matmul_vec4" } else { "matmul" }
}

fn matmul(
    be: &WgpuBackend,
    name: &'static str,
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    let d = shapes::matmul(name, a.shape(), b.shape(), trans_a, trans_b)?;
    let out = be.alloc(name, &d.out_shape, DType::F32)?;
    launch_matmul(
        be,
        name,
        (a, 0, trans_a),
        (b, 0, trans_b),
        &out,
        (d.m, d.n, d.k),
        (d.a_step, d.b_step, d.batch),
    )?;
    Ok(out)
}

/// `out [m, n] = op(a) @ op(b)` for one matrix each, read from element offsets `off_a` and
/// `off_b` of larger buffers (one step of a sequence, say), written into `out`.
#[allow(clippy::too_many_arguments)]
fn matmul_at(
    be: &WgpuBackend,
    name: &'static str,
    (a, off_a, trans_a): (&Tensor, usize, bool),
    (b, off_b, trans_b): (&Tensor, usize, bool),
    out: &Tensor,
    (m, n, k): (usize, usize, usize),
) -> Result<()> {
    let fits =
        |t: &Tensor, off: usize, len: usize| off.checked_add(len).is_some_and(|e| e <= t.numel());
    if !fits(a, off_a, m * k) || !fits(b, off_b, k * n) || out.numel() != m * n {
        return Err(Error::bad_shape(
            name,
            "matmul operand",
            a.shape(),
            format!("[{m}, {k}] @ [{k}, {n}] at offsets {off_a}, {off_b} does not fit"),
        ));
    }
    launch_matmul(
        be,
        name,
        (a, off_a, trans_a),
        (b, off_b, trans_b),
        out,
        (m, n, k),
        (0, 0, 1),
    )
}

/// Elementwise work fused into a matmul (the `linear` op): a bias added and an activation
/// applied to each output, and/or each element of `a` scaled by the derivative of an activation
/// read from `gy` (laid out like `a`) as it is staged.
#[derive(Clone, Copy, Default)]
struct Fused<'t> {
    bias: Option<&'t Tensor>,
    act: Option<Activation>,
    a_dact: Option<(&'t Tensor, Activation)>,
}

/// Shader code of an activation (matmul.wgsl / elementwise.wgsl).
fn act_code(a: Activation) -> f64 {
    match a {
        Activation::None => 0.0,
        Activation::Relu => 1.0,
        Activation::Tanh => 2.0,
        Activation::Sigmoid => 3.0,
    }
}

/// The matmul family's one launcher: `batch` products `op(a) @ op(b)` into `out`, operands read
/// from element offsets with batch steps (0: shared), 64x64 output tiles per workgroup, batches
/// above the z limit in several dispatches, each told its first batch.
fn launch_matmul(
    be: &WgpuBackend,
    name: &'static str,
    (a, off_a, trans_a): (&Tensor, usize, bool),
    (b, off_b, trans_b): (&Tensor, usize, bool),
    out: &Tensor,
    (m, n, k): (usize, usize, usize),
    (step_a, step_b, batch): (usize, usize, usize),
) -> Result<()> {
    launch_matmul_fused(
        be,
        name,
        (a, off_a, trans_a),
        (b, off_b, trans_b),
        out,
        (m, n, k),
        (step_a, step_b, batch),
        Fused::default(),
    )
}

#[allow(clippy::too_many_arguments)]
fn launch_matmul_fused(
    be: &WgpuBackend,
    name: &'static str,
    (a, off_a, trans_a): (&Tensor, usize, bool),
    (b, off_b, trans_b): (&Tensor, usize, bool),
    out: &Tensor,
    (m, n, k): (usize, usize, usize),
    (step_a, step_b, batch): (usize, usize, usize),
    fused: Fused,
) -> Result<()> {
    let max = be.max_groups();
    // Few rows (a decode step): one thread per column; else 64x64 tiles.
    let (entry, gx, gy_tiles) = if m <= MATMUL_ROWS_MAX {
        let (x, y, _) = be.grid_1d(n.div_ceil(64) as u64)?;
        ("matmul_rows", x, y)
    } else {
        let gx = u32_of(name, "tiles", n.div_ceil(64))?;
        let gy_tiles = u32_of(name, "tiles", m.div_ceil(64))?;
        if gx > max || gy_tiles > max {
            return Err(Error::LimitExceeded {
                what: format!("{name}: 64x64 tiles per grid dimension"),
                value: u64::from(gx.max(gy_tiles)),
                limit: u64::from(max),
            });
        }
        let entry = matmul_entry(
            (m, n, k),
            trans_a,
            trans_b,
            (step_a, step_b),
            (off_a, off_b),
        );
        (entry, gx, gy_tiles)
    };
    let consts = [
        ("TA", if trans_a { 1.0 } else { 0.0 }),
        ("TB", if trans_b { 1.0 } else { 0.0 }),
        ("BIAS", if fused.bias.is_some() { 1.0 } else { 0.0 }),
        ("ACT", fused.act.map_or(0.0, act_code)),
        ("A_DACT", fused.a_dact.map_or(0.0, |(_, d)| act_code(d))),
    ];
    // Unused slots get `a` (bound, never read).
    let bias = fused.bias.unwrap_or(a);
    let gy = fused.a_dact.map_or(a, |(t, _)| t);
    let mut first = 0usize;
    while first < batch {
        let count = (batch - first).min(max as usize);
        let p = Params::u(&[
            u32_of(name, "m", m)?,
            u32_of(name, "n", n)?,
            u32_of(name, "k", k)?,
            u32_of(name, "batch stride", step_a)?,
            u32_of(name, "batch stride", step_b)?,
            u32_of(name, "batch", first)?,
            u32_of(name, "offset", off_a)?,
            u32_of(name, "offset", off_b)?,
        ]);
        be.launch(
            name,
            Family::Matmul,
            entry,
            &consts,
            p,
            &[a, b, bias, gy],
            &[out],
            (gx, gy_tiles, count as u32),
        )?;
        first += count;
    }
    Ok(())
}

/// `linear` forward: one matmul `x [rows, in] @ weight^T` with the bias and activation in its
/// epilogue.
fn linear_forward(
    be: &WgpuBackend,
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
    launch_matmul_fused(
        be,
        name,
        (x, 0, false),
        (w, 0, true),
        &out,
        (rows, out_f, in_f),
        (0, 0, 1),
        Fused {
            bias: Some(b),
            act: Some(activation),
            a_dact: None,
        },
    )?;
    Ok(out)
}

/// `linear` backward in three dispatches, `g' = g * act'(out)` applied while loading and never
/// stored: `grad_x = g' @ weight`, `grad_weight = g'^T @ x`, `grad_bias` = column sums of `g'`.
fn linear_backward(
    be: &WgpuBackend,
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
    let a_dact = match activation {
        Activation::None => None,
        Activation::Relu | Activation::Tanh | Activation::Sigmoid => Some((y, activation)),
    };
    let fused = Fused {
        bias: None,
        act: None,
        a_dact,
    };
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    launch_matmul_fused(
        be,
        name,
        (g, 0, false),
        (w, 0, false),
        &gx,
        (rows, in_f, out_f),
        (0, 0, 1),
        fused,
    )?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    launch_matmul_fused(
        be,
        name,
        (g, 0, true),
        (x, 0, false),
        &gw,
        (out_f, in_f, rows),
        (0, 0, 1),
        fused,
    )?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let p = Params::u(&[
        u32_of(name, "elements", g.numel())?,
        u32_of(name, "elements", out_f)?,
    ]);
    be.launch(
        name,
        Family::Elementwise,
        "sum_rows",
        &[("DACT", a_dact.map_or(0.0, |(_, d)| act_code(d)))],
        p,
        &[g, y],
        &[&gb],
        grid_elems(be, out_f)?,
    )?;
    Ok(vec![gx, gw, gb])
}

/// Products with at most this many rows take `matmul_rows` (`SMALL_M` in the shader).
const MATMUL_ROWS_MAX: usize = 8;

/// The gradient of a matmul operand: `mm(x, y, tx, ty)`, summed over the batch when the operand
/// was a shared 2-D matrix.
#[allow(clippy::too_many_arguments)]
fn grad_operand(
    be: &WgpuBackend,
    name: &'static str,
    x: &Tensor,
    y: &Tensor,
    tx: bool,
    ty: bool,
    target: &[usize],
) -> Result<Tensor> {
    let full = matmul(be, name, x, y, tx, ty)?;
    if full.shape() == target {
        return Ok(full);
    }
    sum_rows(be, name, &full, target)
}

fn matmul_backward(
    be: &WgpuBackend,
    name: &'static str,
    args: &[&Tensor],
    ta: bool,
    tb: bool,
) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let d = shapes::matmul(name, a.shape(), b.shape(), ta, tb)?;
    shapes::same(name, g.shape(), &d.out_shape)?;
    // Gradients of C = op(A) op(B) expressed as matmuls with transpose flags, so no transposed
    // copy is ever materialized.
    let (ga, gb) = match (ta, tb) {
        (false, false) => (
            grad_operand(be, name, g, b, false, true, a.shape())?,
            grad_operand(be, name, a, g, true, false, b.shape())?,
        ),
        (true, false) => (
            grad_operand(be, name, b, g, false, true, a.shape())?,
            grad_operand(be, name, a, g, false, false, b.shape())?,
        ),
        (false, true) => (
            grad_operand(be, name, g, b, false, false, a.shape())?,
            grad_operand(be, name, g, a, true, false, b.shape())?,
        ),
        (true, true) => (
            grad_operand(be, name, b, g, true, true, a.shape())?,
            grad_operand(be, name, g, a, true, true, b.shape())?,
        ),
    };
    Ok(vec![ga, gb])
}

fn reduce_code(r: ReduceOp) -> f64 {
    match r {
        ReduceOp::Sum => 0.0,
        ReduceOp::Mean => 1.0,
        ReduceOp::Max => 2.0,
    }
}

fn reduce(
    be: &WgpuBackend,
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
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]);
    let consts = [("OP", reduce_code(r))];
    if backward {
        let g = arg(args, 2);
        shapes::same(name, g.shape(), out_shape)?;
        let gx = be.alloc(name, x.shape(), DType::F32)?;
        be.launch(
            name,
            Family::Reduce,
            "reduce_backward",
            &consts,
            p,
            &[x, x, g],
            &[&gx],
            grid_rows(be, rows)?,
        )?;
        return Ok(gx);
    }
    let out = be.alloc(name, out_shape, DType::F32)?;
    be.launch(
        name,
        Family::Reduce,
        "reduce_forward",
        &consts,
        p,
        &[x],
        &[&out],
        grid_rows(be, rows)?,
    )?;
    Ok(out)
}

fn argmax(be: &WgpuBackend, name: &'static str, x: &Tensor) -> Result<Tensor> {
    shapes::min_rank(name, "x", x.shape(), 1)?;
    shapes::non_empty(name, "x", x.shape())?;
    let (rows, n) = shapes::rows_last(x.shape());
    let out = be.alloc(name, &x.shape()[..x.rank() - 1], DType::I32)?;
    let p = Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]);
    // The i32 output sits in the second read-write slot; the first gets a scratch buffer.
    let scratch = be.alloc(name, &[1], DType::F32)?;
    be.launch(
        name,
        Family::Reduce,
        "argmax",
        &[],
        p,
        &[x],
        &[&scratch, &out],
        grid_rows(be, rows)?,
    )?;
    Ok(out)
}

/// Next-token sampling, one workgroup per row (see kernels-core's `cpu::sample`). The uniforms
/// are not range-checked on the device: callers draw them from `Rng::uniform`.
fn sample(
    be: &WgpuBackend,
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
    let scratch = be.alloc(name, &[1], DType::F32)?;
    be.launch(
        name,
        Family::Reduce,
        "sample",
        &[],
        p,
        &[logits, uniform],
        &[&scratch, &out],
        grid_rows(be, rows)?,
    )?;
    Ok(out)
}

fn softmax(
    be: &WgpuBackend,
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
    let p = Params::u(&[
        u32_of(name, "rows", rows)?,
        u32_of(name, "row length", t)?,
        u32_of(name, "rows", s)?,
    ]);
    let consts = [
        ("LOG", if log { 1.0 } else { 0.0 }),
        ("CAUSAL", if causal { 1.0 } else { 0.0 }),
    ];
    let out = be.alloc(name, x.shape(), DType::F32)?;
    if backward {
        let (y, g) = (arg(args, 1), arg(args, 2));
        shapes::same(name, x.shape(), y.shape())?;
        shapes::same(name, x.shape(), g.shape())?;
        be.launch(
            name,
            Family::Softmax,
            "softmax_backward",
            &consts,
            p,
            &[x, y, g],
            &[&out],
            grid_rows(be, rows)?,
        )?;
    } else {
        be.launch(
            name,
            Family::Softmax,
            "softmax_forward",
            &consts,
            p,
            &[x],
            &[&out],
            grid_rows(be, rows)?,
        )?;
    }
    Ok(out)
}

fn norm_forward(
    be: &WgpuBackend,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Tensor> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    let (rows, n) = if rms {
        shapes::norm(name, x.shape(), &[("weight", w.shape())])?
    } else {
        shapes::norm(
            name,
            x.shape(),
            &[("weight", w.shape()), ("bias", arg(args, 2).shape())],
        )?
    };
    let p =
        Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]).with_f(&[eps]);
    let out = be.alloc(name, x.shape(), DType::F32)?;
    let ins: Vec<&Tensor> = if rms {
        vec![x, w]
    } else {
        vec![x, w, arg(args, 2)]
    };
    be.launch(
        name,
        Family::Norm,
        "norm_forward",
        &[("RMS", if rms { 1.0 } else { 0.0 })],
        p,
        &ins,
        &[&out],
        grid_rows(be, rows)?,
    )?;
    Ok(out)
}

fn norm_backward(
    be: &WgpuBackend,
    name: &'static str,
    rms: bool,
    eps: f32,
    args: &[&Tensor],
) -> Result<Vec<Tensor>> {
    let (x, w) = (arg(args, 0), arg(args, 1));
    let g = if rms { arg(args, 3) } else { arg(args, 4) };
    let (rows, n) = if rms {
        shapes::norm(name, x.shape(), &[("weight", w.shape())])?
    } else {
        shapes::norm(
            name,
            x.shape(),
            &[("weight", w.shape()), ("bias", arg(args, 2).shape())],
        )?
    };
    shapes::same(name, g.shape(), x.shape())?;
    let p =
        Params::u(&[u32_of(name, "rows", rows)?, u32_of(name, "row length", n)?]).with_f(&[eps]);
    let consts = [("RMS", if rms { 1.0 } else { 0.0 })];
    let gx = be.alloc(name, x.shape(), DType::F32)?;
    let stats = be.alloc(name, &[rows, 2], DType::F32)?;
    be.launch(
        name,
        Family::Norm,
        "norm_backward_rows",
        &consts,
        p,
        &[x, w, g],
        &[&gx, &stats],
        grid_rows(be, rows)?,
    )?;
    let gw = be.alloc(name, &[n], DType::F32)?;
    let mut outs = vec![gx];
    if rms {
        be.launch(
            name,
            Family::Norm,
            "norm_backward_cols",
            &consts,
            p,
            &[x, g, &stats],
            &[&gw],
            grid_elems(be, n)?,
        )?;
        outs.push(gw);
    } else {
        let gb = be.alloc(name, &[n], DType::F32)?;
        be.launch(
            name,
            Family::Norm,
            "norm_backward_cols",
            &consts,
            p,
            &[x, g, &stats],
            &[&gw, &gb],
            grid_elems(be, n)?,
        )?;
        outs.push(gw);
        outs.push(gb);
    }
    Ok(outs)
}

fn transposed_shape(s: &[usize]) -> Vec<usize> {
    let mut out = s.to_vec();
    let r = out.len();
    if r >= 2 {
        out.swap(r - 1, r - 2);
    }
    out
}

fn transpose(be: &WgpuBackend, name: &'static str, x: &Tensor) -> Result<Tensor> {
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
        Family::Layout,
        "transpose",
        &[],
        p,
        &[x],
        &[&out],
        grid_elems(be, n)?,
    )?;
    Ok(out)
}

fn concat(be: &WgpuBackend, name: &'static str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (_, m, k, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "width", m)?,
        u32_of(name, "width", k)?,
    ]);
    be.launch(
        name,
        Family::Layout,
        "concat",
        &[],
        p,
        &[a, b],
        &[&out],
        grid_elems(be, n)?,
    )?;
    Ok(out)
}

fn concat_backward(be: &WgpuBackend, name: &'static str, args: &[&Tensor]) -> Result<Vec<Tensor>> {
    let (a, b, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    let (_, m, k, out_shape) = shapes::concat(name, a.shape(), b.shape())?;
    shapes::same(name, g.shape(), &out_shape)?;
    let ga = be.alloc(name, a.shape(), DType::F32)?;
    let gb = be.alloc(name, b.shape(), DType::F32)?;
    let n = g.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "width", m)?,
        u32_of(name, "width", k)?,
    ]);
    be.launch(
        name,
        Family::Layout,
        "concat_backward",
        &[],
        p,
        &[g],
        &[&ga, &gb],
        grid_elems(be, n)?,
    )?;
    Ok(vec![ga, gb])
}

/// Checks embedding ids against the vocabulary from the host copy kept at upload (ids made
/// on the device are clamped by the kernel instead: out-of-range rows read as zeros).
fn check_ids(be: &WgpuBackend, name: &'static str, ids: &Tensor, vocab: usize) -> Result<()> {
    let buf = be.buffer_of(name, ids)?;
    if let Some(host) = buf.host_ints() {
        for &id in host.iter() {
            if id < 0 || id as u64 >= vocab as u64 {
                return Err(Error::IndexOutOfRange {
                    op: name,
                    tensor: "ids".into(),
                    index: id,
                    bound: vocab,
                });
            }
        }
    }
    Ok(())
}

fn embedding(be: &WgpuBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w) = (arg(args, 0), arg(args, 1));
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
    check_ids(be, name, ids, vocab)?;
    let mut out_shape = ids.shape().to_vec();
    out_shape.push(d);
    let out = be.alloc(name, &out_shape, DType::F32)?;
    let n = out.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "dim", d)?,
        u32_of(name, "vocab", vocab)?,
    ]);
    // ids go to the fourth read-only slot (declared i32 in the shader).
    be.launch(
        name,
        Family::Layout,
        "embedding",
        &[],
        p,
        &[w, w, w, ids],
        &[&out],
        grid_elems(be, n)?,
    )?;
    Ok(out)
}

fn embedding_backward(be: &WgpuBackend, name: &'static str, args: &[&Tensor]) -> Result<Tensor> {
    let (ids, w, g) = (arg(args, 0), arg(args, 1), arg(args, 3));
    if w.rank() != 2 {
        return Err(Error::bad_shape(
            name,
            "weight",
            w.shape(),
            "expected [vocab, dim]",
        ));
    }
    shapes::non_empty(name, "ids", ids.shape())?;
    let (vocab, d) = (w.shape()[0], w.shape()[1]);
    let mut out_shape = ids.shape().to_vec();
    out_shape.push(d);
    shapes::same(name, g.shape(), &out_shape)?;
    check_ids(be, name, ids, vocab)?;
    let gw = be.alloc(name, w.shape(), DType::F32)?;
    let n = gw.numel();
    let p = Params::u(&[
        u32_of(name, "elements", n)?,
        u32_of(name, "dim", d)?,
        u32_of(name, "tokens", ids.numel())?,
    ]);
    be.launch(
        name,
        Family::Layout,
        "embedding_backward",
        &[],
        p,
        &[g, g, g, ids],
        &[&gw],
        grid_elems(be, n)?,
    )?;
    Ok(gw)
}

fn optim(
    be: &WgpuBackend,
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
        Family::Optim,
        entry,
        &[],
        p,
        args,
        &out_refs,
        grid_elems(be, n)?,
    )?;
    Ok(outs)
}
