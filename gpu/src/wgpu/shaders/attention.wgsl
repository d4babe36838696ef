// Scaled dot-product attention with GQA and an optional causal mask, forward and backward.
// q [b, hq, s, d], k [b, hkv, t, d], v [b, hkv, t, dv]; query head h reads kv head
// h / (hq / hkv) by index (no repeated K/V). Causal: key j is masked for query row i when
// j > i + (t - s), so s == 1 over a cache of t keys sees every key. A sliding window
// (WINDOW > 0, causal only) also masks keys j <= i + (t - s) - WINDOW. A row that sees no key
// outputs 0.
//
// Forward (`attn_forward`), flash-style: one workgroup per (batch, query head, block of BQ
// query rows). Keys and values stream through workgroup memory in tiles of BKEYS; each query
// row keeps a running max, a running sum and its output accumulator (online softmax), so the
// [s, t] score matrix never exists. Four lanes share a row: each holds a quarter of q and of the
// output, and the lanes' partial dot products meet in workgroup memory (summed in a fixed
// order, so all four lanes see bit-identical scores).
//
// Backward recomputes the probabilities: `attn_dq` (one workgroup per query row) finds the
// row's max, sum and delta = sum_j p_j dp_j, writes them to `stats`, and accumulates dq;
// `attn_dkv` (one workgroup per key of each kv head) loops over the query heads that share the
// kv head and their rows, and accumulates dk and dv.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override CAUSAL: bool = true;
// Sliding window: each query row sees its last WINDOW keys (0: no window).
override WINDOW: u32 = 0u;

const WG: u32 = 64u;
const BQ: u32 = 16u;
const LANES: u32 = 4u;
const BKEYS: u32 = 8u;
// Head dims up to DMAX (the host checks); PER_LANE = DMAX / LANES registers per lane.
const DMAX: u32 = 128u;
const PER_LANE: u32 = 32u;
// Per-thread accumulators of the backward kernels: DMAX / WG.
const PER_THREAD: u32 = 2u;

// Every kernel reads `AttentionParams` (gpu/src/params.rs): s = p.seq_q, t = p.seq_kv (keys per
// head in memory), d = p.head_dim, dv = p.head_dim_v, hq = p.heads_q, hq / hkv = p.group.
// Only the first p.kv_len <= t keys of each head are read (a preallocated KV cache): masking
// and causal alignment use kv_len, addressing uses t.
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;
// [b * hq * s, 4]: (max, sum, delta, unused) of each query row.
@group(0) @binding(7) var<storage, read_write> stats: array<f32>;

var<workgroup> k_tile: array<f32, 1024>; // [BKEYS][DMAX]
var<workgroup> v_tile: array<f32, 1024>; // [BKEYS][DMAX]
var<workgroup> part: array<f32, 512>;    // [BQ][BKEYS][LANES]
var<workgroup> sh: array<f32, 64>;
var<workgroup> sh2: array<f32, 64>;

fn neg_inf() -> f32 {
    var bits: u32 = 0xff800000u;
    return bitcast<f32>(bits);
}

fn work_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Keys 0..visible(i) are seen by query row i.
fn visible(i: u32) -> u32 {
    let p = attention_params();
    let s = p.seq_q;
    let t = p.kv_len;
    if (!CAUSAL) { return t; }
    if (i + 1u + t <= s) { return 0u; }
    return min(i + 1u + t - s, t);
}

// The first key query row i sees: keys first_key(i)..visible(i).
fn first_key(i: u32) -> u32 {
    let hi = visible(i);
    if (WINDOW == 0u || hi <= WINDOW) { return 0u; }
    return hi - WINDOW;
}

