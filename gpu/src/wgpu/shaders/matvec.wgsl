// Decode's products on GPUs, streaming: out0 [rows, n] = xin [rows, k] @ W^T (+ bias, in aux;
// added to out0's contents when p.accum = 1; gated with the rows from p.glu on when p.glu != 0),
// W [n, k] of any weight dtype (or f32), packed. Part of the quant module (it uses quant.wgsl's
// bindings, `decode` and `store_matvec`).
//
// A workgroup of 256 threads takes MV_RPW weight rows; each row has a team of MV_TEAM consecutive
// invocations (a power of two from 4 to 32, which the host sizes to the row: 32 for decode's). A team walks its row once, in units of a few u32 words (a
// word of f32, a word of two f16/bf16, 8 quant bytes of a block with its scales), the team's
// lanes on consecutive units so that each load of the team is one contiguous span of the row.
// Every unit is dotted with all MV_ROWS rows of x (decode's batch of at most 8 rows), so the
// weight is read once whatever the rows. The sums of a team are reduced by `seg_sum4` (four
// values a call), from the module's prelude: subgroup operations where the adapter has them,
// workgroup memory where not (matvec_reduce_{subgroup,workgroup}.wgsl).
//
// Each weight is decoded to f32 exactly as `decode` does (same operations, same order) before it
// multiplies x, so NaN and infinity (a non-finite scale, a NaN or infinite activation) come out
// where the reference (decode, then multiply) puts them; only the order of the sum differs.

// Weight rows per workgroup (8 to 64), set by the host (ops/quant.rs's stream_team); the team of
// a row is 256 / MV_RPW threads.
override MV_RPW: u32 = 8u;
override MV_TEAM: u32 = 256u / MV_RPW;
// Rows of x (1..8), set by the host: loops over them have a constant bound (registers, unrolled).
override MV_ROWS: u32 = 1u;

// 8 bytes of `packed` from byte `off` (any alignment): three word loads where `off` is not a
// multiple of 4 (Q8_0, Q5_0 and Q6_K blocks are 34, 22 and 210 bytes), two where it is.
fn mv_bytes8(off: u32) -> vec2<u32> {
    let w = off >> 2u;
    let sh = (off & 3u) * 8u;
    let a = packed[w];
    let b = packed[w + 1u];
    if (sh == 0u) {
        return vec2<u32>(a, b);
    }
    let c = packed[w + 2u];
    return vec2<u32>((a >> sh) | (b << (32u - sh)), (b >> sh) | (c << (32u - sh)));
}

// The 16 bits at an even byte offset.
fn mv_u16(off: u32) -> u32 {
    return (packed[off >> 2u] >> ((off & 2u) * 8u)) & 0xffffu;
}

// The four bytes of a word, as unsigned values, signed values, or their nibbles from bit `s`.
fn mv_u8x4(w: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu);
}

fn mv_i8x4(w: u32) -> vec4<f32> {
    let up = bitcast<vec4<i32>>(vec4<u32>(w) << vec4<u32>(24u, 16u, 8u, 0u));
    return vec4<f32>(up >> vec4<u32>(24u));
}

fn mv_nib4(w: u32, s: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(s))) & vec4<u32>(0xfu);
}

// quant.wgsl's q4k_scale_min (the 6-bit scale and min of sub-block j) from the super-block's 12
// scale bytes, held in three words.
fn mv_q4k_scale_min(s: vec3<u32>, j: u32) -> vec2<u32> {
    let a = (s[j / 4u] >> (8u * (j % 4u))) & 0xffu;          // byte j (j < 8)
    let m = (s[j / 4u + 1u] >> (8u * (j % 4u))) & 0xffu;     // byte j + 4
    if (j < 4u) {
        return vec2<u32>(a & 63u, m & 63u);
    }
    let lo = (s[j / 4u - 1u] >> (8u * (j % 4u))) & 0xffu;    // byte j - 4
    return vec2<u32>((m & 0xfu) | ((lo >> 6u) << 4u), (m >> 4u) | ((a >> 6u) << 4u));
}

