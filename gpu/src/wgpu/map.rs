//! Waiting for a staging buffer's `map_async`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use kernels_core::Result;

use super::device::backend_err;

/// Resolves when a `map_async` callback fires. Natively it drives the device with a blocking
/// poll; in the browser the event loop delivers the callback.
pub(crate) type MapState = (
    Option<std::result::Result<(), wgpu::BufferAsyncError>>,
    Option<Waker>,
);

pub(crate) struct MapFuture {
    pub(crate) state: Arc<Mutex<MapState>>,
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    pub(crate) device: wgpu::Device,
}

impl Future for MapFuture {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let take = |s: &Mutex<MapState>, cx: &Context<'_>| {
            let mut g = s.lock().map_err(|_| backend_err("map state poisoned"))?;
            match g.0.take() {
                Some(r) => Ok(Some(r)),
                None => {
                    g.1 = Some(cx.waker().clone());
                    Ok(None)
                }
            }
        };
        match take(&self.state, cx) {
            Err(e) => return Poll::Ready(Err(e)),
            Ok(Some(r)) => {
                return Poll::Ready(r.map_err(|e| backend_err(format!("map_async: {e}"))));
            }
            Ok(None) => {}
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            if let Err(e) = self.device.poll(wgpu::PollType::wait_indefinitely()) {
                return Poll::Ready(Err(backend_err(format!("poll: {e}"))));
            }
            match take(&self.state, cx) {
                Err(e) => return Poll::Ready(Err(e)),
                Ok(Some(r)) => {
                    return Poll::Ready(r.map_err(|e| backend_err(format!("map_async: {e}"))));
                }
                Ok(None) => {}
            }
        }
        Poll::Pending
    }
}
