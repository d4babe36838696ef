// Elementwise ops, forward and backward: unary (op code OP), scale, gelu, and binary ops where
// `b` broadcasts over `a`'s leading dims (b.shape is a suffix of a.shape, so b repeats every nb).
//
// Bindings follow the crate-wide layout: 0 params, 1..4 read-only inputs, 5..7 outputs.
// One thread per element; the grid is 2-D so more than 65,535 workgroups can be launched.

// The parameter blocks (`<block>_params()`), the op codes and kernel_nan() come from the
// generated prelude.wgsl.

override WG: u32 = 256u;
// Unary op code (OP_* in the prelude): the unary ops, gelu (erf or tanh), or scale by p.factor.
override OP: u32 = 0u;
// Binary op code (BOP_* in the prelude).
override BOP: u32 = 0u;

@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(5) var<storage, read_write> out0: array<f32>;
@group(0) @binding(6) var<storage, read_write> out1: array<f32>;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// erf ported from FreeBSD/musl s_erff.c (as in the `libm` crate the CPU reference uses):
// about 1 ulp, well inside the 1e-7 the gelu budget needs. WGSL has no erf.
fn erfc_mid(ax: f32) -> f32 {
    // ax in [0.84375, 1.25): erfc = 1 - erx - P/Q
    let s = ax - 1.0;
    let pp = -2.3621185683e-03 + s * (4.1485610604e-01 + s * (-3.7220788002e-01 + s * (3.1834661961e-01
        + s * (-1.1089469492e-01 + s * (3.5478305072e-02 + s * -2.1663755178e-03)))));
    let qq = 1.0 + s * (1.0642088205e-01 + s * (5.4039794207e-01 + s * (7.1828655899e-02
        + s * (1.2617121637e-01 + s * (1.3637083583e-02 + s * 1.1984500103e-02)))));
    return 1.0 - 8.4506291151e-01 - pp / qq;
}

fn erfc_tail(ax: f32) -> f32 {
    // ax in [1.25, 6)
    if (ax < 1.25) {
        return erfc_mid(ax);
    }
    let s = 1.0 / (ax * ax);
    var r: f32;
    var big_s: f32;
    if (ax < 2.857142857) {
        r = -9.8649440333e-03 + s * (-6.9385856390e-01 + s * (-1.0558626175e+01 + s * (-6.2375331879e+01
            + s * (-1.6239666748e+02 + s * (-1.8460508728e+02 + s * (-8.1287437439e+01 + s * -9.8143291473e+00))))));
        big_s = 1.0 + s * (1.9651271820e+01 + s * (1.3765776062e+02 + s * (4.3456588745e+02
            + s * (6.4538726807e+02 + s * (4.2900814819e+02 + s * (1.0863500214e+02
            + s * (6.5702495575e+00 + s * -6.0424413532e-02)))))));
    } else {
        r = -9.8649431020e-03 + s * (-7.9928326607e-01 + s * (-1.7757955551e+01 + s * (-1.6063638306e+02
            + s * (-6.3756646729e+02 + s * (-1.0250950928e+03 + s * -4.8351919556e+02)))));
        big_s = 1.0 + s * (3.0338060379e+01 + s * (3.2579251099e+02 + s * (1.5367296143e+03
            + s * (3.1998581543e+03 + s * (2.5530502930e+03 + s * (4.7452853394e+02 + s * -2.2440952301e+01))))));
    }
    let z = bitcast<f32>(bitcast<u32>(ax) & 0xffffe000u);
    return exp(-z * z - 0.5625) * exp((z - ax) * (z + ax) + r / big_s) / ax;
}

fn erf_f32(x: f32) -> f32 {
    let ax = abs(x);
    if (x != x) {
        return x;
    }
    if (ax < 0.84375) {
        if (ax < 3.7252903e-9) {
            return 0.125 * (8.0 * x + 1.0270333290e+00 * x);
        }
        let z = x * x;
        let r = 1.2837916613e-01 + z * (-3.2504209876e-01 + z * (-2.8481749818e-02 + z * (-5.7702702470e-03
            + z * -2.3763017452e-05)));
        let s = 1.0 + z * (3.9791721106e-01 + z * (6.5022252500e-02 + z * (5.0813062117e-03
            + z * (1.3249473704e-04 + z * -3.9602282413e-06))));
        return x + x * (r / s);
    }
    var y: f32 = 1.0;
    if (ax < 6.0) {
        y = 1.0 - erfc_tail(ax);
    }
    return select(y, -y, x < 0.0);
}

