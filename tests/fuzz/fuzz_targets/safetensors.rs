//! The safetensors reader (`kernels_core::io`) on arbitrary bytes: never a panic or an abort;
//! whatever it accepts saves and loads back bit for bit.
#![no_main]

use kernels_core::io;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((tensors, _metadata)) = io::load_with_metadata(data, "fuzz.safetensors") else {
        return;
    };
    let Ok(bytes) = io::save(&tensors) else {
        return;
    };
    let back = io::load(&bytes).expect("a saved file loads");
    assert_eq!(back.len(), tensors.len());
    for ((n, t), (m, u)) in tensors.iter().zip(&back) {
        assert_eq!(n, m);
        assert!(t.bit_eq(u), "{n} changed in a save/load round trip");
    }
});
