//! Every `src/shaders/*.wgsl` parses and validates with naga (no GPU needed).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn every_wgsl_file_parses_and_validates() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shaders");
    let mut seen = 0;
    let mut failures = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wgsl"))
        .collect();
    entries.sort();
    for path in entries {
        seen += 1;
        let src = std::fs::read_to_string(&path).unwrap();
        let module = match naga::front::wgsl::parse_str(&src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: {}", path.display(), e.emit_to_string(&src)));
                continue;
            }
        };
        let mut validator = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        );
        if let Err(e) = validator.validate(&module) {
            failures.push(format!("{}: {}", path.display(), e.emit_to_string(&src)));
        }
        assert!(
            !module.entry_points.is_empty(),
            "{} has no entry point",
            path.display()
        );
    }
    assert!(
        seen >= 7,
        "expected the seven shader families, found {seen}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The shaders the crate embeds are exactly the files on disk (nothing unvalidated slips in).
#[test]
fn embedded_shader_list_matches_the_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/shaders");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".wgsl"))
        .collect();
    on_disk.sort();
    let mut embedded: Vec<String> = kernels_gpu::wgpu_backend::Family::ALL
        .iter()
        .map(|f| format!("{}.wgsl", f.name()))
        .chain(
            kernels_gpu::bench::SHADERS
                .iter()
                .map(|(n, _)| n.to_string()),
        )
        .collect();
    embedded.sort();
    assert_eq!(on_disk, embedded);
}
