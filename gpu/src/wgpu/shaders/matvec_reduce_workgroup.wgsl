// Segment-reduction prelude of the streaming matvec (matvec.wgsl), workgroup-memory variant:
// `seg_sum4(lid, v)` is the sum of v over the MV_TEAM consecutive invocations (a team: one weight
// row) that hold `lid`, given to all of them, by a tree in workgroup memory within each team.
// Called in uniform control flow by every invocation of the 256-thread workgroup. The subgroup
// variant (matvec_reduce_subgroup.wgsl) defines the same function.

var<workgroup> mv_sh: array<vec4<f32>, 256>;

fn seg_sum4(lid: u32, v: vec4<f32>) -> vec4<f32> {
    mv_sh[lid] = v;
    workgroupBarrier();
    let lane = lid % MV_TEAM;
    for (var s: u32 = MV_TEAM / 2u; s > 0u; s = s >> 1u) {
        if (lane < s) { mv_sh[lid] = mv_sh[lid] + mv_sh[lid + s]; }
        workgroupBarrier();
    }
    let total = mv_sh[lid - lane];
    workgroupBarrier();
    return total;
}