@compute @workgroup_size(64)
fn attn_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = attention_params();
    let item = work_index(wid, nwg);
    if (item >= p.items) { return; }
    let s = p.seq_q;
    let t = p.seq_kv;
    let d = p.head_dim;
    let dv = p.head_dim_v;
    let blocks = (s + BQ - 1u) / BQ;
    let bh = item / blocks;          // b * hq + h
    let blk = item % blocks;
    let b = bh / p.heads_q;
    let h = bh % p.heads_q;
    let hkv = p.heads_q / p.group;
    let kvh = b * hkv + h / p.group;
    let k_base = kvh * t * d;
    let v_base = kvh * t * dv;

    let r = lid / LANES;
    let lane = lid % LANES;
    let i = blk * BQ + r;
    let in_range = i < s;
    let row = bh * s + i;
    let vis = select(0u, visible(i), in_range);
    let lo = select(0u, first_key(i), in_range);
    let last = min(blk * BQ + BQ, s) - 1u;
    let key_end = visible(last);
    // first_key grows with the row: the block's first row starts the tiles.
    let key_start = first_key(blk * BQ);

    var qr: array<f32, 32>;
    var acc: array<f32, 32>;
    for (var c: u32 = 0u; c < PER_LANE; c = c + 1u) {
        let e = lane + LANES * c;
        qr[c] = select(0.0, q[row * d + e], in_range && e < d);
        acc[c] = 0.0;
    }
    var m = neg_inf();
    var l: f32 = 0.0;

    for (var j0: u32 = key_start; j0 < key_end; j0 = j0 + BKEYS) {
        for (var idx: u32 = lid; idx < BKEYS * DMAX; idx = idx + WG) {
            let jj = idx / DMAX;
            let e = idx % DMAX;
            let key = j0 + jj;
            // Keys past kv_len load as zeros: a masked key's probability is 0, and 0 * v must
            // not meet whatever an unwritten cache position holds.
            k_tile[idx] = select(0.0, k[k_base + key * d + e], key < p.kv_len && e < d);
            v_tile[idx] = select(0.0, v[v_base + key * dv + e], key < p.kv_len && e < dv);
        }
        workgroupBarrier();
        for (var jj: u32 = 0u; jj < BKEYS; jj = jj + 1u) {
            var dot: f32 = 0.0;
            for (var c: u32 = 0u; c < PER_LANE; c = c + 1u) {
                dot = dot + qr[c] * k_tile[jj * DMAX + lane + LANES * c];
            }
            part[(r * BKEYS + jj) * LANES + lane] = dot;
        }
        workgroupBarrier();
        var sc: array<f32, 8>;
        var tile_max = neg_inf();
        for (var jj: u32 = 0u; jj < BKEYS; jj = jj + 1u) {
            let o = (r * BKEYS + jj) * LANES;
            let x = (((part[o] + part[o + 1u]) + part[o + 2u]) + part[o + 3u]) * p.scale;
            sc[jj] = select(neg_inf(), x, j0 + jj >= lo && j0 + jj < vis);
            tile_max = max(tile_max, sc[jj]);
        }
        let m_new = max(m, tile_max);
        if (m_new != neg_inf()) {
            // Before the first visible key l == 0 and acc == 0, and m is still -inf.
            let alpha = select(exp(m - m_new), 1.0, l == 0.0);
            l = l * alpha;
            for (var c: u32 = 0u; c < PER_LANE; c = c + 1u) { acc[c] = acc[c] * alpha; }
            for (var jj: u32 = 0u; jj < BKEYS; jj = jj + 1u) {
                // Masked keys (outside the window too) add nothing, not even 0 * v (NaN when v is
                // infinite).
                if (j0 + jj >= lo && j0 + jj < vis) {
                    let pj = exp(sc[jj] - m_new);
                    l = l + pj;
                    for (var c: u32 = 0u; c < PER_LANE; c = c + 1u) {
                        acc[c] = acc[c] + pj * v_tile[jj * DMAX + lane + LANES * c];
                    }
                }
            }
            m = m_new;
        }
        workgroupBarrier();
    }

    if (in_range) {
        for (var c: u32 = 0u; c < PER_LANE; c = c + 1u) {
            let e = lane + LANES * c;
            if (e < dv) {
                // A row that sees no key outputs 0; a NaN sum (a NaN or +inf score) or a zero
                // one (every score -inf) gives NaN, as the reference's softmax does.
                out0[row * dv + e] = select(acc[c] / l, 0.0, vis == 0u);
            }
        }
    }
}

