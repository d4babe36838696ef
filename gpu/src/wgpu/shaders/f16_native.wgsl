// The f16 reader with `shader-f16` (the module starts with `enable f16;`): `f16_at(off)` is the
// binary16 at byte `off` (always even) of the packed tensor, read through slot 4's `array<f16>`
// view of it as a native `f16` and widened to f32 (exact: every half is an f32).

@group(0) @binding(4) var<storage, read> halves: array<f16>;

fn f16_at(off: u32) -> f32 {
    return f32(halves[off >> 1u]);
}

