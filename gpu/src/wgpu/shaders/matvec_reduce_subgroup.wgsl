// Segment-reduction prelude of the streaming matvec (matvec.wgsl), subgroup variant:
// `seg_sum4(lid, v)` is the sum of v over the MV_TEAM consecutive invocations (a team: one weight
// row) that hold `lid`, given to all of them. Called in uniform control flow by every invocation
// of the 256-thread workgroup.
//
// Correct for any subgroup size from 4 to 128: the team is cut into chunks of c = min(size,
// MV_TEAM) lanes, which lie in one subgroup and one team. A subgroup of more lanes than a team
// sums each of its (at most 128 / MV_TEAM) chunks with a subgroupAdd of the chunk's values only;
// a smaller one sums itself. The first lane of each chunk leaves the chunk's sum in workgroup
// memory, and the team adds its MV_TEAM / c chunks in a fixed order. As the row-reduction
// prelude, subgroup k is taken to hold invocations k*size..(k+1)*size-1.

// One vec4 per chunk: at least 4 lanes a chunk, so at most 64 chunks.
var<workgroup> mv_sh: array<vec4<f32>, 64>;

fn seg_sum4(lid: u32, v: vec4<f32>) -> vec4<f32> {
    let size = subgroupAdd(1u);
    let lane = subgroupExclusiveAdd(1u);
    let c = min(size, MV_TEAM);
    var mine = vec4<f32>(0.0);
    // A constant bound (every lane runs every subgroupAdd); chunks past the subgroup add zeros.
    for (var t: u32 = 0u; t < 128u / MV_TEAM; t = t + 1u) {
        let in_chunk = lane / c == t;
        let s = subgroupAdd(select(vec4<f32>(0.0), v, in_chunk));
        if (in_chunk) { mine = s; }
    }
    if (lane % c == 0u) { mv_sh[lid / c] = mine; }
    workgroupBarrier();
    let per = MV_TEAM / c;
    let first = (lid / MV_TEAM) * per;
    var total = mv_sh[first];
    for (var i: u32 = 1u; i < per; i = i + 1u) {
        total = total + mv_sh[first + i];
    }
    workgroupBarrier();
    return total;
}
