// Data movement: transpose of the last two dims, concat on the last dim and its split, and
// embedding lookup with its scatter-free backward. One thread per output element; a 2-D grid
// so more than 65,535 workgroups can be launched. Exact: no arithmetic except the embedding
// gradient's sums (in token order, as the CPU reference).

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(4) var<storage, read> ids: array<i32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// in0 = x [batch, r, c]; out0 = [batch, c, r]. r = p.rows, c = p.cols
@compute @workgroup_size(WG)
fn transpose(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let p = transpose_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let r = p.rows;
    let c = p.cols;
    let plane = r * c;
    let b = o / plane;
    let rem = o % plane;
    let ci = rem / r;
    let ri = rem % r;
    out0[o] = in0[b * plane + ri * c + ci];
}

// in0 = a [rows, m], in1 = b [rows, k]; out0 = [rows, m + k]. m = p.width_a, k = p.width_b
@compute @workgroup_size(WG)
fn concat(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let p = concat_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let m = p.width_a;
    let k = p.width_b;
    let w = m + k;
    let row = o / w;
    let j = o % w;
    if (j < m) { out0[o] = in0[row * m + j]; } else { out0[o] = in1[row * k + (j - m)]; }
}

// in0 = grad_out [rows, m + k]; out0 = grad_a [rows, m], out1 = grad_b [rows, k]. p as concat.
@compute @workgroup_size(WG)
fn concat_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let p = concat_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let m = p.width_a;
    let k = p.width_b;
    let w = m + k;
    let row = o / w;
    let j = o % w;
    if (j < m) { out0[row * m + j] = in0[o]; } else { out1[row * k + (j - m)] = in0[o]; }
}

// kv_write: rows [heads, s, d] into a cache [heads, cap, d] at positions pos..pos + s.
// s = p.rows, d = p.width, cap = p.cap. In place: in0 = rows; out0 = the cache itself (donated),
// one thread per row element, the rest of the cache untouched.
@compute @workgroup_size(WG)
fn kv_write(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let p = kv_write_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let per = p.rows * p.width;
    let head = o / per;
    out0[head * p.cap * p.width + p.pos * p.width + o % per] = in0[o];
}

// Out of place: in0 = cache, in1 = rows; out0 = [heads, cap, d], one thread per cache element.
@compute @workgroup_size(WG)
fn kv_write_copy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let p = kv_write_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let per = p.cap * p.width;
    let head = o / per;
    let r = o % per;
    let lo = p.pos * p.width;
    let hi = lo + p.rows * p.width;
    if (r >= lo && r < hi) {
        out0[o] = in1[head * p.rows * p.width + (r - lo)];
    } else {
        out0[o] = in0[o];
    }
}

// in0 = grad_out [heads, cap, d]; out0 = grad_cache (the written rows zeroed), out1 = grad_rows
// [heads, s, d]. One thread per grad_out element.
@compute @workgroup_size(WG)
fn kv_write_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let p = kv_write_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let per = p.cap * p.width;
    let head = o / per;
    let r = o % per;
    let lo = p.pos * p.width;
    let hi = lo + p.rows * p.width;
    if (r >= lo && r < hi) {
        out0[o] = 0.0;
        out1[head * p.rows * p.width + (r - lo)] = in0[o];
    } else {
        out0[o] = in0[o];
    }
}

// ids [tokens] (i32), in0 = weight [vocab, d]; out0 = [tokens, d]. Ids were range-checked on
// the host; an out-of-range id reads as zeros rather than out of bounds.
// p.n = tokens * d, d = p.dim
@compute @workgroup_size(WG)
fn embedding(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let p = embedding_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let d = p.dim;
    let id = ids[o / d];
    if (id < 0 || u32(id) >= p.vocab) {
        // Out of range: 0, written by the launch that holds the table's first rows.
        if (p.first == 0u) { out0[o] = 0.0; }
        return;
    }
    let row = u32(id);
    if (row < p.first || row - p.first >= p.rows) { return; }
    out0[o] = in0[(row - p.first) * d + (o % d)];
}

// ids [tokens], in0 = grad_out [tokens, d]; out0 = grad_weight [vocab, d]: each thread owns one
// weight element and sums the tokens that picked its row (deterministic, no atomics).
// p.n = vocab * d, d = p.dim
@compute @workgroup_size(WG)
fn embedding_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let p = embedding_grad_params();
    let o = flat_index(wid, nwg, lid);
    if (o >= p.n) { return; }
    let d = p.dim;
    let v = i32(o / d);
    let col = o % d;
    var acc: f32 = 0.0;
    for (var t: u32 = 0u; t < p.tokens; t = t + 1u) {
        if (ids[t] == v) { acc = acc + in0[t * d + col]; }
    }
    out0[o] = acc;
}
