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

// One thread per (member, batch, hidden unit): `p.members` GRUs at once (1 but for
// gru_ensemble), each member's tensors one block after the other.
// in0 = gi [members, seq * batch, 3H] (x @ W_ih^T, no bias), in1 = gh [members, batch, 3H]
// (h_prev @ W_hh^T), in2 = h0 [members, batch, H], in3 = biases [members, 6H] (b_ih ++ b_hh).
// out0 = output [members, seq, batch, H] (h' written at step t; h_prev read from step t - 1
// when t > 0), out1 = h_n [members, batch, H] (when p.flags & 1), out2 = trace
// [members, seq, batch, 4H] (r, z, n, W_hn h + b_hn; when p.flags & 2).
KERNEL(gate_forward, GruForwardParams) {
    unsigned long long idx = global_index();
    unsigned long long bh = p.batch_hidden;
    if (idx >= (unsigned long long)p.members * bh) return;
    unsigned long long hd = p.hidden, t = p.step;
    unsigned long long m = idx / bh, i = idx % bh;
    unsigned long long b = i / hd, j = i % hd;
    unsigned long long gi = ((m * p.seq + t) * p.batch + b) * 3 * hd;
    unsigned long long gh = (idx / hd) * 3 * hd;
    unsigned long long bs = m * 6 * hd;
    float r = sigmoid_safe(in0[gi + j] + in3[bs + j] + in1[gh + j] + in3[bs + 3 * hd + j]);
    float z = sigmoid_safe(in0[gi + hd + j] + in3[bs + hd + j] + in1[gh + hd + j] +
                           in3[bs + 4 * hd + j]);
    float hn = in1[gh + 2 * hd + j] + in3[bs + 5 * hd + j];
    float n = tanh_safe(in0[gi + 2 * hd + j] + in3[bs + 2 * hd + j] + r * hn);
    unsigned long long o = m * p.seq * bh + t * bh + i;
    float h = t == 0 ? in2[idx] : out0[o - bh];
    float h_next = (1.0f - z) * n + z * h;
    out0[o] = h_next;
    if ((p.flags & 2u) != 0) {
        unsigned long long tr = o * 4;
        out2[tr] = r;
        out2[tr + 1] = z;
        out2[tr + 2] = n;
        out2[tr + 3] = hn;
    }
    if ((p.flags & 1u) != 0) out1[idx] = h_next;
}

// One thread per (member, batch, hidden unit), as the forward.
// in0 = trace [members, seq, batch, 4H], in1 = h_prev: h0 [members, batch, H] at step 0, else
// the forward's output [members, seq, batch, H] (step t - 1 read), in2 = grad_output
// [members, seq, batch, H] (step t used), in3 = dgh_{t+1} @ W_hh (mode 2) or grad_h_n
// (mode 1), [members, batch, H].
// out0 = d_gi [members, seq * batch, 3H], out1 = d_gh [members, seq * batch, 3H] (step t
// written), out2 = dh [members, batch, H]: read as the carried z * grad of the step after
// (mode 2), written as z * grad of this step.
// p.mode: 0 grad = grad_output[t]; 1 grad = grad_output[t] + in3; 2 grad =
// grad_output[t] + out2 + in3.
KERNEL(gate_backward, GruBackwardParams) {
    unsigned long long idx = global_index();
    unsigned long long bh = p.batch_hidden;
    if (idx >= (unsigned long long)p.members * bh) return;
    unsigned long long hd = p.hidden, t = p.step;
    unsigned long long m = idx / bh, i = idx % bh;
    unsigned long long b = i / hd, j = i % hd;
    unsigned long long o = m * p.seq * bh + t * bh + i;
    unsigned long long tr = o * 4;
    float r = in0[tr], z = in0[tr + 1], n = in0[tr + 2], hn = in0[tr + 3];
    float h = t == 0 ? in1[idx] : in1[o - bh];
    float go = in2[o];
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
    unsigned long long row = ((m * p.seq + t) * p.batch + b) * 3 * hd;
    out0[row + j] = da_r;
    out0[row + hd + j] = da_z;
    out0[row + 2 * hd + j] = da_n;
    out1[row + j] = da_r;
    out1[row + hd + j] = da_z;
    out1[row + 2 * hd + j] = da_n * r;
    out2[idx] = go * z;
}
