// Row-reduction prelude, subgroup variant: `row_sum` / `row_max` of one value per thread of a
// 256-thread workgroup. Each level reduces within subgroups (no barrier), the first lane of each
// subgroup leaves its partial in workgroup memory, and the partials go round again, until one
// value is left: SG_LEVELS levels, set by the host from the adapter's smallest subgroup size,
// so the loop bound is uniform. Subgroup k is taken to hold invocations k*size..(k+1)*size-1
// (local_invocation_index order), as on every driver we know.

const RR_WG: u32 = 256u;
override SG_LEVELS: u32 = 4u;
var<workgroup> rr_sh: array<f32, 256>;

fn rr_neg_inf() -> f32 {
    var bits: u32 = 0xff800000u;
    return bitcast<f32>(bits);
}

fn row_sum(lid: u32, v: f32) -> f32 {
    let size = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    var x = v;
    var live = RR_WG;
    for (var level: u32 = 0u; level < SG_LEVELS; level = level + 1u) {
        let part = subgroupAdd(x);
        if (lane == 0u && lid < live) { rr_sh[lid / size] = part; }
        workgroupBarrier();
        live = (live + size - 1u) / size;
        x = select(0.0, rr_sh[lid], lid < live);
        workgroupBarrier();
    }
    // The last level left the total in slot 0 (levels past one live value rewrite it as is).
    let out = rr_sh[0];
    workgroupBarrier();
    return out;
}

fn row_max(lid: u32, v: f32) -> f32 {
    let size = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    var x = v;
    var live = RR_WG;
    for (var level: u32 = 0u; level < SG_LEVELS; level = level + 1u) {
        let part = subgroupMax(x);
        if (lane == 0u && lid < live) { rr_sh[lid / size] = part; }
        workgroupBarrier();
        live = (live + size - 1u) / size;
        x = select(rr_neg_inf(), rr_sh[lid], lid < live);
        workgroupBarrier();
    }
    let out = rr_sh[0];
    workgroupBarrier();
    return out;
}
