// The f16 reader without `shader-f16`: `f16_at(off)` is the IEEE binary16 at byte `off` of the
// module's `packed` words, decoded to f32 exactly (subnormals included) with integer
// arithmetic (`f16_bits`, in quant.wgsl).

fn f16_at(off: u32) -> f32 {
    return f16_bits(u16_at(off));
}

