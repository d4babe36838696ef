// layer_norm and rms_norm over the last dim (RMS selects), forward and backward. One workgroup
// per row with workgroup reductions; the backward writes grad_x and per-row statistics in one
// pass, then a second kernel sums grad_weight / grad_bias over rows, one thread per column, in
// row order. `row_sum` comes from the row-reduction prelude the backend prepends.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override RMS: bool = false;
override WG1: u32 = 256u;
const WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;

fn row_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// (mean, 1/sqrt(var + eps)) of a layer_norm row, or (0, 1/sqrt(mean(x^2) + eps)) for rms_norm.
// Two passes (mean, then squared deviations) for accuracy.
fn row_stats(lid: u32, base: u32, n: u32) -> vec2<f32> {
    let p = norm_params();
    let eps = p.eps;
    var mean: f32 = 0.0;
    if (!RMS) {
        var acc: f32 = 0.0;
        for (var j: u32 = lid; j < n; j = j + WG) { acc = acc + in0[base + j]; }
        mean = row_sum(lid, acc) / f32(n);
    }
    var sq: f32 = 0.0;
    for (var j: u32 = lid; j < n; j = j + WG) {
        let d = in0[base + j] - mean;
        sq = sq + d * d;
    }
    let var_ = row_sum(lid, sq) / f32(n);
    return vec2<f32>(mean, 1.0 / sqrt(var_ + eps));
}

// in0 = x [rows, n], in1 = weight [n], in2 = bias [n] (layer_norm); out0 [rows, n].
@compute @workgroup_size(256)
fn norm_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = norm_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let base = row * n;
    let st = row_stats(lid, base, n);
    for (var j: u32 = lid; j < n; j = j + WG) {
        let xhat = (in0[base + j] - st.x) * st.y;
        if (RMS) { out0[base + j] = xhat * in1[j]; } else { out0[base + j] = xhat * in1[j] + in2[j]; }
    }
}

// in0 = x, in1 = weight, in2 = grad_out; out0 = grad_x, out1 = stats [rows, 2] (mean, rstd).
@compute @workgroup_size(256)
fn norm_backward_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let p = norm_params();
    let row = row_index(wid, nwg);
    if (row >= p.rows) { return; }
    let n = p.cols;
    let base = row * n;
    let st = row_stats(lid, base, n);
    let mean = st.x;
    let rstd = st.y;
    // layer_norm: gx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w.
    // rms_norm:   gx = rstd * gh - x * rstd^3 * mean(gh * x).
    var s1: f32 = 0.0;
    var s2: f32 = 0.0;
    for (var j: u32 = lid; j < n; j = j + WG) {
        let gh = in2[base + j] * in1[j];
        let xhat = (in0[base + j] - mean) * rstd;
        s1 = s1 + gh;
        s2 = s2 + gh * xhat;
    }
    let m1 = row_sum(lid, s1) / f32(n);
    let m2 = row_sum(lid, s2) / f32(n);
    for (var j: u32 = lid; j < n; j = j + WG) {
        let gh = in2[base + j] * in1[j];
        let xhat = (in0[base + j] - mean) * rstd;
        if (RMS) {
            out0[base + j] = rstd * (gh - xhat * m2);
        } else {
            // gh - m1 is exactly 0 over a row of one (NaN where gh is not finite); computed, a
            // driver that contracts it into fma(g, w, -m1) leaves g * w's rounding error, which
            // rstd (up to 1 / sqrt(eps)) then magnifies.
            let centered = select(gh - m1, 0.0 * gh, n == 1u);
            out0[base + j] = rstd * (centered - xhat * m2);
        }
    }
    if (lid == 0u) {
        out1[2u * row] = mean;
        out1[2u * row + 1u] = rstd;
    }
}

// in0 = x [rows, n], in1 = grad_out, in2 = stats; out0 = grad_weight [n], out1 = grad_bias [n]
// (layer_norm only). One thread per column.
@compute @workgroup_size(WG1)
fn norm_backward_cols(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                      @builtin(local_invocation_index) lid: u32) {
    let p = norm_params();
    let j = (wid.y * nwg.x + wid.x) * WG1 + lid;
    let rows = p.rows;
    let n = p.cols;
    if (j >= n) { return; }
    var gw: f32 = 0.0;
    var gb: f32 = 0.0;
    for (var r: u32 = 0u; r < rows; r = r + 1u) {
        let g = in1[r * n + j];
        let xhat = (in0[r * n + j] - in2[2u * r]) * in2[2u * r + 1u];
        gw = gw + g * xhat;
        gb = gb + g;
    }
    out0[j] = gw;
    if (!RMS) { out1[j] = gb; }
}
