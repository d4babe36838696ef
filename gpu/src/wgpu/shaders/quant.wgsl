// Weight dtypes decoded to f32: f16, bf16 and GGML's blocks (q8_0, q4_0, q4_1, q5_0, q4_k,
// q6_k), byte for byte the layouts of kernels-core src/quant/decode.rs (the CPU reference,
// bit-exact with the gguf package). One thread per output element (dequantize). The packed bytes are read
// as u32 words (WGSL has no byte loads). `f16_at` comes from the f16 reader of the module's
// variant: native f16 (f16_native.wgsl, where the adapter has shader-f16) or integer decoding
// (f16_integer.wgsl); both give the exact f32 of every half, subnormals included. Decode's
// products: `matvec_each` here (software adapters), `matvec_stream` in matvec.wgsl (GPUs).

override WG: u32 = 256u;

// Slot 2 holds the bias of `matvec` or the ids of `dequantize_rows`, as u32 bits. Slot 4 holds
// the packed tensor again, for the native-f16 reader's `array<f16>` view (naga has no bitcast
// from u32 to vec2<f16>).
@group(0) @binding(1) var<storage, read> xin: array<f32>;
@group(0) @binding(2) var<storage, read> aux: array<u32>;
@group(0) @binding(3) var<storage, read> packed: array<u32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

