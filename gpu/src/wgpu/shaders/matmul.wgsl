// Batched matmul out[z] = op(a[z]) @ op(b[z]), op = optional transpose (TA, TB) read through the
// index math, never materialized. A 64x64 output tile per workgroup of 16x16 threads, staged
// through workgroup memory in K-slices of 16; each thread keeps a 4x4 block in registers.
// `matmul_vec4` stages the tiles with one vec4 load per thread and operand when both operands'
// contiguous dims (and offsets) are multiples of 4; the host picks it, else `matmul`. Large
// aligned products take `matmul_wide` (128x128 tiles, 8x8 outputs per thread; at the end).
// Batch is the z grid dimension (plus p.first_batch when the host splits a batch above the z limit); a
// shared 2-D operand has batch stride 0.
//
// The `linear` op runs here too, its elementwise work fused into the product: BIAS and ACT add
// bias[col] and apply the activation in the epilogue (forward), and A_DACT multiplies each
// element of a, as it is staged, by the activation's derivative read from the forward output
// `gy` at the same flat index (the backward's g * act'(out), never materialized).
// Activation codes: 0 none, 1 relu, 2 tanh, 3 sigmoid.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override TA: bool = false;
override TB: bool = false;
override BIAS: bool = false;
override ACT: u32 = 0u;
override A_DACT: u32 = 0u;
// matmul_add: the product is added to what c holds (its donated residual).
override ACCUM: bool = false;

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const TM: u32 = 4u;
const TN: u32 = 4u;
const THREADS: u32 = 256u;

@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> gy: array<f32>;
@group(0) @binding(5) var<storage, read_write> c: array<f32>;
// The same operands as vec4s, for `matmul_vec4` (no entry point uses both views).
@group(0) @binding(1) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b4: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> gy4: array<vec4<f32>>;

var<workgroup> a_tile: array<f32, 1024>; // [BK][BM]
var<workgroup> b_tile: array<f32, 1024>; // [BK][BN]

fn act(v: f32) -> f32 {
    switch ACT {
        case ACT_NONE: { return v; }
        case ACT_RELU: { return max(v, 0.0); }
        case ACT_TANH: { return tanh(v); }
        case ACT_SIGMOID: { return 1.0 / (1.0 + exp(-v)); }
        default: { return kernel_nan(); }
    }
}

// The derivative of activation A_DACT, from its output y.
fn dact(y: f32) -> f32 {
    switch A_DACT {
        case ACT_NONE: { return 1.0; }
        case ACT_RELU: { return select(0.0, 1.0, y > 0.0); }
        case ACT_TANH: { return 1.0 - y * y; }
        case ACT_SIGMOID: { return y * (1.0 - y); }
        default: { return kernel_nan(); }
    }
}

fn store_c(i: u32, v: f32) {
    if (ACCUM) {
        c[i] = c[i] + v;
    } else {
        c[i] = v;
    }
}

fn a_at(i: u32) -> f32 {
    if (A_DACT != 0u) { return a[i] * dact(gy[i]); }
    return a[i];
}

// Element (m, k) of op(a); a is [M, K] or, transposed, [K, M]. Zero outside the matrix.
fn load_a(base: u32, m: u32, k: u32) -> f32 {
    let p = matmul_params();
    let mm = p.m;
    let kk = p.k;
    if (m >= mm || k >= kk) { return 0.0; }
    if (TA) { return a_at(base + k * mm + m); }
    return a_at(base + m * kk + k);
}

// Element (k, n) of op(b); b is [K, N] or, transposed, [N, K].
fn load_b(base: u32, k: u32, n: u32) -> f32 {
    let p = matmul_params();
    let nn = p.n;
    let kk = p.k;
    if (n >= nn || k >= kk) { return 0.0; }
    if (TB) { return b[base + n * kk + k]; }
    return b[base + k * nn + n];
}