// Eight decoded weights, elements e..e+8 of the row (e relative to the row's first element),
// dotted with each x row: acc[r] += x[r, e..e+8] . (w0, w1).
fn mv_acc8(acc: ptr<function, array<f32, 8>>, k: u32, e: u32, w0: vec4<f32>, w1: vec4<f32>) {
    for (var r: u32 = 0u; r < MV_ROWS; r = r + 1u) {
        let o = r * k + e;
        let x0 = vec4<f32>(xin[o], xin[o + 1u], xin[o + 2u], xin[o + 3u]);
        let x1 = vec4<f32>(xin[o + 4u], xin[o + 5u], xin[o + 6u], xin[o + 7u]);
        (*acc)[r] = (*acc)[r] + (dot(x0, w0) + dot(x1, w1));
    }
}

// One weight at element e of the row.
fn mv_acc1(acc: ptr<function, array<f32, 8>>, k: u32, e: u32, w: f32) {
    for (var r: u32 = 0u; r < MV_ROWS; r = r + 1u) {
        (*acc)[r] = (*acc)[r] + xin[r * k + e] * w;
    }
}

// Two weights at elements e, e + 1.
fn mv_acc2(acc: ptr<function, array<f32, 8>>, k: u32, e: u32, w: vec2<f32>) {
    for (var r: u32 = 0u; r < MV_ROWS; r = r + 1u) {
        let o = r * k + e;
        (*acc)[r] = (*acc)[r] + dot(vec2<f32>(xin[o], xin[o + 1u]), w);
    }
}

// The two halves of a word of f16 or bf16 weights.
fn mv_pair(bf: bool, v: u32) -> vec2<f32> {
    if (bf) {
        return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u));
    }
    return vec2<f32>(f16_bits(v & 0xffffu), f16_bits(v >> 16u));
}

