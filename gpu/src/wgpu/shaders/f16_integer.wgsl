// The f16 reader without `shader-f16`: `f16_at(off)` is the IEEE binary16 at byte `off` of the
// module's `packed` words, decoded to f32 exactly (subnormals included) with integer
// arithmetic.

// IEEE binary16 bits to f32, exactly (subnormals included).
fn f16_bits(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0u) {
        let mag = f32(m) * 5.9604644775390625e-8; // m * 2^-24, exact
        return select(mag, -mag, sign != 0u);
    }
    if (e == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
    }
    return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

fn f16_at(off: u32) -> f32 {
    return f16_bits(u16_at(off));
}