// tanh without the overflow of exp(2x) for large |x| (some drivers' builtin returns NaN there)
// and without the cancellation of 1 - 2/(e^2x + 1) near zero.
fn tanh_safe(x: f32) -> f32 {
    let ax = abs(x);
    if (x != x) {
        return x;
    }
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

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

const SQRT_2_OVER_PI: f32 = 0.7978845608028654;
const GELU_C: f32 = 0.044715;
const INV_SQRT_2: f32 = 0.7071067811865476;
const INV_SQRT_2PI: f32 = 0.3989422804014327;

fn unary(x: f32) -> f32 {
    let p = unary_params();
    switch OP {
        case OP_NEG: { return -x; }
        case OP_EXP: { return exp(x); }
        case OP_LOG: { return log(x); }
        case OP_SQRT: { return sqrt(x); }
        case OP_RELU: { return select(0.0, x, x > 0.0 || is_nan(x)); }  // NaN stays NaN, as torch.relu
        case OP_SIGMOID: { return sigmoid(x); }
        case OP_TANH: { return tanh_safe(x); }
        case OP_SILU: { return x * sigmoid(x); }
        case OP_GELU_NONE: { return 0.5 * x * (1.0 + erf_f32(x * INV_SQRT_2)); }
        case OP_GELU_TANH: { return 0.5 * x * (1.0 + tanh_safe(SQRT_2_OVER_PI * (x + GELU_C * x * x * x))); }
        case OP_SCALE: { return x * p.factor; }
        default: { return kernel_nan(); }
    }
}

// d out / d x times g, from the input x and the forward output y.
fn unary_grad(x: f32, y: f32, g: f32) -> f32 {
    let p = unary_params();
    switch OP {
        case OP_NEG: { return -g; }
        case OP_EXP: { return g * y; }
        case OP_LOG: { return g / x; }
        case OP_SQRT: { return g / (2.0 * y); }
        case OP_RELU: { return select(0.0, g, x > 0.0); }
        case OP_SIGMOID: { return g * y * (1.0 - y); }
        case OP_TANH: { return g * (1.0 - y * y); }
        case OP_SILU: {
            let s = sigmoid(x);
            return g * (s * (1.0 + x * (1.0 - s)));
        }
        case OP_GELU_NONE: {
            let cdf = 0.5 * (1.0 + erf_f32(x * INV_SQRT_2));
            let pdf = INV_SQRT_2PI * exp(-0.5 * x * x);
            return g * (cdf + x * pdf);
        }
        case OP_GELU_TANH: {
            let inner = SQRT_2_OVER_PI * (x + GELU_C * x * x * x);
            let t = tanh_safe(inner);
            let dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner);
        }
        case OP_SCALE: { return g * p.factor; }
        default: { return kernel_nan(); }
    }
}

@compute @workgroup_size(WG)
fn unary_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) lid: u32) {
    let p = unary_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out0[i] = unary(in0[i]);
}

// in0 = x, in1 = y (forward output), in2 = grad_y; out0 = grad_x.
@compute @workgroup_size(WG)
fn unary_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let p = unary_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out0[i] = unary_grad(in0[i], in1[i], in2[i]);
}

fn binary(a: f32, b: f32) -> f32 {
    switch BOP {
        case BOP_ADD: { return a + b; }
        case BOP_SUB: { return a - b; }
        case BOP_MUL: { return a * b; }
        case BOP_DIV: { return a / b; }
        default: { return kernel_nan(); }
    }
}

// in0 = a [n], in1 = b [nb] (repeats every nb); out0 [n]. p.start = index of
// element 0 of this chunk in the whole tensor (the host splits tensors above the binding limit).
@compute @workgroup_size(WG)
fn binary_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let p = binary_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out0[i] = binary(in0[i], in1[(i + p.start) % p.nb]);
}

// grad_a: in0 = a, in1 = b, in2 = grad_out; out0 = grad_a [n]. p as binary_forward.
@compute @workgroup_size(WG)
fn binary_backward_a(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let p = binary_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let g = in2[i];
    switch BOP {
        case BOP_ADD, BOP_SUB: { out0[i] = g; }
        case BOP_MUL: { out0[i] = g * in1[(i + p.start) % p.nb]; }
        case BOP_DIV: { out0[i] = g / in1[(i + p.start) % p.nb]; }
        default: { out0[i] = kernel_nan(); }
    }
}

