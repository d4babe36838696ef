use super::WgpuBackend;
use super::device::Gpu;
use super::device::PipelineKey;
use super::device::Variant;
use crate::device::Family;

impl WgpuBackend {
    pub(crate) fn module(&self, g: &Gpu, family: Family, variant: Variant) -> wgpu::ShaderModule {
        let mut modules = g.modules.borrow_mut();
        modules
            .entry((family, variant))
            .or_insert_with(|| {
                g.device.create_shader_module(wgpu::ShaderModuleDescriptor {
                    label: Some(family.name()),
                    source: wgpu::ShaderSource::Wgsl(
                        family.module_source(variant.subgroups, variant.f16).into(),
                    ),
                })
            })
            .clone()
    }

    /// The variant of `family`'s module this device uses.
    pub(crate) fn variant(&self, family: Family) -> Variant {
        Variant {
            subgroups: self.subgroups && family.has_subgroup_variant(),
            f16: self.f16 && family.has_f16_variant(),
        }
    }

    /// Levels of the subgroup tree that cover a 256-thread workgroup at the smallest
    /// subgroup size.
    pub(crate) fn subgroup_levels(&self) -> u32 {
        let size = u64::from(self.subgroup_min.max(2));
        let mut levels = 1;
        let mut covered = size;
        while covered < 256 {
            covered *= size;
            levels += 1;
        }
        levels
    }

    pub(crate) fn pipeline(
        &self,
        g: &Gpu,
        family: Family,
        entry: &'static str,
        constants: &[(&'static str, u32)],
    ) -> wgpu::ComputePipeline {
        let variant = self.variant(family);
        let mut constants: Vec<(&'static str, f64)> =
            constants.iter().map(|&(k, v)| (k, f64::from(v))).collect();
        if variant.subgroups {
            constants.push(("SG_LEVELS", f64::from(self.subgroup_levels())));
        }
        let key: PipelineKey = (
            family,
            variant,
            entry,
            constants.iter().map(|(k, v)| (*k, v.to_bits())).collect(),
        );
        if let Some(p) = g.pipelines.borrow().get(&key) {
            return p.clone();
        }
        let module = self.module(g, family, variant);
        let p = g
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&g.pipeline_layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: &constants,
                    zero_initialize_workgroup_memory: false,
                },
                cache: None,
            });
        g.pipelines.borrow_mut().insert(key, p.clone());
        p
    }

    /// The pipelines built so far, as `family/entry` plus `+subgroup` and `+f16` for those
    /// variants (lets tests check which kernel variant ran).
    pub fn pipelines_built(&self) -> Vec<String> {
        let g = self.gpu();
        let mut out: Vec<String> = g
            .pipelines
            .borrow()
            .keys()
            .map(|(f, v, e, _)| {
                let sg = if v.subgroups { "+subgroup" } else { "" };
                let f16 = if v.f16 { "+f16" } else { "" };
                format!("{}/{e}{sg}{f16}", f.name())
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}