// `MatmulParams`: M, N, K, the batch strides of a and b, the first batch of this dispatch and
// the element offsets of a and b (row blocks of a larger buffer, e.g. one step of a sequence);
// output (batch, r, c) at batch * c_batch + c_offset + r * ldc + c, bias at bias_offset + c (a
// block of a larger product, when a weight is split over bindings; c_batch = M * N, ldc = N
// and offsets 0 otherwise).
@compute @workgroup_size(16, 16, 1)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
          @builtin(local_invocation_index) lidx: u32) {
    let p = matmul_params();
    let m_len = p.m;
    let n_len = p.n;
    let k_len = p.k;
    let batch = wid.z + p.first_batch;
    let base_a = batch * p.stride_a + p.offset_a;
    let base_b = batch * p.stride_b + p.offset_b;
    let base_c = batch * p.c_batch + p.c_offset;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;

    var acc = Acc4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));

    for (var k0: u32 = 0u; k0 < k_len; k0 = k0 + BK) {
        // Each thread stages 4 elements of each tile; consecutive threads read consecutive
        // addresses of whichever layout the operand has.
        for (var l: u32 = 0u; l < 4u; l = l + 1u) {
            let idx = lidx + l * THREADS;
            var mi: u32;
            var ki: u32;
            if (TA) { ki = idx / BM; mi = idx % BM; } else { mi = idx / BK; ki = idx % BK; }
            a_tile[ki * BM + mi] = load_a(base_a, row0 + mi, k0 + ki);
            var ni: u32;
            var kj: u32;
            if (TB) { ni = idx / BK; kj = idx % BK; } else { kj = idx / BN; ni = idx % BN; }
            b_tile[kj * BN + ni] = load_b(base_b, k0 + kj, col0 + ni);
        }
        workgroupBarrier();
        tile_fma(&acc, lid);
        workgroupBarrier();
    }
    store_tile(&acc, lid, base_c, row0, col0);
}

