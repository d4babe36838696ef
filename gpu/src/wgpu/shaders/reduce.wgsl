// Reductions over the last dim: sum, mean, max (op code OP), argmax and sample, forward and
// backward.
// One workgroup per row, a strided pass per thread, then a tree reduction in workgroup memory.
// The grid is 2-D so more than 65,535 rows can be launched. `row_sum` comes from the
// row-reduction prelude the backend prepends; max and argmax share one (value, index) tree.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

// 0 sum, 1 mean, 2 max.
override OP: u32 = 0u;
const WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out_idx: array<i32>;

var<workgroup> sh_v: array<f32, 256>;
var<workgroup> sh_i: array<u32, 256>;

fn row_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Whether candidate (v, i) beats the current best (bv, bi): NaN beats numbers (a row holding
// NaN has its max at the first NaN, as the CPU reference and PyTorch), then larger values, then
// the lower index on ties. bi == NONE means no best yet.
const NONE: u32 = 0xffffffffu;
fn beats(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    if (i == NONE) { return false; }
    if (bi == NONE) { return true; }
    let vn = is_nan(v);
    let bn = is_nan(bv);
    if (vn || bn) { return vn && (!bn || i < bi); }
    return v > bv || (v == bv && i < bi);
}

// Index of the first maximum of row `base..base+n` (see `beats`).
fn wg_argmax(lid: u32, base: u32, n: u32) -> u32 {
    var best_v: f32 = 0.0;
    var best_i: u32 = NONE;
    for (var j: u32 = lid; j < n; j = j + WG) {
        let v = in0[base + j];
        if (beats(v, j, best_v, best_i)) { best_v = v; best_i = j; }
    }
    sh_v[lid] = best_v;
    sh_i[lid] = best_i;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let ov = sh_v[lid + s];
            let oi = sh_i[lid + s];
            let v = sh_v[lid];
            let i = sh_i[lid];
            if (beats(ov, oi, v, i)) {
                sh_v[lid] = ov;
                sh_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    let r = sh_i[0];
    workgroupBarrier();
    return r;
}

// in0 = x [rows, n]; out0 = [rows].
@compute @workgroup_size(256)
fn reduce_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let p = rows_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let base = row * n;
    if (OP == REDUCE_MAX) {
        // The value at the first maximum (NaN when the row holds one), as reduce_backward's.
        let at = wg_argmax(lid, base, n);
        if (lid == 0u) { out0[row] = in0[base + at]; }
        return;
    }
    var acc: f32 = 0.0;
    for (var j: u32 = lid; j < n; j = j + WG) { acc = acc + in0[base + j]; }
    let total = row_sum(lid, acc);
    if (lid == 0u) {
        switch OP {
            case REDUCE_SUM: { out0[row] = total; }
            case REDUCE_MEAN: { out0[row] = total / f32(n); }
            default: { out0[row] = kernel_nan(); }
        }
    }
}

// in0 = x [rows, n]; out_idx = [rows] (i32).
@compute @workgroup_size(256)
fn argmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let p = rows_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let i = wg_argmax(lid, row * n, n);
    if (lid == 0u) { out_idx[row] = i32(i); }
}

// in0 = x [rows, n], in2 = grad_out [rows]; out0 = grad_x [rows, n].
@compute @workgroup_size(256)
fn reduce_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let p = rows_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let base = row * n;
    let g = in2[row];
    if (OP == REDUCE_MAX) {
        let at = wg_argmax(lid, base, n);
        for (var j: u32 = lid; j < n; j = j + WG) { out0[base + j] = select(0.0, g, j == at); }
        return;
    }
    var v = kernel_nan();
    switch OP {
        case REDUCE_SUM: { v = g; }
        case REDUCE_MEAN: { v = g / f32(n); }
        default: {}
    }
    for (var j: u32 = lid; j < n; j = j + WG) { out0[base + j] = v; }
}

// ---- sample: the definition is kernels-core's cpu/sample.rs; here by reductions over a row ----

// f32 -> u32 with the same order (for finite values and infinities).
fn order_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if ((b & 0x80000000u) != 0u) { return ~b; }
    return b | 0x80000000u;
}

// Lowest index of a NaN in the row, or NONE.
fn wg_first_nan(lid: u32, base: u32, n: u32) -> u32 {
    var first: u32 = NONE;
    for (var j: u32 = lid; j < n; j = j + WG) {
        let v = in0[base + j];
        if (v != v && first == NONE) { first = j; }
    }
    sh_i[lid] = first;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh_i[lid] = min(sh_i[lid], sh_i[lid + s]); }
        workgroupBarrier();
    }
    let r = sh_i[0];
    workgroupBarrier();
    return r;
}

