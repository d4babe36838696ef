//! The CUDA C kernels: one `.cu` file per op family (mirroring `src/wgpu/shaders/*.wgsl`), embedded
//! with `include_str!`, each compiled at run time by NVRTC after the shared prelude. Matmul has
//! no file: it is cuBLAS SGEMM.

pub use crate::device::Family;

/// The prelude every family is compiled after: `KERNEL(name, Block)`, block reductions.
pub const PRELUDE: &str = include_str!("kernels/prelude.cuh");

/// The families with a CUDA C file, and its source (matmul is cuBLAS; svd_lowrank's small steps
/// run on the host).
const SOURCES: &[(Family, &str)] = &[
    (Family::Elementwise, include_str!("kernels/elementwise.cu")),
    (Family::Reduce, include_str!("kernels/reduce.cu")),
    (Family::Softmax, include_str!("kernels/softmax.cu")),
    (Family::Norm, include_str!("kernels/norm.cu")),
    (Family::Layout, include_str!("kernels/layout.cu")),
    (Family::Optim, include_str!("kernels/optim.cu")),
    (Family::Loss, include_str!("kernels/loss.cu")),
    (Family::Rope, include_str!("kernels/rope.cu")),
    (Family::Attention, include_str!("kernels/attention.cu")),
    (Family::Gru, include_str!("kernels/gru.cu")),
    (Family::Quant, include_str!("kernels/quant.cu")),
];

impl Family {
    /// The families with a `.cu` file, in file-table order.
    pub fn cuda_families() -> impl Iterator<Item = Family> {
        SOURCES.iter().map(|(f, _)| *f)
    }

    /// The embedded CUDA C source of the family (without the prelude), if it has one.
    pub fn cuda_source(self) -> Option<&'static str> {
        SOURCES.iter().find(|(f, _)| *f == self).map(|(_, s)| *s)
    }

    /// What NVRTC compiles: the prelude, then the family (empty for a family without a file).
    pub fn cuda_module_source(self) -> String {
        format!(
            "{}\n{PRELUDE}\n#line 1 \"{}.cu\"\n{}",
            crate::contract::CUDA_HEADER,
            self.name(),
            self.cuda_source().unwrap_or_default()
        )
    }

    /// The kernel entry points the family defines (`KERNEL(name, Block)`), in file order.
    pub fn cuda_entries(self) -> Vec<&'static str> {
        self.cuda_source()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("KERNEL(")?.split([',', ')']).next())
            .collect()
    }
}

/// Host-compiler checks of the `.cu` files: every file parses and type-checks as C++ through a
/// shim that defines the CUDA built-ins (`host_shim.hpp`). No GPU or CUDA toolkit needed. Also
/// what the emulated device (`cuda-emulator` feature) builds its libraries with.
#[cfg(any(test, feature = "cuda-emulator"))]
pub(crate) mod host {
    use std::path::PathBuf;
    use std::process::Command;

    use super::{Family, PRELUDE};

    /// The shim that lets a host C++ compiler take the CUDA C: built-in variables, qualifiers,
    /// `__syncthreads`, and the fiber runtime the emulator drives.
    pub const SHIM: &str = include_str!("host_shim.hpp");

    /// A C++ compiler on the `PATH` (`c++`, `g++` or `clang++`), or why there is none.
    pub fn find_compiler() -> Result<String, String> {
        for cc in ["c++", "g++", "clang++"] {
            if Command::new(cc)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
            {
                return Ok(cc.to_string());
            }
        }
        Err("no C++ compiler (c++, g++ or clang++) on the PATH".into())
    }

    /// For the unit tests: a C++ compiler, or `None` after a skip line. In CI one must exist
    /// (tests/ci.sh installs g++): the rule of [`crate::testing::missing`].
    #[cfg(test)]
    pub fn compiler() -> Option<String> {
        find_compiler()
            .map_err(|why| {
                crate::testing::report(crate::testing::missing(
                    "the host checks of the CUDA kernels",
                    "C++ compiler",
                    &why,
                    crate::testing::Need::InCi,
                    crate::testing::in_ci(),
                ))
            })
            .ok()
    }

    /// The translation unit of one family as the host compiler sees it.
    pub fn host_source(f: Family) -> String {
        format!(
            "{SHIM}\n#line 1 \"contract.cuh\"\n{}\n#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{}.cu\"\n{}\n#include \"host_runtime\"\n",
            crate::contract::CUDA_HEADER,
            f.name(),
            f.cuda_source().unwrap_or_default()
        )
    }