// A thread's 4x4 output block, one vec4 of columns per row: named registers, never an array
// indexed at run time (NVIDIA's Vulkan compiler kept such an array in memory, and the 64x64
// kernels ran at 0.1% of an H100's FP32 peak).
struct Acc4 {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

// acc += this thread's 4x4 block of a_tile^T b_tile.
fn tile_fma(acc: ptr<function, Acc4>, lid: vec3<u32>) {
    for (var kk: u32 = 0u; kk < BK; kk = kk + 1u) {
        let ao = kk * BM + lid.y * TM;
        let bo = kk * BN + lid.x * TN;
        let bv = vec4<f32>(b_tile[bo], b_tile[bo + 1u], b_tile[bo + 2u], b_tile[bo + 3u]);
        (*acc).r0 = fma(vec4<f32>(a_tile[ao]), bv, (*acc).r0);
        (*acc).r1 = fma(vec4<f32>(a_tile[ao + 1u]), bv, (*acc).r1);
        (*acc).r2 = fma(vec4<f32>(a_tile[ao + 2u]), bv, (*acc).r2);
        (*acc).r3 = fma(vec4<f32>(a_tile[ao + 3u]), bv, (*acc).r3);
    }
}

fn store_tile(acc: ptr<function, Acc4>, lid: vec3<u32>, base_c: u32, row0: u32, col0: u32) {
    let r = row0 + lid.y * TM;
    let col = col0 + lid.x * TN;
    store_c4(base_c, r, col, (*acc).r0);
    store_c4(base_c, r + 1u, col, (*acc).r1);
    store_c4(base_c, r + 2u, col, (*acc).r2);
    store_c4(base_c, r + 3u, col, (*acc).r3);
}

// Four consecutive elements of a (`i` a multiple of 4), or zeros past the operand.
fn a_vec(i: u32, valid: bool) -> vec4<f32> {
    if (!valid) { return vec4<f32>(0.0); }
    if (A_DACT != 0u) {
        let y = gy4[i / 4u];
        return a4[i / 4u] * vec4<f32>(dact(y.x), dact(y.y), dact(y.z), dact(y.w));
    }
    return a4[i / 4u];
}

fn b_vec(i: u32, valid: bool) -> vec4<f32> {
    if (!valid) { return vec4<f32>(0.0); }
    return b4[i / 4u];
}

// As `matmul`, with each operand's contiguous dim (K for a, or M when TA; N for b, or K when
// TB), its batch stride and its offset multiples of 4: every thread stages one vec4 of each
// tile, and a vec4 is either wholly inside the operand or wholly outside.
@compute @workgroup_size(16, 16, 1)
fn matmul_vec4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(local_invocation_index) lidx: u32) {
    let p = matmul_params();
    let m_len = p.m;
    let n_len = p.n;
    let k_len = p.k;
    let batch = wid.z + p.first_batch;
    let base_a = batch * p.stride_a + p.offset_a;
    let base_b = batch * p.stride_b + p.offset_b;
    let base_c = batch * p.c_batch + p.c_offset;
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;

    var acc = Acc4(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));

    for (var k0: u32 = 0u; k0 < k_len; k0 = k0 + BK) {
        if (TA) {
            // a is [K, M]: 16 k-rows of 16 vec4s along m.
            let ki = lidx / 16u;
            let mi = (lidx % 16u) * 4u;
            let k = k0 + ki;
            let m = row0 + mi;
            let v = a_vec(base_a + k * m_len + m, k < k_len && m < m_len);
            for (var e: u32 = 0u; e < 4u; e = e + 1u) { a_tile[ki * BM + mi + e] = v[e]; }
        } else {
            // a is [M, K]: 64 rows of 4 vec4s along k.
            let mi = lidx / 4u;
            let ki = (lidx % 4u) * 4u;
            let k = k0 + ki;
            let m = row0 + mi;
            let v = a_vec(base_a + m * k_len + k, k < k_len && m < m_len);
            for (var e: u32 = 0u; e < 4u; e = e + 1u) { a_tile[(ki + e) * BM + mi] = v[e]; }
        }
        if (TB) {
            // b is [N, K]: 64 rows of 4 vec4s along k.
            let ni = lidx / 4u;
            let kj = (lidx % 4u) * 4u;
            let k = k0 + kj;
            let n = col0 + ni;
            let v = b_vec(base_b + n * k_len + k, k < k_len && n < n_len);
            for (var e: u32 = 0u; e < 4u; e = e + 1u) { b_tile[(kj + e) * BN + ni] = v[e]; }
        } else {
            // b is [K, N]: 16 k-rows of 16 vec4s along n.
            let kj = lidx / 16u;
            let ni = (lidx % 16u) * 4u;
            let k = k0 + kj;
            let n = col0 + ni;
            let v = b_vec(base_b + k * n_len + n, k < k_len && n < n_len);
            for (var e: u32 = 0u; e < 4u; e = e + 1u) { b_tile[kj * BN + ni + e] = v[e]; }
        }
        workgroupBarrier();
        tile_fma(&acc, lid);
        workgroupBarrier();
    }
    store_tile(&acc, lid, base_c, row0, col0);
}

// Products with few rows (m <= SMALL_M: a decode step's projections and logits), where a 64x64
// tile would leave 63 of its 64 rows idle: one thread per output column keeps every row's
// accumulator in registers and walks k once, reading each element of b once (coalesced across
// threads when b is [K, N]); a's elements are the same for every thread. Same operands,
// transposes, batching, offsets and fused epilogue/prologue as `matmul`; the grid is 2-D over
// column blocks of 64 (x, y) and the batch (z).
const SMALL_M: u32 = 8u;

@compute @workgroup_size(64, 1, 1)
fn matmul_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lidx: u32) {
    let p = matmul_params();
    let m_len = p.m;
    let n_len = p.n;
    let k_len = p.k;
    let col = (wid.y * nwg.x + wid.x) * 64u + lidx;
    if (col >= n_len) { return; }
    let batch = wid.z + p.first_batch;
    let base_a = batch * p.stride_a + p.offset_a;
    let base_b = batch * p.stride_b + p.offset_b;
    let base_c = batch * p.c_batch + p.c_offset;
    var acc: array<f32, 8>;
    for (var i: u32 = 0u; i < SMALL_M; i = i + 1u) { acc[i] = 0.0; }
    for (var k: u32 = 0u; k < k_len; k = k + 1u) {
        let bv = load_b(base_b, k, col);
        for (var i: u32 = 0u; i < m_len; i = i + 1u) {
            acc[i] = acc[i] + load_a(base_a, i, k) * bv;
        }
    }
    for (var i: u32 = 0u; i < m_len; i = i + 1u) {
        var v = acc[i];
        if (BIAS) { v = v + bias[p.bias_offset + col]; }
        store_c(base_c + i * p.ldc + col, act(v));
    }
}

