// GRU gates (torch.nn.GRUCell / one-layer torch.nn.GRU, gate order r, z, n), forward and
// backward, one thread per (batch, hidden unit). The matmuls around them (x @ W_ih^T for all
// steps at once, h @ W_hh^T per step, and the backward products) run on the matmul kernel, so
// a step is one matmul plus one of these kernels.
//
//   r  = sigmoid(gi_r + b_ir + gh_r + b_hr)
//   z  = sigmoid(gi_z + b_iz + gh_z + b_hz)
//   n  = tanh(gi_n + b_in + r * (gh_n + b_hn))
//   h' = (1 - z) * n + z * h

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

const WG: u32 = 256u;

// The forward reads `GruForwardParams`, the backward `GruBackwardParams` (gpu/src/params.rs).
@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(4) var<storage, read> in3: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;
@group(0) @binding(7) var<storage, read_write> out2: array<f32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// Two branches so exp never overflows (as the CPU reference).
fn sigmoid(x: f32) -> f32 {
    if (x >= 0.0) {
        return 1.0 / (1.0 + exp(-x));
    }
    let e = exp(x);
    return e / (1.0 + e);
}

fn tanh_safe(x: f32) -> f32 {
    let ax = abs(x);
    var t: f32;
    if (ax < 0.004) {
        t = ax - ax * ax * ax / 3.0;
    } else if (ax > 10.0) {
        t = 1.0;
    } else {
        t = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
    }
    return select(t, -t, x < 0.0);
}

// One thread per (member, batch, hidden unit): `p.members` GRUs at once (1 but for
// gru_ensemble), each member's tensors one block after the other.
// in0 = gi [members, seq * batch, 3H] (x @ W_ih^T, no bias), in1 = gh [members, batch, 3H]
// (h_prev @ W_hh^T), in2 = h0 [members, batch, H], in3 = biases [members, 6H] (b_ih ++ b_hh).
// out0 = output [members, seq, batch, H] (h' written at step t; h_prev read from step t - 1
// when t > 0, since a buffer cannot be bound read-only and read-write in one dispatch),
// out1 = h_n [members, batch, H] (when p.flags & 1), out2 = trace [members, seq, batch, 4H]
// (r, z, n, W_hn h + b_hn; when p.flags & 2).
@compute @workgroup_size(256)
fn gate_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = gru_forward_params();
    let idx = flat_index(wid, nwg, lid);
    let bh = p.batch_hidden;
    if (idx >= p.members * bh) { return; }
    let hd = p.hidden;
    let t = p.step;
    let m = idx / bh;
    let i = idx % bh;
    let b = i / hd;
    let j = i % hd;
    let gi = ((m * p.seq + t) * p.batch + b) * 3u * hd;
    let gh = (idx / hd) * 3u * hd;
    let bs = m * 6u * hd;
    let r = sigmoid(in0[gi + j] + in3[bs + j] + in1[gh + j] + in3[bs + 3u * hd + j]);
    let z = sigmoid(in0[gi + hd + j] + in3[bs + hd + j] + in1[gh + hd + j]
        + in3[bs + 4u * hd + j]);
    let hn = in1[gh + 2u * hd + j] + in3[bs + 5u * hd + j];
    let n = tanh_safe(in0[gi + 2u * hd + j] + in3[bs + 2u * hd + j] + r * hn);
    let o = m * p.seq * bh + t * bh + i;
    var h: f32;
    if (t == 0u) {
        h = in2[idx];
    } else {
        h = out0[o - bh];
    }
    let h_next = (1.0 - z) * n + z * h;
    out0[o] = h_next;
    if ((p.flags & 2u) != 0u) {
        let tr = o * 4u;
        out2[tr] = r;
        out2[tr + 1u] = z;
        out2[tr + 2u] = n;
        out2[tr + 3u] = hn;
    }
    if ((p.flags & 1u) != 0u) {
        out1[idx] = h_next;
    }
}

// One thread per (member, batch, hidden unit), as the forward.
// in0 = trace [members, seq, batch, 4H], in1 = h_prev: h0 [members, batch, H] at step 0, else
// the forward's output [members, seq, batch, H] (step t - 1 read), in2 = grad_output
// [members, seq, batch, H] (step t used), in3 = mm [members, batch, H]: dgh_{t+1} @ W_hh
// (mode 2) or grad_h_n (mode 1); unused in mode 0.
// out0 = d_gi [members, seq * batch, 3H], out1 = d_gh [members, seq * batch, 3H] (step t
// written), out2 = dh [members, batch, H]: read as the carried z * grad of the step after
// (mode 2), written as z * grad of this step.
// p.mode: 0 grad = grad_output[t]; 1 grad = grad_output[t] + in3; 2 grad = grad_output[t]
// + out2 + in3.
@compute @workgroup_size(256)
fn gate_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let p = gru_backward_params();
    let idx = flat_index(wid, nwg, lid);
    let bh = p.batch_hidden;
    if (idx >= p.members * bh) { return; }
    let hd = p.hidden;
    let t = p.step;
    let m = idx / bh;
    let i = idx % bh;
    let b = i / hd;
    let j = i % hd;
    let o = m * p.seq * bh + t * bh + i;
    let tr = o * 4u;
    let r = in0[tr];
    let z = in0[tr + 1u];
    let n = in0[tr + 2u];
    let hn = in0[tr + 3u];
    var h: f32;
    if (t == 0u) {
        h = in1[idx];
    } else {
        h = in1[o - bh];
    }
    var go = in2[o];
    if (p.mode == 1u) {
        go = go + in3[idx];
    } else if (p.mode == 2u) {
        go = go + (out2[idx] + in3[idx]);
    }
    let dn = go * (1.0 - z);
    let dz = go * (h - n);
    let da_n = dn * (1.0 - n * n);
    let da_r = da_n * hn * r * (1.0 - r);
    let da_z = dz * z * (1.0 - z);
    let row = ((m * p.seq + t) * p.batch + b) * 3u * hd;
    out0[row + j] = da_r;
    out0[row + hd + j] = da_z;
    out0[row + 2u * hd + j] = da_n;
    out1[row + j] = da_r;
    out1[row + hd + j] = da_z;
    out1[row + 2u * hd + j] = da_n * r;
    out2[idx] = go * z;
}