    /// A fresh scratch directory for this test process.
    pub fn try_scratch(what: &str) -> std::io::Result<PathBuf> {
        let dir = std::env::temp_dir().join(format!(
            "kernels-cuda-{what}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// [`try_scratch`] for the unit tests.
    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    pub fn scratch(what: &str) -> PathBuf {
        try_scratch(what).unwrap()
    }

    /// Compiles family `f` with `args` (e.g. `-fsyntax-only`, or `-shared -o lib.so`) in `dir`;
    /// `Err` holds the compiler's diagnostics.
    pub fn compile(
        cc: &str,
        f: Family,
        dir: &std::path::Path,
        args: &[&str],
    ) -> Result<(), String> {
        let src = dir.join(format!("{}.cpp", f.name()));
        std::fs::write(&src, host_source(f)).map_err(|e| e.to_string())?;
        // Families compile in parallel in one directory: the shared header is written under
        // a name of this family's and renamed into place (atomic), so no compiler ever reads
        // it half-written (one that did built a library without `emu_run`, now and then).
        let staged = dir.join(format!("host_runtime.{}", f.name()));
        std::fs::write(&staged, include_str!("host_runtime.hpp")).map_err(|e| e.to_string())?;
        std::fs::rename(&staged, dir.join("host_runtime")).map_err(|e| e.to_string())?;
        let out = Command::new(cc)
            .args([
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-parameter",
            ])
            .args([
                "-Wno-unused-function",
                "-Wno-unused-variable",
                "-fPIC",
                "-I",
            ])
            .arg(dir)
            .args(args)
            .arg(&src)
            .current_dir(dir)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cu_file_compiles_with_the_host_compiler() {
        let Some(cc) = host::compiler() else { return };
        let dir = host::scratch("syntax");
        let mut failed = Vec::new();
        for f in Family::cuda_families() {
            assert!(
                !f.cuda_entries().is_empty(),
                "{}.cu defines no KERNEL",
                f.name()
            );
            if let Err(e) = host::compile(&cc, f, &dir, &["-fsyntax-only"]) {
                failed.push(format!("{}.cu:\n{e}", f.name()));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    #[test]
    fn cuda_kernels_read_their_declared_blocks_by_name() {
        use crate::contract::tests::{reads_a_slot, wgsl_functions};
        use crate::params::BLOCKS;
        let mut defined: Vec<&str> = Vec::new();
        for f in Family::cuda_families() {
            let src = f.cuda_source().unwrap_or_default();
            for l in src.lines() {
                if !l.starts_with("__device__") && !l.starts_with("KERNEL(") {
                    continue;
                }
                assert!(!l.contains("const Params"), "{}.cu: {l}", f.name());
            }
            for (i, l) in src.lines().enumerate() {
                let code = l.split("//").next().unwrap_or_default();
                assert!(
                    !reads_a_slot(code) && !code.contains("raw."),
                    "{}.cu:{}: reads a slot of the raw block: {l}",
                    f.name(),
                    i + 1
                );
                let Some(rest) = l.strip_prefix("KERNEL(") else {
                    continue;
                };
                let (entry, block) = rest.split_once(", ").unwrap();
                let block = block.split(')').next().unwrap();
                let declared = BLOCKS.iter().find(|b| b.entries.contains(&entry));
                assert_eq!(
                    declared.map(|b| b.name),
                    Some(block),
                    "{}.cu: KERNEL({entry}, {block}) against gpu/src/params.rs",
                    f.name()
                );
                defined.push(entry);
            }
        }
        // Every declared entry is a kernel of one backend or both.
        for f in Family::ALL {
            defined.extend(wgsl_functions(f.source()).into_iter().map(|(n, _)| n));
        }
        for b in BLOCKS {
            for e in b.entries {
                assert!(defined.contains(e), "{}: no kernel {e}", b.name);
            }
        }
    }

    #[test]
    fn a_broken_kernel_fails_the_host_check() {
        // The check itself must be able to fail: a type error in a kernel is reported.
        let Some(cc) = host::compiler() else { return };
        let dir = host::scratch("broken");
        let src = dir.join("broken.cpp");
        std::fs::write(
            &src,
            format!(
                "{}\n{}\n{PRELUDE}\nKERNEL(bad, ElemsParams) {{ out0[0] = undefined_thing; }}\n",
                host::SHIM,
                crate::contract::CUDA_HEADER
            ),
        )
        .unwrap();
        let out = std::process::Command::new(&cc)
            .args(["-std=c++17", "-fsyntax-only"])
            .arg(&src)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("undefined_thing"));
    }

    #[test]
    fn entries_are_listed_from_the_sources() {
        assert_eq!(
            Family::Optim.cuda_entries(),
            vec!["adamw_step", "sgd_step"],
            "KERNEL(name, Block) lines"
        );
        for f in Family::cuda_families() {
            assert!(f.cuda_module_source().contains(PRELUDE));
        }
    }
}
