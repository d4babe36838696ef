// The small steps of svd_lowrank, on the device, so the op needs no readback (the browser
// cannot block on one). Each follows the CPU reference (kernels-core/src/cpu/svd.rs) step for
// step, in the same order, so results agree within rounding:
//   orth_columns: modified Gram-Schmidt twice, with the reference's replacement of dependent
//                 columns by the best standard basis vector;
//   jacobi:       one-sided (Hestenes) Jacobi SVD of b [q, n], the same pair order and stopping
//                 rule, singular values sorted descending (stable), completing orthonormal
//                 vectors for zero singular values;
//   fix_signs:    the largest-magnitude entry of each u column made positive.
// One workgroup per matrix (per column for fix_signs). Decisions that gate barriers are read
// back with workgroupUniformLoad so they are uniform. Every thread owns the same strided set
// of rows in every loop over a vector's elements, so those loops need no barrier between them;
// phases that change the partition (the column permutation) use storageBarrier.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

const WG: u32 = 64u;
// Largest q the jacobi kernel keeps per-vector state for (the host checks it).
const MAX_Q: u32 = 256u;
// Cap on Jacobi sweeps, as in the reference.
const MAX_SWEEPS: u32 = 60u;
const F32_EPS: f32 = 1.1920929e-7;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;

var<workgroup> sh: array<f32, 64>;
var<workgroup> sh3: array<vec3<f32>, 64>;
var<workgroup> sh_i: array<u32, 64>;
var<workgroup> bc_f: f32;
var<workgroup> bc_v: vec3<f32>;
var<workgroup> bc_u: u32;
var<workgroup> sig: array<f32, 256>;
var<workgroup> pos: array<u32, 256>;
var<workgroup> tmp: array<f32, 256>;

fn is_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

fn nan() -> f32 {
    var bits: u32 = 0x7fc00000u;
    return bitcast<f32>(bits);
}

fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}

// Sum of one value per thread; every thread gets the same (uniform) result.
fn wg_sum(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = sh[lid] + sh[lid + s]; }
        workgroupBarrier();
    }
    if (lid == 0u) { bc_f = sh[0]; }
    return workgroupUniformLoad(&bc_f);
}

fn wg_sum3(lid: u32, v: vec3<f32>) -> vec3<f32> {
    sh3[lid] = v;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh3[lid] = sh3[lid] + sh3[lid + s]; }
        workgroupBarrier();
    }
    if (lid == 0u) { bc_v = sh3[0]; }
    return workgroupUniformLoad(&bc_v);
}

fn wg_max(lid: u32, v: f32) -> f32 {
    sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { sh[lid] = max(sh[lid], sh[lid + s]); }
        workgroupBarrier();
    }
    if (lid == 0u) { bc_f = sh[0]; }
    return workgroupUniformLoad(&bc_f);
}

