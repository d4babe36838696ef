//! Host time spent recording and submitting device work, measured the same way on every backend
//! (`host_ns` in [`crate::Counters`], and in the CUDA counters): from the first command a batch
//! records (a dispatch, a clear, an upload, a launch) until the call that submits the batch (or
//! launches its graph) returns. The wait for results is not in it: a download's map or a stream
//! synchronize happens after the submit returned.
//!
//! For decode, where one token is one batch, `host_ns` over the tokens is the host's cost of a
//! token; over the dispatches it is the cost of recording one. On wgpu, `submit_ns` is the part
//! spent in the submit call itself (finishing the encoder, where wgpu-core validates the pass and
//! encodes it into the driver's command buffer, and the queue submit); the rest is recording.

use std::cell::Cell;

use web_time::Instant;

/// Now, on the clock the host times use.
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Nanoseconds since `start`.
pub(crate) fn ns_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The clock of the batch being recorded: [`HostClock::begin`] at each recorded command (only
/// the first of a batch starts it), [`HostClock::end`] once the submit returned.
#[derive(Debug, Default)]
pub(crate) struct HostClock {
    started: Cell<Option<Instant>>,
}

impl HostClock {
    /// Starts the clock unless the current batch already did.
    pub(crate) fn begin(&self) {
        if self.started.get().is_none() {
            self.started.set(Some(Instant::now()));
        }
    }

    /// Nanoseconds since the batch's first command, and stops the clock (0 when nothing was
    /// recorded).
    pub(crate) fn end(&self) -> u64 {
        self.started.take().map_or(0, ns_since)
    }
}

#[cfg(test)]
mod tests {
    use super::HostClock;

    #[test]
    fn a_batch_is_timed_from_its_first_command_until_end() {
        let c = HostClock::default();
        assert_eq!(c.end(), 0, "nothing recorded, nothing timed");
        c.begin();
        let spin = web_time::Instant::now();
        while spin.elapsed().as_micros() < 200 {}
        c.begin(); // a later command of the same batch does not restart the clock
        let ns = c.end();
        assert!(
            ns >= 200_000,
            "the batch's time counts from its first command: {ns} ns"
        );
        assert_eq!(c.end(), 0, "end stops the clock");
    }
}