// Values every thread holds after a reduction, made uniform for the WGSL uniformity analysis
// (Chrome's Tint rejects a barrier under control flow that depends on workgroup memory, and
// then the whole module; naga lets it through, so native tests cannot see it). Every thread
// holds the same value; thread 0's is broadcast.
var<workgroup> bc_u: u32;
var<workgroup> bc_f: f32;

fn uniform_u(lid: u32, v: u32) -> u32 {
    if (lid == 0u) { bc_u = v; }
    return workgroupUniformLoad(&bc_u);
}

fn uniform_f(lid: u32, v: f32) -> f32 {
    if (lid == 0u) { bc_f = v; }
    return workgroupUniformLoad(&bc_f);
}

// Weight of logit v: exp((v - m) / t) when its key clears both thresholds, else 0.
fn sample_weight(v: f32, m: f32, t: f32, keep_from: u32) -> f32 {
    if (order_key(v) < keep_from) { return 0.0; }
    return exp((v - m) / t);
}

// in0 = logits [rows, n], in1 = uniform [rows]; out_idx = ids [rows] (i32).
@compute @workgroup_size(256)
fn sample(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let p = sample_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let base = row * n;
    let t = p.temperature;
    let nan_at = uniform_u(lid, wg_first_nan(lid, base, n));
    if (nan_at != NONE) {
        if (lid == 0u) { out_idx[row] = i32(nan_at); }
        return;
    }
    let best = wg_argmax(lid, base, n);
    if (t == 0.0) {
        if (lid == 0u) { out_idx[row] = i32(best); }
        return;
    }
    let m = in0[base + best];
    // top-k: the largest key t_k with count(key >= t_k) >= k (the k-th largest), bit by bit.
    var keep_from: u32 = 0u;
    let k = p.top_k;
    if (k > 0u && k < n) {
        var tk: u32 = 0u;
        for (var bit: i32 = 31; bit >= 0; bit = bit - 1) {
            let cand = tk | (1u << u32(bit));
            var c: f32 = 0.0;
            for (var j: u32 = lid; j < n; j = j + WG) {
                if (order_key(in0[base + j]) >= cand) { c = c + 1.0; }
            }
            if (uniform_f(lid, row_sum(lid, c)) >= f32(k)) { tk = cand; }
        }
        keep_from = tk;
    }
    // top-p: the smallest key t_p with mass(key > t_p) < top_p * mass (largest with >= , + 1).
    if (p.top_p < 1.0) {
        var z: f32 = 0.0;
        for (var j: u32 = lid; j < n; j = j + WG) { z = z + sample_weight(in0[base + j], m, t, keep_from); }
        let limit = p.top_p * uniform_f(lid, row_sum(lid, z));
        var t0: u32 = 0u;
        var found = false;
        for (var bit: i32 = 31; bit >= 0; bit = bit - 1) {
            let cand = t0 | (1u << u32(bit));
            var above: f32 = 0.0;
            for (var j: u32 = lid; j < n; j = j + WG) {
                let v = in0[base + j];
                if (order_key(v) > cand) { above = above + sample_weight(v, m, t, keep_from); }
            }
            if (uniform_f(lid, row_sum(lid, above)) >= limit) { t0 = cand; found = true; }
        }
        // t0 = 0 is the one candidate never tested: mass above key 0 is the whole row's.
        var tp: u32 = 0u;
        if (found) { tp = t0 + 1u; } else {
            var above0: f32 = 0.0;
            for (var j: u32 = lid; j < n; j = j + WG) {
                let v = in0[base + j];
                if (order_key(v) > 0u) { above0 = above0 + sample_weight(v, m, t, keep_from); }
            }
            if (uniform_f(lid, row_sum(lid, above0)) >= limit) { tp = 1u; }
        }
        keep_from = max(keep_from, tp);
    }
    // Draw: contiguous chunks per thread, a serial walk over the chunk sums, then in the chunk.
    let chunk = (n + WG - 1u) / WG;
    let lo = min(lid * chunk, n);
    let hi = min(lo + chunk, n);
    var part: f32 = 0.0;
    for (var j: u32 = lo; j < hi; j = j + 1u) { part = part + sample_weight(in0[base + j], m, t, keep_from); }
    let total = row_sum(lid, part);
    sh_v[lid] = part;
    workgroupBarrier();
    if (lid == 0u) {
        let goal = in1[row] * total;
        var acc: f32 = 0.0;
        var c: u32 = 0u;
        loop {
            if (c + 1u >= WG || acc + sh_v[c] > goal) { break; }
            acc = acc + sh_v[c];
            c = c + 1u;
        }
        var pick: u32 = best;
        var done = false;
        for (var j: u32 = min(c * chunk, n); j < n && !done; j = j + 1u) {
            let w = sample_weight(in0[base + j], m, t, keep_from);
            if (w > 0.0) {
                acc = acc + w;
                pick = j;
                if (acc > goal) { done = true; }
            }
        }
        out_idx[row] = i32(pick);
    }
}