// Index of the first maximum of one (value, index) candidate per thread (NONE = no candidate).
const NONE: u32 = 0xffffffffu;
fn wg_argmax(lid: u32, v: f32, i: u32) -> u32 {
    sh[lid] = v;
    sh_i[lid] = i;
    workgroupBarrier();
    for (var s: u32 = WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let ov = sh[lid + s];
            let oi = sh_i[lid + s];
            let cv = sh[lid];
            let ci = sh_i[lid];
            if (oi != NONE && (ci == NONE || ov > cv || (ov == cv && oi < ci))) {
                sh[lid] = ov;
                sh_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid == 0u) { bc_u = sh_i[0]; }
    return workgroupUniformLoad(&bc_u);
}

// ---- vectors in out0: element i of vector j at base + i * rs + j * cs ------------------------

fn at(base: u32, rs: u32, cs: u32, i: u32, j: u32) -> u32 {
    return base + i * rs + j * cs;
}

fn dot_cols(lid: u32, base: u32, rs: u32, cs: u32, len: u32, a: u32, b: u32) -> f32 {
    var acc: f32 = 0.0;
    for (var i: u32 = lid; i < len; i = i + WG) {
        acc = acc + out0[at(base, rs, cs, i, a)] * out0[at(base, rs, cs, i, b)];
    }
    return wg_sum(lid, acc);
}

fn norm_col(lid: u32, base: u32, rs: u32, cs: u32, len: u32, j: u32) -> f32 {
    return sqrt(dot_cols(lid, base, rs, cs, len, j, j));
}

// One modified Gram-Schmidt pass of column j against columns 0..j.
fn project_out(lid: u32, base: u32, rs: u32, cs: u32, len: u32, j: u32) {
    for (var k: u32 = 0u; k < j; k = k + 1u) {
        let d = dot_cols(lid, base, rs, cs, len, k, j);
        for (var i: u32 = lid; i < len; i = i + WG) {
            let o = at(base, rs, cs, i, j);
            out0[o] = out0[o] - d * out0[at(base, rs, cs, i, k)];
        }
    }
}

// The reference's orthonormalize_col_major on the k vectors (k <= len) of out0.
fn orthonormalize(lid: u32, base: u32, rs: u32, cs: u32, len: u32, k: u32) {
    let cols = min(k, len);
    for (var j: u32 = 0u; j < cols; j = j + 1u) {
        let r0 = norm_col(lid, base, rs, cs, len, j);
        var keep = false;
        if (r0 > 0.0 && is_finite(r0)) {
            project_out(lid, base, rs, cs, len, j);
            let r1 = norm_col(lid, base, rs, cs, len, j);
            project_out(lid, base, rs, cs, len, j);
            let r2 = norm_col(lid, base, rs, cs, len, j);
            keep = r2 > 0.0 && r2 >= 0.5 * r1 && is_finite(1.0 / r2);
        }
        if (!keep) {
            // The standard basis vector least represented in the columns so far.
            var best_v: f32 = 0.0;
            var best_i: u32 = NONE;
            for (var i: u32 = lid; i < len; i = i + WG) {
                var proj: f32 = 0.0;
                for (var q: u32 = 0u; q < j; q = q + 1u) {
                    let x = out0[at(base, rs, cs, i, q)];
                    proj = proj + x * x;
                }
                let res = 1.0 - proj;
                if (best_i == NONE || res > best_v) { best_v = res; best_i = i; }
            }
            let best = wg_argmax(lid, best_v, best_i);
            for (var i: u32 = lid; i < len; i = i + WG) {
                out0[at(base, rs, cs, i, j)] = select(0.0, 1.0, i == best);
            }
            project_out(lid, base, rs, cs, len, j);
            project_out(lid, base, rs, cs, len, j);
        }
        let r = norm_col(lid, base, rs, cs, len, j);
        if (r > 0.0) {
            let inv = 1.0 / r;
            for (var i: u32 = lid; i < len; i = i + WG) {
                let o = at(base, rs, cs, i, j);
                out0[o] = out0[o] * inv;
            }
        }
    }
}

// out0 = y [batch, rows, cols] (row-major), orthonormalized in place, one workgroup a matrix.
@compute @workgroup_size(64)
fn orth_columns(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = orth_params();
    let mat = group_index(wid, nwg);
    if (mat >= p.batch) { return; }
    let rows = p.rows;
    let cols = p.cols;
    orthonormalize(lid, mat * rows * cols, cols, 1u, rows, cols);
}

// Columns a < b of the vectors in out0 (v) or out2 (the rotation): (x_a, x_b) <- (c x_a - s x_b,
// s x_a + c x_b).
fn rotate_v(lid: u32, base: u32, q: u32, len: u32, a: u32, b: u32, c: f32, s: f32) {
    for (var i: u32 = lid; i < len; i = i + WG) {
        let oa = base + i * q + a;
        let ob = base + i * q + b;
        let va = out0[oa];
        let vb = out0[ob];
        out0[oa] = c * va - s * vb;
        out0[ob] = s * va + c * vb;
    }
}

fn rotate_j(lid: u32, base: u32, q: u32, a: u32, b: u32, c: f32, s: f32) {
    for (var i: u32 = lid; i < q; i = i + WG) {
        let oa = base + i * q + a;
        let ob = base + i * q + b;
        let va = out2[oa];
        let vb = out2[ob];
        out2[oa] = c * va - s * vb;
        out2[ob] = s * va + c * vb;
    }
}

// Exact SVD of b [batch, q, n] (q <= n, q <= MAX_Q) by one-sided Jacobi on its q rows:
// out0 = v [batch, n, q], out1 = s [batch, q], out2 = u_b [batch, q, q]; column j of v and of
// u_b is the j-th singular pair (u_b holds the accumulated rotation J: b^T J = W, b = J s (W/s)^T).
// A non-finite b gives NaN everywhere (the reference refuses it; a device op cannot raise).
@compute @workgroup_size(64)
fn jacobi(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let p = jacobi_params();
    let mat = group_index(wid, nwg);
    if (mat >= p.batch) { return; }
    let q = p.q;
    let n = p.n;
    let bb = mat * q * n;
    let vb = mat * n * q;
    let jb = mat * q * q;
    let sb = mat * q;

    // Power-of-two scale so the largest entry is in [0.5, 1), as the reference does.
    var mx: f32 = 0.0;
    var finite = true;
    for (var e: u32 = lid; e < q * n; e = e + WG) {
        let x = in0[bb + e];
        finite = finite && is_finite(x);
        mx = max(mx, abs(x));
    }
    let bad = wg_sum(lid, select(1.0, 0.0, finite));
    if (bad > 0.0) {
        for (var e: u32 = lid; e < n * q; e = e + WG) { out0[vb + e] = nan(); }
        for (var e: u32 = lid; e < q * q; e = e + WG) { out2[jb + e] = nan(); }
        for (var e: u32 = lid; e < q; e = e + WG) { out1[sb + e] = nan(); }
        return;
    }
    let maxv = wg_max(lid, mx);
    var scale: f32 = 1.0;
    var unscale: f32 = 1.0;
    if (maxv > 0.0) {
        let e = clamp(frexp(maxv).exp, -120, 120);
        scale = ldexp(1.0, -e);
        unscale = ldexp(1.0, e);
    }

    // W: vector j (row j of b, scaled) as column j of v; J = identity.
    for (var i: u32 = lid; i < n; i = i + WG) {
        for (var j: u32 = 0u; j < q; j = j + 1u) {
            out0[vb + i * q + j] = in0[bb + j * n + i] * scale;
        }
    }
    for (var i: u32 = lid; i < q; i = i + WG) {
        for (var j: u32 = 0u; j < q; j = j + 1u) {
            out2[jb + i * q + j] = select(0.0, 1.0, i == j);
        }
    }

    for (var sweep: u32 = 0u; sweep < MAX_SWEEPS; sweep = sweep + 1u) {
        var rotated = false;
        for (var a: u32 = 0u; a < q; a = a + 1u) {
            for (var b: u32 = a + 1u; b < q; b = b + 1u) {
                var acc = vec3<f32>(0.0);
                for (var i: u32 = lid; i < n; i = i + WG) {
                    let wa = out0[vb + i * q + a];
                    let wr = out0[vb + i * q + b];
                    acc = acc + vec3<f32>(wa * wa, wr * wr, wa * wr);
                }
                let abg = wg_sum3(lid, acc);
                let alpha = abg.x;
                let beta = abg.y;
                let gamma = abg.z;
                if (gamma == 0.0 || abs(gamma) <= F32_EPS * sqrt(alpha) * sqrt(beta)) {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let az = abs(zeta);
                var root: f32;
                if (az > 1.0) {
                    root = az * sqrt(1.0 + 1.0 / (zeta * zeta));
                } else {
                    root = sqrt(1.0 + zeta * zeta);
                }
                let t = select(-1.0, 1.0, zeta >= 0.0) / (az + root);
                let c = 1.0 / sqrt(1.0 + t * t);
                let s = c * t;
                rotate_v(lid, vb, q, n, a, b, c, s);
                rotate_j(lid, jb, q, a, b, c, s);
            }
        }
        if (!rotated) { break; }
    }

    // Singular values, and each vector's place in the stable descending order.
    for (var j: u32 = 0u; j < q; j = j + 1u) {
        let sg = norm_col(lid, vb, q, 1u, n, j);
        if (lid == 0u) { sig[j] = sg; }
    }
    workgroupBarrier();
    for (var j: u32 = lid; j < q; j = j + WG) {
        var before: u32 = 0u;
        for (var o: u32 = 0u; o < q; o = o + 1u) {
            if (sig[o] > sig[j] || (sig[o] == sig[j] && o < j)) { before = before + 1u; }
        }
        pos[j] = before;
        out1[sb + before] = sig[j] * unscale;
    }
    storageBarrier();
    workgroupBarrier();

    // Permute the columns of v (normalizing by sigma) and of J into that order, a row at a time.
    for (var i: u32 = 0u; i < n; i = i + 1u) {
        for (var j: u32 = lid; j < q; j = j + WG) { tmp[j] = out0[vb + i * q + j]; }
        storageBarrier();
        workgroupBarrier();
        for (var j: u32 = lid; j < q; j = j + WG) {
            let sg = sig[j];
            let inv = 1.0 / sg;
            out0[vb + i * q + pos[j]] = select(0.0, tmp[j] * inv, sg > 0.0 && is_finite(inv));
        }
        storageBarrier();
        workgroupBarrier();
    }
    for (var i: u32 = 0u; i < q; i = i + 1u) {
        for (var j: u32 = lid; j < q; j = j + WG) { tmp[j] = out2[jb + i * q + j]; }
        storageBarrier();
        workgroupBarrier();
        for (var j: u32 = lid; j < q; j = j + WG) { out2[jb + i * q + pos[j]] = tmp[j]; }
        storageBarrier();
        workgroupBarrier();
    }
    storageBarrier();
    workgroupBarrier();

    // Zero singular values left zero columns: complete them.
    orthonormalize(lid, vb, q, 1u, n, q);
}

// out0 = u [batch, m, q], out1 = v [batch, n, q], in place; one workgroup per (matrix, column):
// the pair is negated when the first entry of largest magnitude of the u column is negative.
@compute @workgroup_size(64)
fn fix_signs(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let p = fix_signs_params();
    let g = group_index(wid, nwg);
    if (g >= p.columns) { return; }
    let m = p.m;
    let n = p.n;
    let q = p.q;
    let mat = g / q;
    let j = g % q;
    let ub = mat * m * q;
    let vb = mat * n * q;
    var best_v: f32 = 0.0;
    var best_i: u32 = NONE;
    for (var i: u32 = lid; i < m; i = i + WG) {
        let a = abs(out0[ub + i * q + j]);
        if (best_i == NONE || a > best_v) { best_v = a; best_i = i; }
    }
    let best = wg_argmax(lid, best_v, best_i);
    if (best == NONE) { return; }
    // Every thread reads the sign before any thread flips it.
    let negative = out0[ub + best * q + j] < 0.0;
    storageBarrier();
    if (negative) {
        for (var i: u32 = lid; i < m; i = i + WG) { out0[ub + i * q + j] = -out0[ub + i * q + j]; }
        for (var i: u32 = lid; i < n; i = i + WG) { out1[vb + i * q + j] = -out1[vb + i * q + j]; }
    }
}