// Large aligned products (the host's rule: both operands as for `matmul_vec4`, M and N at least
// WIDE_MIN): a 128x128 output tile per workgroup of 16x16 threads, each thread an 8x8 block
// held in sixteen vec4 registers (rows 4ty..4ty+3 and 64+4ty.., columns 4tx.. and 64+4tx..),
// K staged in slices of 16 through vec4 workgroup tiles laid out [k][m/4] and [k][n/4]. Per k
// a thread reads 4 vec4s for 64 fused multiply-adds, and no register array is indexed at run
// time (drivers otherwise spill such arrays to memory). Same operands, transposes, batching,
// offsets and fused work as `matmul`.
const WBM: u32 = 128u;
const WBK: u32 = 16u;

var<workgroup> wa: array<vec4<f32>, 512>; // [WBK][WBM / 4]
var<workgroup> wb: array<vec4<f32>, 512>; // [WBK][WBN / 4]

fn wide_row(acc: ptr<function, vec4<f32>>, acc2: ptr<function, vec4<f32>>, a: f32,
            b0: vec4<f32>, b1: vec4<f32>) {
    *acc = fma(vec4<f32>(a), b0, *acc);
    *acc2 = fma(vec4<f32>(a), b1, *acc2);
}

fn store_c4(base_c: u32, r: u32, col0: u32, v: vec4<f32>) {
    let p = matmul_params();
    if (r >= p.m) { return; }
    for (var j: u32 = 0u; j < 4u; j = j + 1u) {
        let col = col0 + j;
        if (col < p.n) {
            var x = v[j];
            if (BIAS) { x = x + bias[p.bias_offset + col]; }
            store_c(base_c + r * p.ldc + col, act(x));
        }
    }
}

// Vec4 `idx` (0..512) of the K slice at k0 of a's 128-row tile: a [K, M] (TA) as 16 k-rows of
// 32 vec4s along m; a [M, K] as 128 rows of 4 vec4s along k.
fn wide_fetch_a(base_a: u32, k0: u32, row0: u32, idx: u32) -> vec4<f32> {
    let p = matmul_params();
    if (TA) {
        let k = k0 + idx / 32u;
        let m = row0 + (idx % 32u) * 4u;
        return a_vec(base_a + k * p.m + m, k < p.k && m < p.m);
    }
    let k = k0 + (idx % 4u) * 4u;
    let m = row0 + idx / 4u;
    return a_vec(base_a + m * p.k + k, k < p.k && m < p.m);
}

// Stores what `wide_fetch_a` read into the [k][m / 4] tile (a [M, K]'s scattered over k).
fn wide_put_a(idx: u32, v: vec4<f32>) {
    if (TA) {
        wa[idx] = v;
        return;
    }
    let mi = idx / 4u;
    let kq = (idx % 4u) * 4u;
    for (var e: u32 = 0u; e < 4u; e = e + 1u) { wa[(kq + e) * 32u + mi / 4u][mi % 4u] = v[e]; }
}

// As `wide_fetch_a` for b's 128-column tile: b [N, K] (TB) as 128 rows of 4 vec4s along k;
// b [K, N] as 16 k-rows of 32 vec4s along n.
fn wide_fetch_b(base_b: u32, k0: u32, col0: u32, idx: u32) -> vec4<f32> {
    let p = matmul_params();
    if (TB) {
        let k = k0 + (idx % 4u) * 4u;
        let n = col0 + idx / 4u;
        return b_vec(base_b + n * p.k + k, k < p.k && n < p.n);
    }
    let k = k0 + idx / 32u;
    let n = col0 + (idx % 32u) * 4u;
    return b_vec(base_b + k * p.n + n, k < p.k && n < p.n);
}