fn byte_at(off: u32) -> u32 {
    return (packed[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

fn u16_at(off: u32) -> u32 {
    return byte_at(off) | (byte_at(off + 1u) << 8u);
}

// IEEE binary16 bits to f32, exactly (subnormals included), with integer
// arithmetic: the `shader-f16`-free reader's `f16_at` and the streaming matvec's scales.
fn f16_bits(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let mag = f32(m) * 5.9604644775390625e-8; // m * 2^-24, exact
        return select(mag, -mag, sign != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn i8_of(b: u32) -> f32 {
    return f32(i32(b) - select(0, 256, b >= 128u));
}

// The 6-bit scale and min of sub-block j of the Q4_K super-block at byte b.
fn q4k_scale_min(b: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(byte_at(b + 4u + j) & 63u, byte_at(b + 8u + j) & 63u);
    }
    return vec2<u32>(
        (byte_at(b + 8u + j) & 0xfu) | ((byte_at(b + j) >> 6u) << 4u),
        (byte_at(b + 8u + j) >> 4u) | ((byte_at(b + 4u + j) >> 6u) << 4u),
    );
}

// Where element i of a 32-element block of nibbles lies (Q4_0, Q4_1, Q5_0; blocks of
// `block_bytes`, quants from byte `quants` of the block): the block's first byte, the byte holding
// its nibble, and the nibble's shift. Elements i..i+8 (i a multiple of 8) are at bytes q..q+8.
fn nibble32_at(i: u32, block_bytes: u32, quants: u32) -> vec3<u32> {
    let b = (i / 32u) * block_bytes;
    let e = i % 32u;
    return vec3<u32>(b, b + quants + e % 16u, 4u * (e / 16u));
}

// Q4_K element i: the super-block's first byte, the byte holding its nibble, the nibble's shift
// and its sub-block (the index of its 6-bit scale and min).
fn q4k_at(i: u32) -> vec4<u32> {
    let b = (i / 256u) * 144u;
    let e = i % 256u;
    let c = e / 64u;
    let hi = (e % 64u) / 32u;
    return vec4<u32>(b, b + 16u + 32u * c + e % 32u, 4u * hi, 2u * c + hi);
}

// Q6_K element i: the super-block's first byte, the bytes of its low 4 and high 2 bits with
// their shifts, and the byte of its 8-bit sub-block scale.
struct Q6kAt {
    b: u32,
    ql: u32,
    shl: u32,
    qh: u32,
    shh: u32,
    scale: u32,
}

fn q6k_at(i: u32) -> Q6kAt {
    let b = (i / 256u) * 210u;
    let e = i % 256u;
    let h = e / 128u;
    let k = (e % 128u) / 32u;
    let l = e % 32u;
    return Q6kAt(b, b + 64u * h + 32u * (k & 1u) + l, 4u * (k >> 1u), b + 128u + 32u * h + l,
                 2u * k, b + 192u + e / 16u);
}

// Element i of a tensor of weight dtype `dtype` (the WEIGHT_* codes).
fn decode(dtype: u32, i: u32) -> f32 {
    switch dtype {
        case WEIGHT_F16: {
            return f16_at(2u * i);
        }
        case WEIGHT_BF16: {
            return bitcast<f32>(u16_at(2u * i) << 16u);
        }
        case WEIGHT_Q8_0: {
            let b = (i / 32u) * 34u;
            return i8_of(byte_at(b + 2u + i % 32u)) * f16_at(b);
        }
        case WEIGHT_Q4_0: {
            let n = nibble32_at(i, 18u, 2u);
            let q = (byte_at(n.y) >> n.z) & 0xfu;
            return f16_at(n.x) * f32(i32(q) - 8);
        }
        case WEIGHT_Q4_1: {
            let n = nibble32_at(i, 20u, 4u);
            let q = (byte_at(n.y) >> n.z) & 0xfu;
            return f16_at(n.x) * f32(q) + f16_at(n.x + 2u);
        }
        case WEIGHT_Q5_0: {
            let n = nibble32_at(i, 22u, 6u);
            let qh = u16_at(n.x + 2u) | (u16_at(n.x + 4u) << 16u);
            let lo = (byte_at(n.y) >> n.z) & 0xfu;
            let q = lo | (((qh >> (i % 32u)) & 1u) << 4u);
            return f16_at(n.x) * f32(i32(q) - 16);
        }
        case WEIGHT_Q4_K: {
            let p = q4k_at(i);
            let sm = q4k_scale_min(p.x, p.w);
            let q = (byte_at(p.y) >> p.z) & 0xfu;
            let dl = f16_at(p.x) * f32(sm.x);
            let ml = f16_at(p.x + 2u) * f32(sm.y);
            return dl * f32(q) - ml;
        }
        case WEIGHT_Q6_K: {
            let p = q6k_at(i);
            let ql = (byte_at(p.ql) >> p.shl) & 0xfu;
            let qh = (byte_at(p.qh) >> p.shh) & 3u;
            let sc = f16_at(p.b + 208u) * i8_of(byte_at(p.scale));
            return sc * f32(i32(ql | (qh << 4u)) - 32);
        }
        // An f32 weight (decode's f32 products on devices that take `matvec` for them).
        case F32_SOURCE: {
            return bitcast<f32>(packed[i]);
        }
        default: {
            return kernel_nan();
        }
    }
}

// Weight elements i..i+8 (i a multiple of 8, so never across a block) dotted with xin[xo..xo+8].
// A non-finite result (a NaN or infinite scale or activation) is computed again element by
// element, so NaN and infinity come out where the reference's (decode, then multiply) put them.
fn dot8(dtype: u32, i: u32, xo: u32) -> f32 {
    let v = dot8_blocks(dtype, i, xo);
    if ((bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u) {
        return v;
    }
    return dot8_each(dtype, i, xo);
}

fn dot8_each(dtype: u32, i: u32, xo: u32) -> f32 {
    var s: f32 = 0.0;
    for (var t: u32 = 0u; t < 8u; t = t + 1u) {
        s = s + xin[xo + t] * decode(dtype, i + t);
    }
    return s;
}

// The block's scales decoded once for the 8 elements, and the quants summed against x before
// the scales multiply (the f32 rounding differs from the elementwise decode's in the order).
fn dot8_blocks(dtype: u32, i: u32, xo: u32) -> f32 {
    switch dtype {
        case WEIGHT_Q8_0: {
            let b = (i / 32u) * 34u + 2u + i % 32u;
            var s: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                s = s + xin[xo + t] * i8_of(byte_at(b + t));
            }
            return f16_at((i / 32u) * 34u) * s;
        }
        case WEIGHT_Q4_0: {
            let n = nibble32_at(i, 18u, 2u);
            var s: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                s = s + xin[xo + t] * f32(i32((byte_at(n.y + t) >> n.z) & 0xfu) - 8);
            }
            return f16_at(n.x) * s;
        }
        case WEIGHT_Q4_1: {
            let n = nibble32_at(i, 20u, 4u);
            var s: f32 = 0.0;
            var sx: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                let x = xin[xo + t];
                s = s + x * f32((byte_at(n.y + t) >> n.z) & 0xfu);
                sx = sx + x;
            }
            return f16_at(n.x) * s + f16_at(n.x + 2u) * sx;
        }
        case WEIGHT_Q5_0: {
            let n = nibble32_at(i, 22u, 6u);
            let qh = u16_at(n.x + 2u) | (u16_at(n.x + 4u) << 16u);
            let e = i % 32u;
            var s: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                let lo = (byte_at(n.y + t) >> n.z) & 0xfu;
                let q = lo | (((qh >> (e + t)) & 1u) << 4u);
                s = s + xin[xo + t] * f32(i32(q) - 16);
            }
            return f16_at(n.x) * s;
        }
        case WEIGHT_Q4_K: {
            let p = q4k_at(i);
            let sm = q4k_scale_min(p.x, p.w);
            var s: f32 = 0.0;
            var sx: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                let x = xin[xo + t];
                s = s + x * f32((byte_at(p.y + t) >> p.z) & 0xfu);
                sx = sx + x;
            }
            return f16_at(p.x) * f32(sm.x) * s - f16_at(p.x + 2u) * f32(sm.y) * sx;
        }
        case WEIGHT_Q6_K: {
            let p = q6k_at(i);
            var s: f32 = 0.0;
            for (var t: u32 = 0u; t < 8u; t = t + 1u) {
                let ql = (byte_at(p.ql + t) >> p.shl) & 0xfu;
                let qh = (byte_at(p.qh + t) >> p.shh) & 3u;
                s = s + xin[xo + t] * f32(i32(ql | (qh << 4u)) - 32);
            }
            return f16_at(p.b + 208u) * i8_of(byte_at(p.scale)) * s;
        }
        default: {
            return dot8_each(dtype, i, xo);
        }
    }
}

