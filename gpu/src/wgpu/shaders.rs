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
    /// Whether the family reads f16 values (f16 weights, block scales) and so comes in a
    /// native-f16 variant (`shader-f16`) and an integer-decoding one.
    pub fn has_f16_variant(self) -> bool {
        self == Family::Quant
    }
    /// The source of the family's shader module: the family file, preceded for families
    /// with row reductions by the prelude of the chosen variant (subgroup operations, or
    /// the workgroup-memory fallback), and for families that read f16 values by the f16
    /// reader of the chosen variant (native `f16`, or integer decoding).
    pub fn module_source(self, subgroups: bool, f16: bool) -> String {
        let contract = crate::contract::WGSL_PRELUDE;
        let mut s = String::new();
        if self.has_f16_variant() && f16 {
            // `enable` must come before any declaration.
            s.push_str("enable f16;\n");
        }
        s.push_str(contract);
        s.push('\n');
        if self.has_subgroup_variant() {
            s.push_str(if subgroups {
                ROW_REDUCE_SUBGROUP
            } else {
                ROW_REDUCE_WORKGROUP
            });
            s.push('\n');
        }
        if self == Family::Quant {
            // The streaming matvec's team reduction, in the same variant.
            s.push_str(if subgroups {
                MATVEC_REDUCE_SUBGROUP
            } else {
                MATVEC_REDUCE_WORKGROUP
            });
            s.push('\n');
        }
        if self.has_f16_variant() {
            s.push_str(if f16 { F16_NATIVE } else { F16_INTEGER });
            s.push('\n');
        }
        s.push_str(self.source());
        s
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
            // The weight decoders, then the streaming matvec of GPUs that uses them.
            Family::Quant => concat!(
                include_str!("shaders/quant.wgsl"),
                "\n",
                include_str!("shaders/matvec.wgsl")
            ),
        }
    }
}

/// Row-reduction preludes (`row_sum`, `row_max` over a 256-thread workgroup).
pub const ROW_REDUCE_WORKGROUP: &str = include_str!("shaders/row_reduce_workgroup.wgsl");
/// The subgroup variant (needs `Features::SUBGROUP`).
pub const ROW_REDUCE_SUBGROUP: &str = include_str!("shaders/row_reduce_subgroup.wgsl");

/// The team reductions of the streaming matvec (`matvec_stream`, in the quant module) (`seg_sum4`): workgroup memory ...
pub const MATVEC_REDUCE_WORKGROUP: &str = include_str!("shaders/matvec_reduce_workgroup.wgsl");
/// ... and subgroup operations (needs `Features::SUBGROUP`).
pub const MATVEC_REDUCE_SUBGROUP: &str = include_str!("shaders/matvec_reduce_subgroup.wgsl");

/// f16 readers (`f16_at(byte offset)` of the `packed` words): native f16 (needs
/// `Features::SHADER_F16`) ...
pub const F16_NATIVE: &str = include_str!("shaders/f16_native.wgsl");
/// ... and integer decoding, exact on any adapter.
pub const F16_INTEGER: &str = include_str!("shaders/f16_integer.wgsl");
