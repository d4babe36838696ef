//! Build script of the embedded comparison crate.
//!
//! - Writes `world_member0.safetensors` into `OUT_DIR`: the shipped GRU world model
//!   (`native-cli/models/world/world.safetensors`, five ensemble members, 3.5 MB) cut to its
//!   encoder and ensemble member 0, the real trained weights of one member (0.7 MB, F16 as
//!   shipped). The five members together with the demo llama would not fit the board's 4 MB
//!   code memory.
//! - For the firmware (target `thumbv7em-none-eabihf`), puts `memory.x` (the mps2-an386 memory
//!   map) on the linker's search path and links with cortex-m-rt's `link.x`, so no
//!   `.cargo/config.toml` is needed.

use std::env;
use std::fs;
use std::path::PathBuf;

use safetensors::SafeTensors;
use safetensors::tensor::TensorView;

const WORLD: &str = "../../native-cli/models/world/world.safetensors";

fn keep(name: &str) -> bool {
    name.starts_with("encoder.") || name.starts_with("members.0.")
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_else(|_| fail("OUT_DIR is not set")));
    println!("cargo:rerun-if-changed={WORLD}");
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rerun-if-changed=build.rs");

    let bytes = fs::read(WORLD).unwrap_or_else(|e| fail(&format!("cannot read {WORLD}: {e}")));
    let st = SafeTensors::deserialize(&bytes)
        .unwrap_or_else(|e| fail(&format!("{WORLD} is not safetensors: {e}")));
    let mut views: Vec<(String, TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| keep(name))
        .collect();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    if !views.iter().any(|(n, _)| n.starts_with("members.0.")) {
        fail(&format!("{WORLD} has no ensemble member 0"));
    }
    let member = safetensors::serialize(views, None)
        .unwrap_or_else(|e| fail(&format!("cannot write member 0: {e}")));
    fs::write(out.join("world_member0.safetensors"), member)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));

    let target = env::var("TARGET").unwrap_or_default();
    if target.starts_with("thumbv") {
        fs::copy("memory.x", out.join("memory.x"))
            .unwrap_or_else(|e| fail(&format!("cannot copy memory.x: {e}")));
        println!("cargo:rustc-link-search={}", out.display());
        println!("cargo:rustc-link-arg-bins=-Tlink.x");
    }
}

fn fail(why: &str) -> ! {
    eprintln!("kernels-embedded build script: {why}");
    std::process::exit(1)
}
