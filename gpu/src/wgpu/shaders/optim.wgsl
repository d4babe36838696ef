// Fused optimizer steps: one thread per parameter reads param, grad and state once and writes
// the new param and state (torch.optim.AdamW and torch.optim.SGD semantics).

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override WG: u32 = 256u;

@group(0) @binding(1) var<storage, read> param_in: array<f32>;
@group(0) @binding(2) var<storage, read> grad: array<f32>;
@group(0) @binding(3) var<storage, read> state_a: array<f32>;
@group(0) @binding(4) var<storage, read> state_b: array<f32>;
@group(0) @binding(5) var<storage, read_write> param_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> state_a_out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state_b_out: array<f32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// state_a = m, state_b = v.
@compute @workgroup_size(WG)
fn adamw_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let p = adamw_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let b1 = p.beta1;
    let b2 = p.beta2;
    let g = grad[i];
    let w = param_in[i] * p.decay;
    let m = b1 * state_a[i] + (1.0 - b1) * g;
    let v = b2 * state_b[i] + (1.0 - b2) * g * g;
    let denom = sqrt(v) / p.bias_correction2_sqrt + p.eps;
    param_out[i] = w - p.step_size * m / denom;
    state_a_out[i] = m;
    state_b_out[i] = v;
}

// state_a = momentum_buf.
@compute @workgroup_size(WG)
fn sgd_step(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let p = sgd_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let lr = p.lr;
    let mom = p.momentum;
    let w = param_in[i];
    // As the reference (and torch): no decay term when weight_decay is 0 (0 * inf is NaN), and
    // the buffer passes through unchanged when momentum is 0.
    var d = grad[i];
    if (p.weight_decay != 0.0) { d = d + p.weight_decay * w; }
    var buf = state_a[i];
    if (mom != 0.0) {
        buf = mom * buf + d;
        if (p.nesterov != 0u) { d = d + mom * buf; } else { d = buf; }
    }
    param_out[i] = w - lr * d;
    state_a_out[i] = buf;
}