// Weight row j (of the binding) dotted with every x row by the team's lane `lane`: its share of
// the sums, in acc.
fn mv_row(p: MatvecParams, j: u32, lane: u32, acc: ptr<function, array<f32, 8>>) {
    let k = p.k;
    let T = MV_TEAM;
    switch p.dtype {
        case F32_SOURCE: {
            // One word per element; four loads in flight per lane.
            let base = j * k;
            var i = lane;
            for (; i + 3u * T < k; i = i + 4u * T) {
                let w = vec4<f32>(bitcast<f32>(packed[base + i]),
                                  bitcast<f32>(packed[base + i + T]),
                                  bitcast<f32>(packed[base + i + 2u * T]),
                                  bitcast<f32>(packed[base + i + 3u * T]));
                mv_acc1(acc, k, i, w.x);
                mv_acc1(acc, k, i + T, w.y);
                mv_acc1(acc, k, i + 2u * T, w.z);
                mv_acc1(acc, k, i + 3u * T, w.w);
            }
            for (; i < k; i = i + T) {
                mv_acc1(acc, k, i, bitcast<f32>(packed[base + i]));
            }
            return;
        }
        case WEIGHT_F16, WEIGHT_BF16: {
            if (k % 2u != 0u) {
                break;
            }
            // One word (two elements) per unit; rows of even length start on a word.
            let bf = p.dtype == WEIGHT_BF16;
            let kw = k / 2u;
            let base = j * kw;
            var u = lane;
            for (; u + 3u * T < kw; u = u + 4u * T) {
                let w = vec4<u32>(packed[base + u], packed[base + u + T],
                                  packed[base + u + 2u * T], packed[base + u + 3u * T]);
                mv_acc2(acc, k, 2u * u, mv_pair(bf, w.x));
                mv_acc2(acc, k, 2u * (u + T), mv_pair(bf, w.y));
                mv_acc2(acc, k, 2u * (u + 2u * T), mv_pair(bf, w.z));
                mv_acc2(acc, k, 2u * (u + 3u * T), mv_pair(bf, w.w));
            }
            for (; u < kw; u = u + T) {
                mv_acc2(acc, k, 2u * u, mv_pair(bf, packed[base + u]));
            }
            return;
        }
        case WEIGHT_Q8_0: {
            if (k % 32u != 0u) {
                break;
            }
            // Unit: a quarter block (8 quants); the block's f16 scale beside it.
            let rb = j * (k / 32u) * 34u;
            for (var u = lane; u < k / 8u; u = u + T) {
                let b = rb + (u / 4u) * 34u;
                let d = f16_bits(mv_u16(b));
                let v = mv_bytes8(b + 2u + 8u * (u % 4u));
                mv_acc8(acc, k, 8u * u, mv_i8x4(v.x) * d, mv_i8x4(v.y) * d);
            }
            return;
        }
        case WEIGHT_Q4_0, WEIGHT_Q4_1, WEIGHT_Q5_0: {
            if (k % 32u != 0u) {
                break;
            }
            // Unit: half a block, 8 quant bytes: elements 8h.. (low nibbles) and 16+8h.. (high).
            let bb = select(select(22u, 20u, p.dtype == WEIGHT_Q4_1), 18u, p.dtype == WEIGHT_Q4_0);
            let qs = bb - 16u;
            let rb = j * (k / 32u) * bb;
            for (var u = lane; u < k / 16u; u = u + T) {
                let b = rb + (u / 2u) * bb;
                let h = u % 2u;
                let e = (u / 2u) * 32u + 8u * h;
                let d = f16_bits(mv_u16(b));
                let v = mv_bytes8(b + qs + 8u * h);
                var lo0 = mv_nib4(v.x, 0u);
                var lo1 = mv_nib4(v.y, 0u);
                var hi0 = mv_nib4(v.x, 4u);
                var hi1 = mv_nib4(v.y, 4u);
                if (p.dtype == WEIGHT_Q4_1) {
                    let m = f16_bits(mv_u16(b + 2u));
                    mv_acc8(acc, k, e, d * vec4<f32>(lo0) + m, d * vec4<f32>(lo1) + m);
                    mv_acc8(acc, k, e + 16u, d * vec4<f32>(hi0) + m, d * vec4<f32>(hi1) + m);
                    continue;
                }
                var zero = 8;
                if (p.dtype == WEIGHT_Q5_0) {
                    // The fifth bits: bit i of the block's 32-bit qh for its element i.
                    let qh = mv_u16(b + 2u) | (mv_u16(b + 4u) << 16u);
                    let s = vec4<u32>(0u, 1u, 2u, 3u) + vec4<u32>(8u * h);
                    lo0 = lo0 | (((vec4<u32>(qh) >> s) & vec4<u32>(1u)) << vec4<u32>(4u));
                    lo1 = lo1 | (((vec4<u32>(qh) >> (s + vec4<u32>(4u))) & vec4<u32>(1u)) << vec4<u32>(4u));
                    hi0 = hi0 | (((vec4<u32>(qh) >> (s + vec4<u32>(16u))) & vec4<u32>(1u)) << vec4<u32>(4u));
                    hi1 = hi1 | (((vec4<u32>(qh) >> (s + vec4<u32>(20u))) & vec4<u32>(1u)) << vec4<u32>(4u));
                    zero = 16;
                }
                let z = vec4<i32>(zero);
                mv_acc8(acc, k, e, d * vec4<f32>(vec4<i32>(lo0) - z), d * vec4<f32>(vec4<i32>(lo1) - z));
                mv_acc8(acc, k, e + 16u, d * vec4<f32>(vec4<i32>(hi0) - z),
                        d * vec4<f32>(vec4<i32>(hi1) - z));
            }
            return;
        }
        case WEIGHT_Q4_K: {
            if (k % 256u != 0u) {
                break;
            }
            // Unit: 8 of the 128 quant bytes: elements 64c+8s.. (low nibbles, sub-block 2c) and
            // 64c+32+8s.. (high, sub-block 2c+1).
            let rb = j * (k / 256u) * 144u;
            for (var u = lane; u < k / 16u; u = u + T) {
                let b = rb + (u / 16u) * 144u;
                let c = (u % 16u) / 4u;
                let s = u % 4u;
                let e = (u / 16u) * 256u + 64u * c + 8u * s;
                let d = f16_bits(mv_u16(b));
                let dmin = f16_bits(mv_u16(b + 2u));
                let v = mv_bytes8(b + 16u + 32u * c + 8u * s);
                // The 12 bytes of 6-bit scales and mins, as three words.
                let sc = vec3<u32>(packed[(b + 4u) >> 2u], packed[(b + 8u) >> 2u],
                                   packed[(b + 12u) >> 2u]);
                let sl = mv_q4k_scale_min(sc, 2u * c);
                let sh = mv_q4k_scale_min(sc, 2u * c + 1u);
                let dl = d * f32(sl.x);
                let ml = dmin * f32(sl.y);
                let dh = d * f32(sh.x);
                let mh = dmin * f32(sh.y);
                mv_acc8(acc, k, e, dl * vec4<f32>(mv_nib4(v.x, 0u)) - ml,
                        dl * vec4<f32>(mv_nib4(v.y, 0u)) - ml);
                mv_acc8(acc, k, e + 32u, dh * vec4<f32>(mv_nib4(v.x, 4u)) - mh,
                        dh * vec4<f32>(mv_nib4(v.y, 4u)) - mh);
            }
            return;
        }
        case WEIGHT_Q6_K: {
            if (k % 256u != 0u) {
                break;
            }
            // Unit: elements 128h + 32q + l0.. (q = 0..3, l0 = 8 * (u % 4)): 8 bytes of each half
            // of ql's 64 for h, and 8 of qh's 32.
            let rb = j * (k / 256u) * 210u;
            for (var u = lane; u < k / 32u; u = u + T) {
                let b = rb + (u / 8u) * 210u;
                let h = (u % 8u) / 4u;
                let l0 = 8u * (u % 4u);
                let e = (u / 8u) * 256u + 128u * h + l0;
                let d = f16_bits(mv_u16(b + 208u));
                let ql0 = mv_bytes8(b + 64u * h + l0);
                let ql1 = mv_bytes8(b + 64u * h + 32u + l0);
                let qh = mv_bytes8(b + 128u + 32u * h + l0);
                for (var q: u32 = 0u; q < 4u; q = q + 1u) {
                    let ql = select(ql0, ql1, (q & 1u) == 1u);
                    let ls = 4u * (q >> 1u);
                    let hs = vec4<u32>(0u, 8u, 16u, 24u) + vec4<u32>(2u * q);
                    let q0 = mv_nib4(ql.x, ls) | (((vec4<u32>(qh.x) >> hs) & vec4<u32>(3u)) << vec4<u32>(4u));
                    let q1 = mv_nib4(ql.y, ls) | (((vec4<u32>(qh.y) >> hs) & vec4<u32>(3u)) << vec4<u32>(4u));
                    let sc = d * i8_of(byte_at(b + 192u + 8u * h + 2u * q + l0 / 16u));
                    let z = vec4<i32>(32);
                    mv_acc8(acc, k, e + 32u * q, sc * vec4<f32>(vec4<i32>(q0) - z),
                            sc * vec4<f32>(vec4<i32>(q1) - z));
                }
            }
            return;
        }
        default: {}
    }
    // Shapes the units do not tile (odd f16/bf16 rows): element by element.
    for (var i = lane; i < k; i = i + T) {
        mv_acc1(acc, k, i, decode(p.dtype, j * k + i));
    }
}

