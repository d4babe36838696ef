//! The kernels' named parameter blocks, declared once. Each declaration gives a Rust struct with
//! named fields that converts into the 80-byte per-launch block (`Params`: twelve u32, then
//! eight f32), and the generator (`crate::contract`) emits the same struct, with an accessor that
//! reads it out of the raw block, into the WGSL prelude and the CUDA header. Kernels read
//! `p.rows`, never a slot: WGSL entry points start with `let p = <block>_params();`, CUDA kernels
//! are declared `KERNEL(entry, Block)` and get the block as `p`.
//!
//! The u32 fields fill `u[0..]` and the f32 fields `f[0..]` in declaration order; the binary
//! layout of the launch does not change. `entries` lists the kernels (WGSL entry points and
//! CUDA `KERNEL`s of the same name) that read the block; a test checks both backends' sources
//! against it.

use crate::device::Params;

/// One declared block, as the generator and the source checks see it.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    /// Type name in Rust, WGSL and CUDA.
    pub name: &'static str,
    /// Stem of the WGSL accessor (`<accessor>_params()`).
    pub accessor: &'static str,
    pub doc: &'static str,
    /// The kernels that read it.
    pub entries: &'static [&'static str],
    /// u32 fields, filling `u[0..]` in order.
    pub u: &'static [&'static str],
    /// f32 fields, filling `f[0..]` in order.
    pub f: &'static [&'static str],
}

macro_rules! kernel_params {
    ($(
        $(#[doc = $doc:literal])+
        $name:ident ($accessor:literal) for [$($entry:literal),+ $(,)?] {
            u32: [$($u:ident),* $(,)?],
            f32: [$($f:ident),* $(,)?] $(,)?
        }
    )+) => {
        $(
            $(#[doc = $doc])+
            #[derive(Debug, Clone, Copy, Default, PartialEq)]
            pub struct $name {
                $(pub $u: u32,)*
                $(pub $f: f32,)*
            }

            impl $name {
                /// The u32 fields' names, in slot order.
                pub const U: &'static [&'static str] = &[$(stringify!($u)),*];
                /// The f32 fields' names, in slot order.
                pub const F: &'static [&'static str] = &[$(stringify!($f)),*];
            }

            const _: () = assert!(
                $name::U.len() <= crate::device::PARAM_U32S
                    && $name::F.len() <= crate::device::PARAM_F32S
            );

            impl From<$name> for Params {
                fn from(b: $name) -> Params {
                    let mut p = Params::default();
                    let u: &[u32] = &[$(b.$u),*];
                    for (d, s) in p.u.iter_mut().zip(u) {
                        *d = *s;
                    }
                    let f: &[f32] = &[$(b.$f),*];
                    for (d, s) in p.f.iter_mut().zip(f) {
                        *d = *s;
                    }
                    p
                }
            }
        )+

        /// Every declared block.
        pub const BLOCKS: &[Block] = &[$(Block {
            name: stringify!($name),
            accessor: $accessor,
            doc: concat!($($doc),+),
            entries: &[$($entry),+],
            u: $name::U,
            f: $name::F,
        }),+];
    };
}