// Decode (`attn_decode`): a single query row (s == 1) over a KV cache of t keys. One workgroup
// per (batch, kv head) serves the `group` query heads that share it, so every key and value is
// read once per kv head (GQA without repeated K/V) and no lane idles on absent query rows.
// Keys go in chunks of CH: the threads split the chunk's keys for the scores, the per-head
// online-softmax statistics come from workgroup reductions, and the threads split the value
// dims to accumulate the output.
const GMAX: u32 = 8u;
const CH: u32 = 128u;
var<workgroup> q_sh: array<f32, 1024>;  // [GMAX][DMAX]
var<workgroup> sc_sh: array<f32, 1024>; // [GMAX][CH]

@compute @workgroup_size(64)
fn attn_decode(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let p = attention_params();
    let item = work_index(wid, nwg); // b * hkv + kv head
    if (item >= p.items) { return; }
    let t = p.seq_kv;
    let kv = p.kv_len;
    let d = p.head_dim;
    let dv = p.head_dim_v;
    let hq = p.heads_q;
    let group = p.group;
    let hkv = hq / group;
    let b = item / hkv;
    let kh = item % hkv;
    let k_base = item * t * d;
    let v_base = item * t * dv;
    let q_row0 = b * hq + kh * group; // first query head's row (s == 1)

    for (var idx: u32 = lid; idx < group * d; idx = idx + WG) {
        let g = idx / d;
        let e = idx % d;
        q_sh[g * DMAX + e] = q[(q_row0 + g) * d + e];
    }
    var acc: array<f32, 16>; // [GMAX][PER_THREAD]
    var m: array<f32, 8>;
    var l: array<f32, 8>;
    for (var g: u32 = 0u; g < GMAX; g = g + 1u) {
        m[g] = neg_inf();
        l[g] = 0.0;
        for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) { acc[g * PER_THREAD + c] = 0.0; }
    }
    workgroupBarrier();

    // One query row (s == 1): keys first_key(0)..kv.
    for (var j0: u32 = first_key(0u); j0 < kv; j0 = j0 + CH) {
        for (var jj: u32 = lid; jj < CH; jj = jj + WG) {
            let j = j0 + jj;
            for (var g: u32 = 0u; g < group; g = g + 1u) {
                var dot: f32 = 0.0;
                if (j < kv) {
                    for (var e: u32 = 0u; e < d; e = e + 1u) {
                        dot = dot + q_sh[g * DMAX + e] * k[k_base + j * d + e];
                    }
                }
                sc_sh[g * CH + jj] = select(neg_inf(), dot * p.scale, j < kv);
            }
        }
        workgroupBarrier();
        for (var g: u32 = 0u; g < group; g = g + 1u) {
            var tm = neg_inf();
            for (var jj: u32 = lid; jj < CH; jj = jj + WG) { tm = max(tm, sc_sh[g * CH + jj]); }
            // Every chunk holds at least one key (j0 < kv), so the max is finite.
            let m_new = max(m[g], wg_max(lid, tm));
            let alpha = select(exp(m[g] - m_new), 1.0, l[g] == 0.0);
            var ps: f32 = 0.0;
            for (var jj: u32 = lid; jj < CH; jj = jj + WG) {
                let pj = select(0.0, exp(sc_sh[g * CH + jj] - m_new), j0 + jj < kv);
                sc_sh[g * CH + jj] = pj;
                ps = ps + pj;
            }
            l[g] = l[g] * alpha + wg_sum(lid, ps);
            m[g] = m_new;
            for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
                acc[g * PER_THREAD + c] = acc[g * PER_THREAD + c] * alpha;
            }
        }
        workgroupBarrier();
        let jn = min(CH, kv - j0);
        for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
            let e = lid + WG * c;
            if (e < dv) {
                for (var jj: u32 = 0u; jj < jn; jj = jj + 1u) {
                    let vv = v[v_base + (j0 + jj) * dv + e];
                    for (var g: u32 = 0u; g < group; g = g + 1u) {
                        acc[g * PER_THREAD + c] = acc[g * PER_THREAD + c] + sc_sh[g * CH + jj] * vv;
                    }
                }
            }
        }
        workgroupBarrier();
    }

    for (var g: u32 = 0u; g < group; g = g + 1u) {
        for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
            let e = lid + WG * c;
            if (e < dv) {
                // No key: 0; a NaN or zero sum: NaN, as the reference (see attn_forward).
                out0[(q_row0 + g) * dv + e] = select(acc[g * PER_THREAD + c] / l[g], 0.0, kv == 0u);
            }
        }
    }
}