fn wide_put_b(idx: u32, v: vec4<f32>) {
    if (!TB) {
        wb[idx] = v;
        return;
    }
    let ni = idx / 4u;
    let kq = (idx % 4u) * 4u;
    for (var e: u32 = 0u; e < 4u; e = e + 1u) { wb[(kq + e) * 32u + ni / 4u][ni % 4u] = v[e]; }
}

@compute @workgroup_size(16, 16, 1)
fn matmul_wide(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
               @builtin(local_invocation_index) lidx: u32) {
    let p = matmul_params();
    let k_len = p.k;
    let batch = wid.z + p.first_batch;
    let base_a = batch * p.stride_a + p.offset_a;
    let base_b = batch * p.stride_b + p.offset_b;
    let base_c = batch * p.c_batch + p.c_offset;
    let row0 = wid.y * WBM;
    let col0 = wid.x * WBM;
    let tx = lid.x;
    let ty = lid.y;
    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0);
    var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0);
    var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);
    // Each thread stages 2 of the 512 vec4s of each tile per K slice. The next slice's vec4s
    // are read from memory into registers while this slice's products run.
    var pa0 = wide_fetch_a(base_a, 0u, row0, lidx);
    var pa1 = wide_fetch_a(base_a, 0u, row0, lidx + 256u);
    var pb0 = wide_fetch_b(base_b, 0u, col0, lidx);
    var pb1 = wide_fetch_b(base_b, 0u, col0, lidx + 256u);
    for (var k0: u32 = 0u; k0 < k_len; k0 = k0 + WBK) {
        wide_put_a(lidx, pa0);
        wide_put_a(lidx + 256u, pa1);
        wide_put_b(lidx, pb0);
        wide_put_b(lidx + 256u, pb1);
        workgroupBarrier();
        let kn = k0 + WBK;
        if (kn < k_len) {
            pa0 = wide_fetch_a(base_a, kn, row0, lidx);
            pa1 = wide_fetch_a(base_a, kn, row0, lidx + 256u);
            pb0 = wide_fetch_b(base_b, kn, col0, lidx);
            pb1 = wide_fetch_b(base_b, kn, col0, lidx + 256u);
        }
        for (var kk: u32 = 0u; kk < WBK; kk = kk + 1u) {
            let a0 = wa[kk * 32u + ty];
            let a1 = wa[kk * 32u + 16u + ty];
            let b0 = wb[kk * 32u + tx];
            let b1 = wb[kk * 32u + 16u + tx];
            wide_row(&c00, &c01, a0.x, b0, b1);
            wide_row(&c10, &c11, a0.y, b0, b1);
            wide_row(&c20, &c21, a0.z, b0, b1);
            wide_row(&c30, &c31, a0.w, b0, b1);
            wide_row(&c40, &c41, a1.x, b0, b1);
            wide_row(&c50, &c51, a1.y, b0, b1);
            wide_row(&c60, &c61, a1.z, b0, b1);
            wide_row(&c70, &c71, a1.w, b0, b1);
        }
        workgroupBarrier();
    }
    let r0 = row0 + ty * 4u;
    let r1 = row0 + 64u + ty * 4u;
    let n0 = col0 + tx * 4u;
    let n1 = col0 + 64u + tx * 4u;
    store_c4(base_c, r0, n0, c00); store_c4(base_c, r0, n1, c01);
    store_c4(base_c, r0 + 1u, n0, c10); store_c4(base_c, r0 + 1u, n1, c11);
    store_c4(base_c, r0 + 2u, n0, c20); store_c4(base_c, r0 + 2u, n1, c21);
    store_c4(base_c, r0 + 3u, n0, c30); store_c4(base_c, r0 + 3u, n1, c31);
    store_c4(base_c, r1, n0, c40); store_c4(base_c, r1, n1, c41);
    store_c4(base_c, r1 + 1u, n0, c50); store_c4(base_c, r1 + 1u, n1, c51);
    store_c4(base_c, r1 + 2u, n0, c60); store_c4(base_c, r1 + 2u, n1, c61);
    store_c4(base_c, r1 + 3u, n0, c70); store_c4(base_c, r1 + 3u, n1, c71);
}
