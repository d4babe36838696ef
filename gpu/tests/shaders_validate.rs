//! Every `src/wgpu/shaders/*.wgsl` parses and validates with naga (no GPU needed).

// Native adapters (pollster, lavapipe); the browser's suite is web_parity.rs.
#![cfg(not(target_arch = "wasm32"))]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

fn validate(label: &str, src: &str, caps: naga::valid::Capabilities) -> Result<usize, String> {
    let module = naga::front::wgsl::parse_str(src)
        .map_err(|e| format!("{label}: {}", e.emit_to_string(src)))?;
    naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("{label}: {}", e.emit_to_string(src)))?;
    Ok(module.entry_points.len())
}

/// Every shader module the backend can build (each family, in each row-reduction variant it
/// has) parses and validates; the subgroup variants with only the subgroup capability added.
#[test]
fn every_wgsl_file_parses_and_validates() {
    use kernels_gpu::Family;
    use kernels_gpu::wgpu::{ROW_REDUCE_SUBGROUP, ROW_REDUCE_WORKGROUP};
    let mut failures = Vec::new();
    let mut seen = 0;
    for family in Family::ALL {
        let mut variants = vec![(false, false, naga::valid::Capabilities::empty())];
        if family.has_subgroup_variant() {
            variants.push((true, false, naga::valid::Capabilities::SUBGROUP));
        }
        if family.has_f16_variant() {
            let f16 = naga::valid::Capabilities::SHADER_FLOAT16;
            variants.push((false, true, f16));
            if family.has_subgroup_variant() {
                variants.push((true, true, f16 | naga::valid::Capabilities::SUBGROUP));
            }
        }
        for (sg, f16, caps) in variants {
            seen += 1;
            let label = format!("{}.wgsl (subgroups: {sg}, f16: {f16})", family.name());
            match validate(&label, &family.module_source(sg, f16), caps) {
                Ok(0) => failures.push(format!("{label} has no entry point")),
                Ok(_) => {}
                Err(e) => failures.push(e),
            }
        }
    }
    // The preludes on their own, so a variant no family uses yet is still checked.
    for (label, src, caps) in [
        (
            "row_reduce_workgroup.wgsl",
            ROW_REDUCE_WORKGROUP,
            naga::valid::Capabilities::empty(),
        ),
        (
            "row_reduce_subgroup.wgsl",
            ROW_REDUCE_SUBGROUP,
            naga::valid::Capabilities::SUBGROUP,
        ),
    ] {
        if let Err(e) = validate(label, src, caps) {
            failures.push(e);
        }
    }
    // The benchmark-only shaders (the naive matmul baseline).
    for (name, src) in kernels_gpu::bench::SHADERS {
        match validate(name, src, naga::valid::Capabilities::empty()) {
            Ok(0) => failures.push(format!("{name} has no entry point")),
            Ok(_) => {}
            Err(e) => failures.push(e),
        }
    }
    assert!(seen >= 7, "expected the shader families, found {seen}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The shaders the crate embeds are exactly the files on disk (nothing unvalidated slips in).
#[test]
fn embedded_shader_list_matches_the_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/wgpu/shaders");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = kernels_gpu::Family::ALL
        .iter()
        .map(|f| format!("{}.wgsl", f.name()))
        .chain(
            [
                "row_reduce_workgroup.wgsl",
                "row_reduce_subgroup.wgsl",
                "f16_native.wgsl",
                "f16_integer.wgsl",
                "prelude.wgsl",
                // Part of the quant module (validated there): the streaming matvec and its
                // team reductions.
                "matvec.wgsl",
                "matvec_reduce_workgroup.wgsl",
                "matvec_reduce_subgroup.wgsl",
            ]
            .iter()
            .map(|s| s.to_string()),
        )
        .chain(
            kernels_gpu::bench::SHADERS
                .iter()
                .map(|(n, _)| n.to_string()),
        )
        .collect();
    embedded.sort();
    assert_eq!(on_disk, embedded);
}