kernel_params! {
    /// Elementwise work over `n` elements (swiglu; on CUDA, linear's activation gradient).
    ElemsParams("elems") for ["swiglu_forward", "swiglu_backward", "linear_grad_pre"] {
        u32: [n],
        f32: [],
    }
    /// `matmul_swiglu`'s gate over its product's halves: `y [rows, 2 half]` (gate columns, then
    /// up columns) -> `[rows, half]`, `n = rows * half` outputs.
    GluParams("glu") for ["glu_forward", "glu_backward"] {
        u32: [n, half],
        f32: [],
    }
    /// Unary ops, scale (by `factor`) and gelu over `n` elements.
    UnaryParams("unary") for ["unary_forward", "unary_backward"] {
        u32: [n],
        f32: [factor],
    }
    /// Binary ops: `a [n]` with `b [nb]` repeating every `nb`; `start` is the index of the
    /// chunk's first element in the whole of `a` (where `b` is bound whole).
    BinaryParams("binary") for ["binary_forward", "binary_backward_a", "binary_backward_b"] {
        u32: [n, nb, start],
        f32: [],
    }
    /// Column sums of `x`, `n` elements viewed as rows of `cols`.
    SumRowsParams("sum_rows") for ["sum_rows"] {
        u32: [n, cols],
        f32: [],
    }
    /// CUDA's linear epilogue: the bias (`cols`) added to and the activation applied to each of
    /// `n` outputs.
    EpilogueParams("epilogue") for ["linear_epilogue"] {
        u32: [n, cols],
        f32: [],
    }
    /// A batch of products `op(a) [m, k] @ op(b) [k, n]`: operands at element offsets with batch
    /// strides (0: shared); `first_batch` is this dispatch's first batch. Output `(batch, r, c)`
    /// goes to `batch * c_batch + c_offset + r * ldc + c`, and reads bias `bias_offset + c`
    /// (`c_batch = m * n`, `ldc = n`, offsets 0, unless the product is a block of a larger one,
    /// as when a weight is split over bindings).
    MatmulParams("matmul") for ["matmul", "matmul_vec4", "matmul_rows", "matmul_wide"] {
        u32: [m, n, k, stride_a, stride_b, first_batch, offset_a, offset_b, ldc, c_offset, c_batch, bias_offset],
        f32: [],
    }
    /// Row kernels over `rows` rows of `cols`.
    RowsParams("rows") for ["reduce_forward", "reduce_backward", "argmax"] {
        u32: [rows, cols],
        f32: [],
    }
    /// Next-token sampling over `rows` rows of `cols` logits.
    SampleParams("sample") for ["sample"] {
        u32: [rows, cols, top_k],
        f32: [temperature, top_p],
    }
    /// softmax over `rows` rows of `cols`; the causal mask sees each `[seq, cols]` block.
    SoftmaxParams("softmax") for ["softmax_forward", "softmax_backward"] {
        u32: [rows, cols, seq],
        f32: [],
    }
    /// layer_norm and rms_norm over `rows` rows of `cols`.
    NormParams("norm") for ["norm_forward", "norm_backward_rows", "norm_backward_cols"] {
        u32: [rows, cols],
        f32: [eps],
    }
    /// transpose of the last two dims (`rows`, `cols`) of `n` elements.
    TransposeParams("transpose") for ["transpose"] {
        u32: [n, rows, cols],
        f32: [],
    }
    /// concat along the last dim: `n` output elements, rows of `width_a` then `width_b`.
    ConcatParams("concat") for ["concat", "concat_backward"] {
        u32: [n, width_a, width_b],
        f32: [],
    }
    /// kv_write: `rows` positions of `width` elements per head written at `pos` of a cache of
    /// `cap` positions; `n` threads (the rows' elements in place, the cache's otherwise).
    KvWriteParams("kv_write") for ["kv_write", "kv_write_copy", "kv_write_backward"] {
        u32: [n, cap, rows, width, pos],
        f32: [],
    }
    /// Embedding lookup: `n = tokens * dim` outputs from a `[vocab, dim]` table, of which the
    /// binding holds rows `first..first + rows` (all of them unless the table is split over
    /// bindings: each launch writes the outputs whose ids it holds, the first one those of
    /// ids out of range).
    EmbeddingParams("embedding") for ["embedding"] {
        u32: [n, dim, vocab, first, rows],
        f32: [],
    }
    /// Weight-dtype decoding: `n` outputs of the dtype coded `dtype` (`WEIGHT_*`); for
    /// `dequantize_rows`, rows of `dim` picked by ids from a `[vocab, dim]` table whose binding
    /// holds rows `first..first + rows` (as `EmbeddingParams`).
    DequantizeParams("dequantize") for ["dequantize", "dequantize_rows"] {
        u32: [n, dtype, dim, vocab, first, rows],
        f32: [],
    }
    /// CUDA's half products: `n` elements of the weight dtype coded `source` (`WEIGHT_*`), or
    /// f32 (`F32_SOURCE`), rounded to bf16 (`bf16 = 1`) or f16, two to a 32-bit word.
    ToHalfParams("to_half") for ["to_half"] {
        u32: [n, source, bf16],
        f32: [],
    }
    /// Decode's product with a packed weight: `rows` rows of `k` against `n` packed rows of
    /// dtype `dtype` (`WEIGHT_*`); `bias = 1` adds a bias. The outputs go to columns
    /// `col0..col0 + n` of rows of `ldo` (as `MatmulParams`' `ldc`); `accum = 1` adds them to
    /// what is there (`matmul_add` into its residual). `glu` (0: none) is `matmul_swiglu`'s
    /// first up row: output `j` is then `silu(row j . x) * (row j + glu . x)`.
    MatvecParams("matvec") for ["matvec_each", "matvec_stream"] {
        u32: [n, dtype, k, rows, bias, ldo, col0, accum, glu],
        f32: [],
    }
    /// Embedding gradient: `n = vocab * dim` outputs summed over `tokens`.
    EmbeddingGradParams("embedding_grad") for ["embedding_backward"] {
        u32: [n, dim, tokens],
        f32: [],
    }
    /// One AdamW step over `n` parameters, with the CPU's coefficients
    /// (`kernels_core::cpu::optim::adamw_constants`): `decay = 1 - lr * weight_decay`,
    /// `step_size = lr / (1 - beta1^step)`, `bias_correction2_sqrt = sqrt(1 - beta2^step)`.
    AdamwParams("adamw") for ["adamw_step"] {
        u32: [n],
        f32: [beta1, beta2, eps, decay, step_size, bias_correction2_sqrt],
    }
    /// One SGD step over `n` parameters (`nesterov`: 0 or 1).
    SgdParams("sgd") for ["sgd_step"] {
        u32: [n, nesterov],
        f32: [lr, momentum, weight_decay],
    }
    /// `scale * sum` of `n` partial sums (one workgroup).
    SumScaleParams("sum_scale") for ["sum_scale"] {
        u32: [n],
        f32: [scale],
    }
    /// cross_entropy over `rows` rows of `classes` logits; the backward scales by `scale`.
    CrossEntropyParams("cross_entropy") for ["ce_rows", "ce_backward"] {
        u32: [rows, classes],
        f32: [scale],
    }
    /// mse's partial sums over `n` elements, `chunk` per workgroup.
    MseChunksParams("mse_chunks") for ["mse_chunks"] {
        u32: [n, chunk],
        f32: [],
    }
    /// mse's gradient over `n` elements (`scale = 2 / n`).
    MseGradParams("mse_grad") for ["mse_backward"] {
        u32: [n],
        f32: [scale],
    }
    /// rope: `pairs = rows * half` rotated pairs, rows of `seq` positions from `offset`.
    RopeParams("rope") for ["rope"] {
        u32: [pairs, seq, half, offset],
        f32: [],
    }
    /// rope_kv_write: `pairs = batch * (q_heads + 2 kv_heads) * seq * half` pairs of the fused
    /// `qkv` rows, at positions `offset..offset + seq`, into caches of `cap` positions.
    RopeKvWriteParams("rope_kv_write") for ["rope_kv_write", "rope_kv_write_backward"] {
        u32: [pairs, seq, half, offset, q_heads, kv_heads, cap],
        f32: [],
    }
    /// attention: the geometry (`group = heads_q / heads_kv`; `seq_kv` keys per head in memory,
    /// of which the first `kv_len` are read), the work items (rows, keys or blocks); `scale`.
    AttentionParams("attention") for ["attn_forward", "attn_decode", "attn_dq", "attn_dkv"] {
        u32: [seq_q, seq_kv, head_dim, head_dim_v, heads_q, group, items, kv_len],
        f32: [scale],
    }
    /// A GRU step's fused gates for `members` GRUs at once (1 but for `gru_ensemble`):
    /// `batch_hidden = batch * hidden` threads per member at `step` of `seq`; `flags` bit 0
    /// writes h_n, bit 1 the gate trace.
    GruForwardParams("gru_forward") for ["gate_forward"] {
        u32: [batch_hidden, hidden, step, batch, flags, seq, members],
        f32: [],
    }
    /// A GRU step's gate gradients for `members` GRUs at once; h_prev is h0 at step 0, else
    /// the output at `step - 1` of `seq`; `mode` says where the incoming hidden-state gradient
    /// comes from (see the kernel).
    GruBackwardParams("gru_backward") for ["gate_backward"] {
        u32: [batch_hidden, hidden, step, seq, batch, mode, members],
        f32: [],
    }
    /// Orthonormalizes the columns of `batch` matrices `[rows, cols]`.
    OrthParams("orth") for ["orth_columns"] {
        u32: [batch, rows, cols],
        f32: [],
    }
    /// The Jacobi SVD of `batch` matrices `[q, n]`.
    JacobiParams("jacobi") for ["jacobi"] {
        u32: [batch, q, n],
        f32: [],
    }
    /// The sign fix of `columns = batch * q` columns of `u [m, q]` and `v [n, q]`.
    FixSignsParams("fix_signs") for ["fix_signs"] {
        u32: [columns, m, n, q],
        f32: [],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_fill_their_slots_in_order() {
        let p: Params = SampleParams {
            rows: 2,
            cols: 3,
            top_k: 4,
            temperature: 0.5,
            top_p: 0.9,
        }
        .into();
        assert_eq!(p.u, [2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p.f, [0.5, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn names_and_entries_are_unique() {
        let mut names: Vec<&str> = BLOCKS.iter().flat_map(|b| [b.name, b.accessor]).collect();
        let mut entries: Vec<&str> = BLOCKS.iter().flat_map(|b| b.entries.to_vec()).collect();
        for v in [&mut names, &mut entries] {
            let len = v.len();
            v.sort();
            v.dedup();
            assert_eq!(v.len(), len, "{v:?}");
        }
        for b in BLOCKS {
            let mut fields: Vec<&str> = b.u.iter().chain(b.f).copied().collect();
            let len = fields.len();
            fields.sort();
            fields.dedup();
            assert_eq!(fields.len(), len, "{}", b.name);
        }
    }
}
