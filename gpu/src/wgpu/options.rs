//! What a caller may choose when opening the wgpu backend.

/// Options for [`crate::WgpuBackend::new_async`].
#[derive(Debug, Clone)]
pub struct WgpuOptions {
    /// Adapter preference.
    pub power_preference: wgpu::PowerPreference,
    /// Backends to try; `None` reads `WGPU_BACKEND` (default: all).
    pub backends: Option<wgpu::Backends>,
    /// Submit after this many recorded dispatches even without a download or flush.
    pub max_batch_dispatches: usize,
    /// Most bytes the buffer pool keeps in free buffers; freeing beyond it releases the least
    /// recently freed buffers first.
    pub max_pool_bytes: u64,
    /// Use subgroup operations in the row reductions where the adapter has them; `false`
    /// forces the workgroup-memory path.
    pub subgroups: bool,
    /// Read f16 values (f16 weights, the scales of quantized blocks) with native f16 types
    /// where the adapter has `shader-f16`; `false` forces the f32 path, which decodes them
    /// with integer arithmetic. Both give the same answers.
    pub shader_f16: bool,
    /// Run decode's packed products (`matvec`) one invocation per output with no barrier
    /// (`Some(true)`), or one workgroup per output (`Some(false)`). `None` chooses: the
    /// `KERNELS_MATVEC` variable (`each` or `workgroup`) where set, else one invocation per
    /// output on software adapters (lavapipe, SwiftShader), which run barriers slowly, and one
    /// workgroup per output on GPUs.
    pub per_output_matvec: Option<bool>,
    /// Caps the max storage binding size the backend works within (for testing the
    /// chunked and `LimitExceeded` paths on a real device); rounded down to the storage
    /// offset alignment.
    pub max_storage_binding_cap: Option<u64>,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            backends: None,
            max_batch_dispatches: 256,
            max_pool_bytes: 256 << 20,
            subgroups: true,
            shader_f16: true,
            per_output_matvec: None,
            max_storage_binding_cap: None,
        }
    }
}
