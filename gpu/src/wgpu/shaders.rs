use crate::device::Family;

impl Family {
    /// Whether the family's row reductions come in a subgroup and a workgroup-memory
    /// variant (a prelude defining `row_sum` / `row_max`).
    pub fn has_subgroup_variant(self) -> bool {
        match self {
            Family::Reduce | Family::Softmax | Family::Norm | Family::Quant => true,
            Family::Elementwise
            | Family::Matmul
            | Family::Layout
            | Family::Optim
            | Family::Loss
            | Family::Rope
            | Family::Attention
            | Family::Gru
            | Family::Svd => false,
        }
    }
    /// The source of the family's shader module: the family file, preceded for families
    /// with row reductions by the prelude of the chosen variant (subgroup operations, or
    /// the workgroup-memory fallback).
    pub fn module_source(self, subgroups: bool) -> String {
        let contract = crate::contract::WGSL_PRELUDE;
        if !self.has_subgroup_variant() {
            return format!("{contract}\n{}", self.source());
        }
        let prelude = if subgroups {
            ROW_REDUCE_SUBGROUP
        } else {
            ROW_REDUCE_WORKGROUP
        };
        format!("{contract}\n{prelude}\n{}", self.source())
    }
    /// The embedded WGSL source.
    pub fn source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("shaders/elementwise.wgsl"),
            Family::Matmul => include_str!("shaders/matmul.wgsl"),
            Family::Reduce => include_str!("shaders/reduce.wgsl"),
            Family::Softmax => include_str!("shaders/softmax.wgsl"),
            Family::Norm => include_str!("shaders/norm.wgsl"),
            Family::Layout => include_str!("shaders/layout.wgsl"),
            Family::Optim => include_str!("shaders/optim.wgsl"),
            Family::Loss => include_str!("shaders/loss.wgsl"),
            Family::Rope => include_str!("shaders/rope.wgsl"),
            Family::Attention => include_str!("shaders/attention.wgsl"),
            Family::Gru => include_str!("shaders/gru.wgsl"),
            Family::Svd => include_str!("shaders/svd.wgsl"),
            Family::Quant => include_str!("shaders/quant.wgsl"),
        }
    }
}

/// Row-reduction preludes (`row_sum`, `row_max` over a 256-thread workgroup).
pub const ROW_REDUCE_WORKGROUP: &str = include_str!("shaders/row_reduce_workgroup.wgsl");
/// The subgroup variant (needs `Features::SUBGROUP`).
pub const ROW_REDUCE_SUBGROUP: &str = include_str!("shaders/row_reduce_subgroup.wgsl");