fn wg_sum(lid: u32, x: f32) -> f32 {
    sh[lid] = x;
    workgroupBarrier();
    for (var st: u32 = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) { sh[lid] = sh[lid] + sh[lid + st]; }
        workgroupBarrier();
    }
    let total = sh[0];
    workgroupBarrier();
    return total;
}

fn wg_max(lid: u32, x: f32) -> f32 {
    sh[lid] = x;
    workgroupBarrier();
    for (var st: u32 = WG / 2u; st > 0u; st = st >> 1u) {
        if (lid < st) { sh[lid] = max(sh[lid], sh[lid + st]); }
        workgroupBarrier();
    }
    let total = sh[0];
    workgroupBarrier();
    return total;
}

fn dot_qk(q_off: u32, k_off: u32, d: u32) -> f32 {
    var acc: f32 = 0.0;
    for (var e: u32 = 0u; e < d; e = e + 1u) { acc = acc + q[q_off + e] * k[k_off + e]; }
    return acc;
}

fn dot_gv(g_off: u32, v_off: u32, dv: u32) -> f32 {
    var acc: f32 = 0.0;
    for (var e: u32 = 0u; e < dv; e = e + 1u) { acc = acc + g[g_off + e] * v[v_off + e]; }
    return acc;
}

// One workgroup per query row (b, h, i): out0 = dq [b, hq, s, d]; stats written.
@compute @workgroup_size(64)
fn attn_dq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let p = attention_params();
    let row = work_index(wid, nwg);
    if (row >= p.items) { return; }
    let s = p.seq_q;
    let t = p.seq_kv;
    let d = p.head_dim;
    let dv = p.head_dim_v;
    let bh = row / s;
    let i = row % s;
    let b = bh / p.heads_q;
    let h = bh % p.heads_q;
    let hkv = p.heads_q / p.group;
    let kvh = b * hkv + h / p.group;
    let k_base = kvh * t * d;
    let v_base = kvh * t * dv;
    let vis = visible(i);
    let lo = first_key(i);

    var m = neg_inf();
    for (var j: u32 = lo + lid; j < vis; j = j + WG) {
        m = max(m, dot_qk(row * d, k_base + j * d, d) * p.scale);
    }
    m = wg_max(lid, m);
    var l: f32 = 0.0;
    for (var j: u32 = lo + lid; j < vis; j = j + WG) {
        l = l + exp(dot_qk(row * d, k_base + j * d, d) * p.scale - m);
    }
    l = wg_sum(lid, l);
    var delta: f32 = 0.0;
    for (var j: u32 = lo + lid; j < vis; j = j + WG) {
        let pj = exp(dot_qk(row * d, k_base + j * d, d) * p.scale - m) / l;
        delta = delta + pj * dot_gv(row * dv, v_base + j * dv, dv);
    }
    delta = wg_sum(lid, delta);
    if (lid == 0u) {
        stats[row * 4u] = m;
        stats[row * 4u + 1u] = l;
        stats[row * 4u + 2u] = delta;
        stats[row * 4u + 3u] = 0.0;
    }

    var acc: array<f32, 2>;
    for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) { acc[c] = 0.0; }
    for (var j0: u32 = lo; j0 < vis; j0 = j0 + WG) {
        let j = j0 + lid;
        var ds: f32 = 0.0;
        if (j < vis) {
            let pj = exp(dot_qk(row * d, k_base + j * d, d) * p.scale - m) / l;
            ds = pj * (dot_gv(row * dv, v_base + j * dv, dv) - delta) * p.scale;
        }
        sh2[lid] = ds;
        workgroupBarrier();
        let n = min(WG, vis - j0);
        for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
            let e = lid + WG * c;
            if (e < d) {
                for (var jj: u32 = 0u; jj < n; jj = jj + 1u) {
                    acc[c] = acc[c] + sh2[jj] * k[k_base + (j0 + jj) * d + e];
                }
            }
        }
        workgroupBarrier();
    }
    for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
        let e = lid + WG * c;
        if (e < d) { out0[row * d + e] = acc[c]; }
    }
}

