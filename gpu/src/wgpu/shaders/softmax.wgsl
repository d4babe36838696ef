// softmax / log_softmax over the last dim, forward and backward. One workgroup per row with a
// workgroup reduction for the max and the sums. CAUSAL masks key j > i + (t - s) for x
// [..., s, t] (row i of each [s, t] block); masked outputs are 0 (softmax) or -inf (log_softmax)
// and get zero gradient. `row_sum` / `row_max` come from the row-reduction prelude the backend
// prepends (subgroup operations where the adapter has them, else workgroup memory).

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override LOG: bool = false;
override CAUSAL: bool = false;
const WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;

fn neg_inf() -> f32 {
    // A `var` keeps the constant evaluator from rejecting the non-finite value.
    var bits: u32 = 0xff800000u;
    return bitcast<f32>(bits);
}

fn row_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Number of unmasked keys of this row: keys 0..valid are visible.
fn valid_len(row: u32) -> u32 {
    let p = softmax_params();
    let t = p.cols;
    if (!CAUSAL) { return t; }
    let s = p.seq;
    let i = i32(row % s);
    let lim = i + i32(t) - i32(s); // last visible key
    if (lim < 0) { return 0u; }
    return min(u32(lim) + 1u, t);
}

// in0 = x [rows, t]; out0 [rows, t]. t = p.cols, s = p.seq
@compute @workgroup_size(256)
fn softmax_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let p = softmax_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let t = p.cols;
    let base = row * t;
    let valid = valid_len(row);
    var m = neg_inf();
    for (var j: u32 = lid; j < valid; j = j + WG) { m = max(m, in0[base + j]); }
    m = row_max(lid, m);
    var acc: f32 = 0.0;
    for (var j: u32 = lid; j < valid; j = j + WG) { acc = acc + exp(in0[base + j] - m); }
    let total = row_sum(lid, acc);
    let log_total = log(total);
    for (var j: u32 = lid; j < t; j = j + WG) {
        let x = in0[base + j];
        if (j < valid) {
            if (LOG) { out0[base + j] = x - m - log_total; } else { out0[base + j] = exp(x - m) / total; }
        } else {
            if (LOG) { out0[base + j] = neg_inf(); } else { out0[base + j] = 0.0; }
        }
    }
}

// in0 = x, in1 = y (forward output), in2 = grad_y; out0 = grad_x. p as forward.
@compute @workgroup_size(256)
fn softmax_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32) {
    let p = softmax_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let t = p.cols;
    let base = row * t;
    let valid = valid_len(row);
    var acc: f32 = 0.0;
    for (var j: u32 = lid; j < valid; j = j + WG) {
        if (LOG) { acc = acc + in2[base + j]; } else { acc = acc + in2[base + j] * in1[base + j]; }
    }
    let dot = row_sum(lid, acc);
    for (var j: u32 = lid; j < t; j = j + WG) {
        var gx: f32 = 0.0;
        if (j < valid) {
            let y = in1[base + j];
            let g = in2[base + j];
            if (LOG) { gx = g - exp(y) * dot; } else { gx = y * (g - dot); }
        }
        out0[base + j] = gx;
    }
}
