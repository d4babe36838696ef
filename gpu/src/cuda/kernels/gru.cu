// GRU gates (torch.nn.GRUCell / one-layer torch.nn.GRU, gate order r, z, n), forward and
// backward, one thread per (batch, hidden unit). The matmuls around them (x @ W_ih^T for all
// steps at once, h @ W_hh^T per step, and the backward products) run on cuBLAS, so a step is
// one SGEMM plus one of these kernels. CPU reference: kernels-core src/cpu/gru.rs.
//
//   r  = sigmoid(gi_r + b_ir + gh_r + b_hr)
//   z  = sigmoid(gi_z + b_iz + gh_z + b_hz)
//   n  = tanh(gi_n + b_in + r * (gh_n + b_hn))
//   h' = (1 - z) * n + z * h
//
// The forward reads `GruForwardParams`, the backward `GruBackwardParams` (gpu/src/params.rs).

// in0 = gi [seq * batch, 3H] (x @ W_ih^T, no bias), in1 = gh [batch, 3H] (h_prev @ W_hh^T),
// in2 = h0, in3 = biases [6H] (b_ih ++ b_hh).
// out0 = output [seq, batch, H] (h' written at step t; h_prev read from step t - 1 when t > 0),
// out1 = h_n [batch, H] (when p.flags & 1), out2 = trace [seq, batch, 4H] (r, z, n,
// W_hn h + b_hn; when p.flags & 2).
KERNEL(gate_forward, GruForwardParams) {
    unsigned long long idx = global_index();
    unsigned long long bh = p.batch_hidden;
    if (idx >= bh) return;
    unsigned long long hd = p.hidden, t = p.step;
    unsigned long long b = idx / hd, j = idx % hd;
    unsigned long long gi = (t * p.batch + b) * 3 * hd;
    unsigned long long gh = b * 3 * hd;
    float r = sigmoid_safe(in0[gi + j] + in3[j] + in1[gh + j] + in3[3 * hd + j]);
    float z = sigmoid_safe(in0[gi + hd + j] + in3[hd + j] + in1[gh + hd + j] + in3[4 * hd + j]);
    float hn = in1[gh + 2 * hd + j] + in3[5 * hd + j];
    float n = tanh_safe(in0[gi + 2 * hd + j] + in3[2 * hd + j] + r * hn);
    float h = t == 0 ? in2[idx] : out0[(t - 1) * bh + idx];
    float h_next = (1.0f - z) * n + z * h;
    out0[t * bh + idx] = h_next;
    if ((p.flags & 2u) != 0) {
        unsigned long long tr = (t * bh + idx) * 4;
        out2[tr] = r;
        out2[tr + 1] = z;
        out2[tr + 2] = n;
        out2[tr + 3] = hn;
    }
    if ((p.flags & 1u) != 0) out1[idx] = h_next;
}

// in0 = trace [seq, batch, 4H], in1 = h_prev (at offset p.h_offset), in2 = grad_output
// [seq, batch, H] (step t used), in3 = dgh_{t+1} @ W_hh (mode 2) or grad_h_n (mode 1).
// out0 = d_gi [seq * batch, 3H], out1 = d_gh [seq * batch, 3H] (step t written),
// out2 = dh [batch, H]: read as the carried z * grad of the step after (mode 2), written as
// z * grad of this step.
// p.mode: 0 grad = grad_output[t]; 1 grad = grad_output[t] + in3; 2 grad =
// grad_output[t] + out2 + in3.
KERNEL(gate_backward, GruBackwardParams) {
    unsigned long long idx = global_index();
    unsigned long long bh = p.batch_hidden;
    if (idx >= bh) return;
    unsigned long long hd = p.hidden, t = p.step;
    unsigned long long b = idx / hd, j = idx % hd;
    unsigned long long tr = (t * bh + idx) * 4;
    float r = in0[tr], z = in0[tr + 1], n = in0[tr + 2], hn = in0[tr + 3];
    float h = in1[p.h_offset + idx];
    float go = in2[t * bh + idx];
    if (p.mode == 1) {
        go = go + in3[idx];
    } else if (p.mode == 2) {
        go = go + (out2[idx] + in3[idx]);
    }
    float dn = go * (1.0f - z);
    float dz = go * (h - n);
    float da_n = dn * (1.0f - n * n);
    float da_r = da_n * hn * r * (1.0f - r);
    float da_z = dz * z * (1.0f - z);
    unsigned long long row = (t * p.batch + b) * 3 * hd;
    out0[row + j] = da_r;
    out0[row + hd + j] = da_z;
    out0[row + 2 * hd + j] = da_n;
    out1[row + j] = da_r;
    out1[row + hd + j] = da_z;
    out1[row + 2 * hd + j] = da_n * r;
    out2[idx] = go * z;
}
