//! Device loss and validation errors: error scopes around each call, and recovery after a
//! reported loss.
use super::WgpuBackend;
use super::device::backend_err;
use super::device::map_wgpu_error;
use kernels_core::Error;
use kernels_core::Result;

impl WgpuBackend {
    /// After a device loss was returned to a caller, the next call gets a fresh device
    /// (natively; in the browser, where that cannot block, call `recover_async`).
    pub(crate) fn recover_if_reported(&self) -> Result<()> {
        if !self.loss_reported.get() {
            return Ok(());
        }
        let lost = self.gpu().lost.lock().ok().and_then(|l| l.clone());
        let Some(why) = lost else {
            self.loss_reported.set(false);
            return Ok(());
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = why;
            self.recover()
        }
        #[cfg(target_arch = "wasm32")]
        {
            Err(Error::DeviceLost {
                why: format!("{why}; call WgpuBackend::recover_async() for a fresh device"),
            })
        }
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        let g = self.gpu();
        if let Ok(l) = g.lost.lock()
            && let Some(why) = l.as_ref()
        {
            self.loss_reported.set(true);
            return Err(Error::DeviceLost { why: why.clone() });
        }
        if let Ok(mut u) = g.uncaptured.lock()
            && let Some(why) = u.take()
        {
            return Err(backend_err(format!("uncaptured device error: {why}")));
        }
        Ok(())
    }

    /// Runs `f` inside validation and out-of-memory error scopes and turns a captured error
    /// into an [`Error`]. Where the scope's result is not ready at once (the browser), the
    /// error surfaces later through the uncaptured-error check instead.
    pub(crate) fn scoped<R>(&self, what: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.recover_if_reported()?;
        let g = self.gpu();
        self.check_alive()?;
        let oom = g.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = g.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let val_err = kernels_core::backend::now_or_never(val.pop()).flatten();
        let oom_err = kernels_core::backend::now_or_never(oom.pop()).flatten();
        if val_err.is_some() || oom_err.is_some() || r.is_err() {
            // Errors on a destroyed device come before its lost callback; a poll delivers
            // the callback so the caller sees `DeviceLost` rather than the symptom.
            #[cfg(not(target_arch = "wasm32"))]
            let _ = g.device.poll(wgpu::PollType::Poll);
        }
        self.check_alive()?;
        if let Some(e) = oom_err {
            return Err(map_wgpu_error(e, what));
        }
        if let Some(e) = val_err {
            return Err(map_wgpu_error(e, what));
        }
        r
    }
}
