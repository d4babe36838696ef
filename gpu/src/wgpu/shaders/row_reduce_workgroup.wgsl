// Row-reduction prelude, workgroup-memory variant: `row_sum` / `row_max` of one value per thread
// of a 256-thread workgroup, by a tree in workgroup memory. Every thread gets the result. The
// subgroup variant (row_reduce_subgroup.wgsl) defines the same functions; the backend prepends
// one of the two to the reduce, softmax and norm shaders.

const RR_WG: u32 = 256u;
var<workgroup> rr_sh: array<f32, 256>;

fn row_sum(lid: u32, v: f32) -> f32 {
    rr_sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = RR_WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { rr_sh[lid] = rr_sh[lid] + rr_sh[lid + s]; }
        workgroupBarrier();
    }
    let total = rr_sh[0];
    workgroupBarrier();
    return total;
}

fn row_max(lid: u32, v: f32) -> f32 {
    rr_sh[lid] = v;
    workgroupBarrier();
    for (var s: u32 = RR_WG / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) { rr_sh[lid] = max(rr_sh[lid], rr_sh[lid + s]); }
        workgroupBarrier();
    }
    let total = rr_sh[0];
    workgroupBarrier();
    return total;
}
