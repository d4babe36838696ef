// Losses: cross-entropy over class logits and mean squared error, forward and backward.
// Forward is two steps: one workgroup per row (cross-entropy) or per chunk (mse) writes a
// partial sum, then one workgroup adds the partials in a fixed tree order and scales by 1/N
// (`sum_scale`). Backward is one workgroup per row (cross-entropy: the row's max and sum are
// recomputed) or one thread per element (mse).

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

const WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(4) var<storage, read> targets: array<i32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;

var<workgroup> sh: array<f32, 256>;

fn neg_inf() -> f32 {
    var bits: u32 = 0xff800000u;
    return bitcast<f32>(bits);
}

fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

fn wg_sum(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = sh[lid] + sh[lid + s]; }
        workgroupBarrier();
    }
    let total = sh[0];
    workgroupBarrier();
    return total;
}

fn wg_max(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = max(sh[lid], sh[lid + s]); }
        workgroupBarrier();
    }
    let total = sh[0];
    workgroupBarrier();
    return total;
}

// The row's target class, clamped into range (targets made on the device are not checked on
// the host; an out-of-range one must not read outside the row).
fn target_of(row: u32, c: u32) -> u32 {
    let k = targets[row];
    return u32(clamp(k, 0, i32(c) - 1));
}

// in0 = logits [rows, c], targets [rows]; out0 = per-row loss [rows].
@compute @workgroup_size(256)
fn ce_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let p = cross_entropy_params();
    let row = group_index(wid, nwg);
    if (row >= p.rows) { return; }
    let c = p.classes;
    let base = row * c;
    var m = neg_inf();
    for (var j: u32 = lid; j < c; j = j + WG) { m = max(m, in0[base + j]); }
    m = wg_max(lid, m);
    var s: f32 = 0.0;
    for (var j: u32 = lid; j < c; j = j + WG) { s = s + exp(in0[base + j] - m); }
    s = wg_sum(lid, s);
    if (lid == 0u) {
        let xk = in0[base + target_of(row, c)];
        // -log softmax(x)_k = ln sum exp(x - m) - (x_k - m)
        out0[row] = log(s) - (xk - m);
    }
}

// in0 = partials [n]; out0 = [1] = sum * p.scale. One workgroup.
@compute @workgroup_size(256)
fn sum_scale(@builtin(local_invocation_index) lid: u32) {
    let p = sum_scale_params();
    var s: f32 = 0.0;
    for (var j: u32 = lid; j < p.n; j = j + WG) { s = s + in0[j]; }
    s = wg_sum(lid, s);
    if (lid == 0u) { out0[0] = s * p.scale; }
}

// in0 = logits [rows, c], in2 = grad_out [1], targets; out0 = grad_logits [rows, c].
// p.scale = 1 / rows
@compute @workgroup_size(256)
fn ce_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let p = cross_entropy_params();
    let row = group_index(wid, nwg);
    if (row >= p.rows) { return; }
    let c = p.classes;
    let base = row * c;
    var m = neg_inf();
    for (var j: u32 = lid; j < c; j = j + WG) { m = max(m, in0[base + j]); }
    m = wg_max(lid, m);
    var s: f32 = 0.0;
    for (var j: u32 = lid; j < c; j = j + WG) { s = s + exp(in0[base + j] - m); }
    s = wg_sum(lid, s);
    let k = target_of(row, c);
    let scale = in2[0] * p.scale;
    for (var j: u32 = lid; j < c; j = j + WG) {
        let prob = exp(in0[base + j] - m) / s;
        out0[base + j] = (prob - select(0.0, 1.0, j == k)) * scale;
    }
}

// in0 = a, in1 = b, each [n] viewed as chunks of p.chunk; out0 = per-chunk sum of (a - b)^2.
@compute @workgroup_size(256)
fn mse_chunks(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let p = mse_chunks_params();
    let chunk = group_index(wid, nwg);
    let start = chunk * p.chunk;
    if (start >= p.n) { return; }
    let end = min(start + p.chunk, p.n);
    var s: f32 = 0.0;
    for (var j: u32 = start + lid; j < end; j = j + WG) {
        let d = in0[j] - in1[j];
        s = s + d * d;
    }
    s = wg_sum(lid, s);
    if (lid == 0u) { out0[chunk] = s; }
}

// in0 = a, in1 = b, in2 = grad_out [1]; out0 = grad_a, out1 = grad_b.
// p.scale = 2 / n
@compute @workgroup_size(256)
fn mse_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = mse_grad_params();
    let i = group_index(wid, nwg) * WG + lid;
    if (i >= p.n) { return; }
    let d = (in0[i] - in1[i]) * (in2[0] * p.scale);
    out0[i] = d;
    out1[i] = -d;
}