// One workgroup per MV_RPW weight rows (Grid::Teams of n * MV_TEAM threads). Teams of at least 4
// lanes: lanes 0..3 store the rows of x four at a time.
@compute @workgroup_size(256)
fn matvec_stream(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let p = matvec_params();
    let g = wid.y * nwg.x + wid.x;
    if (g * MV_RPW >= p.n) { return; }
    let lane = lid % MV_TEAM;
    let j = g * MV_RPW + lid / MV_TEAM;
    let live = j < p.n;
    var acc: array<f32, 8>;
    var acc_up: array<f32, 8>;
    if (live) {
        mv_row(p, j, lane, &acc);
        // With p.glu, the up row j + p.glu beside the gate row j (matmul_swiglu).
        if (p.glu != 0u) { mv_row(p, j + p.glu, lane, &acc_up); }
    }
    // Four x rows a reduction; lane t of the team stores row q + t.
    for (var q: u32 = 0u; q < MV_ROWS; q = q + 4u) {
        let s = seg_sum4(lid, vec4<f32>(acc[q], acc[q + 1u], acc[q + 2u], acc[q + 3u]));
        var up = vec4<f32>(0.0);
        if (p.glu != 0u) {
            up = seg_sum4(lid, vec4<f32>(acc_up[q], acc_up[q + 1u], acc_up[q + 2u], acc_up[q + 3u]));
        }
        if (live && lane < 4u && q + lane < MV_ROWS) {
            store_matvec(p, q + lane, j, s[lane], up[lane]);
        }
    }
}
