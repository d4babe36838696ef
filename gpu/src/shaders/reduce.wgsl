// Reductions over the last dim: sum, mean, max (op code OP) and argmax, forward and backward.
// One workgroup per row, a strided pass per thread, then a tree reduction in workgroup memory.
// The grid is 2-D so more than 65,535 rows can be launched. `row_sum` / `row_max` come from
// the row-reduction prelude the backend prepends; argmax keeps its own (value, index) tree.

struct Params {
    u0: u32, u1: u32, u2: u32, u3: u32, u4: u32, u5: u32, u6: u32, u7: u32,
    f0: f32, f1: f32, f2: f32, f3: f32, f4: f32, f5: f32, f6: f32, f7: f32,
}

// 0 sum, 1 mean, 2 max.
override OP: u32 = 0u;
const WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out_idx: array<i32>;

var<workgroup> sh_v: array<f32, 256>;
var<workgroup> sh_i: array<u32, 256>;

// A start value for a row max that is an element of the row (threads past the row's end
// contribute it without changing the result, and no -inf constant is needed).
fn row_first(base: u32, n: u32) -> f32 {
    return in0[base];
}

fn row_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Index of the first maximum of row `base..base+n` (ties go to the lower index).
const NONE: u32 = 0xffffffffu;
fn wg_argmax(lid: u32, base: u32, n: u32) -> u32 {
    var best_v: f32 = 0.0;
    var best_i: u32 = NONE;
    for (var j: u32 = lid; j < n; j = j + WG) {
        let v = in0[base + j];
        if (best_i == NONE || v > best_v) { best_v = v; best_i = j; }
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
            let take = oi != NONE && (i == NONE || ov > v || (ov == v && oi < i));
            if (take) {
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

// in0 = x [rows, n]; out0 = [rows]. p.u0 = rows, p.u1 = n
@compute @workgroup_size(256)
fn reduce_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let row = row_index(wid, nwg);
    if (row >= p.u0) { return; }
    let n = p.u1;
    let base = row * n;
    if (OP == 2u) {
        var m = row_first(base, n);
        for (var j: u32 = lid; j < n; j = j + WG) { m = max(m, in0[base + j]); }
        let total = row_max(lid, m);
        if (lid == 0u) { out0[row] = total; }
        return;
    }
    var acc: f32 = 0.0;
    for (var j: u32 = lid; j < n; j = j + WG) { acc = acc + in0[base + j]; }
    let total = row_sum(lid, acc);
    if (lid == 0u) {
        if (OP == 1u) { out0[row] = total / f32(n); } else { out0[row] = total; }
    }
}

// in0 = x [rows, n]; out_idx = [rows] (i32). p.u0 = rows, p.u1 = n
@compute @workgroup_size(256)
fn argmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let row = row_index(wid, nwg);
    if (row >= p.u0) { return; }
    let n = p.u1;
    let i = wg_argmax(lid, row * n, n);
    if (lid == 0u) { out_idx[row] = i32(i); }
}

// in0 = x [rows, n], in2 = grad_out [rows]; out0 = grad_x [rows, n]. p.u0 = rows, p.u1 = n
@compute @workgroup_size(256)
fn reduce_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let row = row_index(wid, nwg);
    if (row >= p.u0) { return; }
    let n = p.u1;
    let base = row * n;
    let g = in2[row];
    if (OP == 2u) {
        let at = wg_argmax(lid, base, n);
        for (var j: u32 = lid; j < n; j = j + WG) { out0[base + j] = select(0.0, g, j == at); }
        return;
    }
    var v = g;
    if (OP == 1u) { v = g / f32(n); }
    for (var j: u32 = lid; j < n; j = j + WG) { out0[base + j] = v; }
}