// One workgroup per key (b, kv head, j): out0 = dk [b, hkv, t, d], out1 = dv [b, hkv, t, dv].
// Reads the stats `attn_dq` wrote.
@compute @workgroup_size(64)
fn attn_dkv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let p = attention_params();
    let key = work_index(wid, nwg);
    if (key >= p.items) { return; }
    let s = p.seq_q;
    let t = p.seq_kv;
    let d = p.head_dim;
    let dv = p.head_dim_v;
    let group = p.group;
    let hkv = p.heads_q / group;
    let kvh = key / t;                // b * hkv + kv head
    let j = key % t;
    let b = kvh / hkv;
    let first_head = (kvh % hkv) * group;
    let k_off = key * d;
    let v_off = key * dv;

    var acc_k: array<f32, 2>;
    var acc_v: array<f32, 2>;
    for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
        acc_k[c] = 0.0;
        acc_v[c] = 0.0;
    }
    let rows = group * s;
    for (var r0: u32 = 0u; r0 < rows; r0 = r0 + WG) {
        let r = r0 + lid;
        var pj: f32 = 0.0;
        var ds: f32 = 0.0;
        if (r < rows) {
            let i = r % s;
            let row = (b * p.heads_q + first_head + r / s) * s + i;
            if (j >= first_key(i) && j < visible(i)) {
                let m = stats[row * 4u];
                let l = stats[row * 4u + 1u];
                let delta = stats[row * 4u + 2u];
                pj = exp(dot_qk(row * d, k_off, d) * p.scale - m) / l;
                ds = pj * (dot_gv(row * dv, v_off, dv) - delta) * p.scale;
            }
        }
        sh[lid] = pj;
        sh2[lid] = ds;
        workgroupBarrier();
        let n = min(WG, rows - r0);
        for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
            let e = lid + WG * c;
            for (var rr: u32 = 0u; rr < n; rr = rr + 1u) {
                let r2 = r0 + rr;
                // Rows that do not see key j add nothing, not even 0 * q (NaN for infinite q).
                if (j >= visible(r2 % s)) { continue; }
                let row2 = (b * p.heads_q + first_head + r2 / s) * s + r2 % s;
                if (e < d) { acc_k[c] = acc_k[c] + sh2[rr] * q[row2 * d + e]; }
                if (e < dv) { acc_v[c] = acc_v[c] + sh[rr] * g[row2 * dv + e]; }
            }
        }
        workgroupBarrier();
    }
    for (var c: u32 = 0u; c < PER_THREAD; c = c + 1u) {
        let e = lid + WG * c;
        if (e < d) { out0[k_off + e] = acc_k[c]; }
        if (e < dv) { out1[v_off + e] = acc_v[c]; }
    }
}