// packed = x of weight dtype p.dtype; out0 = f32 [p.n].
@compute @workgroup_size(WG)
fn dequantize(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let p = dequantize_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    out0[o] = decode(p.dtype, o);
}

// The embedding lookup of a packed table: aux = ids [tokens] (i32), packed = weight [vocab, dim];
// out0 = [tokens, dim], decoding only the rows the ids pick (ids out of range give 0, as the
// f32 embedding kernel; the op layer refuses them before launching).
@compute @workgroup_size(WG)
fn dequantize_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let p = dequantize_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let d = p.dim;
    let id = bitcast<i32>(aux[o / d]);
    if (id < 0 || u32(id) >= p.vocab) {
        // Out of range: 0, written by the launch that holds the table's first rows.
        if (p.first == 0u) { out0[o] = 0.0; }
        return;
    }
    let row = u32(id);
    if (row < p.first || row - p.first >= p.rows) { return; }
    out0[o] = decode(p.dtype, (row - p.first) * d + o % d);
}

// Decode's products without a decoded copy of the weight, for software adapters (SwiftShader,
// lavapipe): out0 [rows, n] = xin [rows, k] @ W^T (+ bias, in aux; added to out0's contents when
// p.accum = 1; gated with the rows from p.glu on when p.glu != 0), W [n, k] packed. One
// invocation per output element, walking the whole row, with no workgroup memory and no
// barrier: a CPU-backed adapter runs a barrier by switching between invocations. GPUs take the
// streaming `matvec_stream` (matvec.wgsl). The outputs (and the bias) are columns p.col0.. of
// rows of p.ldo: a column block of a wider product when the weight is split over bindings (the
// binding then starts at the block's first row). Four running sums over the row's groups of 8.
@compute @workgroup_size(WG)
fn matvec_each(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let p = matvec_params();
    let g = flat_index(wid, nwg, lid);
    if (g >= p.rows * p.n) { return; }
    let r = g / p.n;
    let j = g % p.n;
    let s = row_dot(p, r, j);
    var up: f32 = 0.0;
    if (p.glu != 0u) { up = row_dot(p, r, j + p.glu); }
    store_matvec(p, r, j, s, up);
}

// Row r of x dotted with weight row j by one invocation: four running sums over the row's
// groups of 8.
fn row_dot(p: MatvecParams, r: u32, j: u32) -> f32 {
    var acc = vec4<f32>(0.0);
    if (p.k % 32u == 0u) {
        for (var i: u32 = 0u; i < p.k; i = i + 32u) {
            acc = acc + vec4<f32>(
                dot8(p.dtype, j * p.k + i, r * p.k + i),
                dot8(p.dtype, j * p.k + i + 8u, r * p.k + i + 8u),
                dot8(p.dtype, j * p.k + i + 16u, r * p.k + i + 16u),
                dot8(p.dtype, j * p.k + i + 24u, r * p.k + i + 24u),
            );
        }
    } else if (p.k % 8u == 0u) {
        for (var i: u32 = 0u; i < p.k; i = i + 8u) {
            acc.x = acc.x + dot8(p.dtype, j * p.k + i, r * p.k + i);
        }
    } else {
        for (var i: u32 = 0u; i < p.k; i = i + 1u) {
            acc.x = acc.x + xin[r * p.k + i] * decode(p.dtype, j * p.k + i);
        }
    }
    return (acc.x + acc.y) + (acc.z + acc.w);
}

// Output j of row r: the sum, plus the bias (p.bias = 1), added to what is there (p.accum = 1:
// matmul_add into its residual); with p.glu, silu(s) * up (matmul_swiglu, as swiglu computes it).
fn store_matvec(p: MatvecParams, r: u32, j: u32, s: f32, up: f32) {
    let col = p.col0 + j;
    let o = r * p.ldo + col;
    var v = select(s, s + bitcast<f32>(aux[col]), p.bias == 1u);
    if (p.glu != 0u) {
        v = s * (1.0 / (1.0 + exp(-s))) * up;
    }
    if (p.accum == 1u) {
        out0[o] = out0[o] + v;
    } else {
        out0[o] = v;
    }
}