// grad_b sums over the rows b was broadcast to, in row order (as the CPU reference).
// in0 = a, in1 = b, in2 = grad_out; out0 = grad_b [nb].
@compute @workgroup_size(WG)
fn binary_backward_b(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                     @builtin(local_invocation_index) lid: u32) {
    let p = binary_params();
    let j = flat_index(wid, nwg, lid);
    let nb = p.nb;
    if (j >= nb) { return; }
    let rows = p.n / nb;
    let bj = in1[j];
    var acc: f32 = 0.0;
    for (var r: u32 = 0u; r < rows; r = r + 1u) {
        let i = r * nb + j;
        let g = in2[i];
        switch BOP {
            case BOP_ADD: { acc = acc + g; }
            case BOP_SUB: { acc = acc - g; }
            case BOP_MUL: { acc = acc + g * in0[i]; }
            case BOP_DIV: { acc = acc - g * in0[i] / (bj * bj); }
            default: { acc = kernel_nan(); }
        }
    }
    out0[j] = acc;
}

// Activation derivative (ACT_* in the prelude) applied by sum_rows to each element, from the
// forward output in in1; ACT_NONE: none.
override DACT: u32 = 0u;

fn dact_of(y: f32) -> f32 {
    switch DACT {
        case ACT_NONE: { return 1.0; }
        case ACT_RELU: { return select(0.0, 1.0, y > 0.0); }
        case ACT_TANH: { return 1.0 - y * y; }
        case ACT_SIGMOID: { return y * (1.0 - y); }
        default: { return kernel_nan(); }
    }
}

// Sums rows: out0[j] = sum_r in0[r * p.cols + j] for r < p.n / p.cols (batched-matmul gradients of
// a shared 2-D operand; with DACT, each term times act'(in1) -- linear's grad_bias).
@compute @workgroup_size(WG)
fn sum_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let p = sum_rows_params();
    let j = flat_index(wid, nwg, lid);
    let nb = p.cols;
    if (j >= nb) { return; }
    let rows = p.n / nb;
    var acc: f32 = 0.0;
    for (var r: u32 = 0u; r < rows; r = r + 1u) {
        let i = r * nb + j;
        if (DACT != 0u) { acc = acc + in0[i] * dact_of(in1[i]); } else { acc = acc + in0[i]; }
    }
    out0[j] = acc;
}

// swiglu: out0 = silu(in0) * in1 (gate, up).
@compute @workgroup_size(WG)
fn swiglu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let p = elems_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let g = in0[i];
    out0[i] = g * sigmoid(g) * in1[i];
}

// matmul_swiglu's gate over its product: in0 = y [rows, 2 half] (gate columns, then up
// columns); out0 [rows, half] = silu(gate) * up, as swiglu_forward.
@compute @workgroup_size(WG)
fn glu_forward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let p = glu_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let at = (i / p.half) * 2u * p.half + i % p.half;
    let g = in0[at];
    out0[i] = g * sigmoid(g) * in0[at + p.half];
}

// in0 = y [rows, 2 half], in1 = grad_out [rows, half]; out0 = dy [rows, 2 half]: swiglu_backward's
// grad_gate in the gate columns and grad_up in the up columns.
@compute @workgroup_size(WG)
fn glu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let p = glu_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let at = (i / p.half) * 2u * p.half + i % p.half;
    let g = in0[at];
    let s = sigmoid(g);
    let d = in1[i];
    out0[at] = d * in0[at + p.half] * (s * (1.0 + g * (1.0 - s)));
    out0[at + p.half] = d * g * s;
}

// in0 = gate, in1 = up, in2 = grad_out; out0 = grad_gate = grad * up * silu'(gate), out1 =
// grad_up = grad * silu(gate).
@compute @workgroup_size(WG)
fn swiglu_backward(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let p = elems_params();
    let i = flat_index(wid, nwg, lid);
    if (i >= p.n) { return; }
    let g = in0[i];
    let s = sigmoid(g);
    let d = in2[i];
    out0[i] = d * in1[i] * (s * (1.0 + g * (1.0 - s)));
    out1[i] = d * g * s;
}
