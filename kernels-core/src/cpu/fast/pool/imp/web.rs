//! The pool's workers in a browser (wasm32 built with the `atomics` target feature): web
//! workers that share the page's wasm memory.
//!
//! std cannot start threads on wasm32-unknown-unknown, so the page does: it starts web workers
//! that instantiate the same module on the same shared memory, and each calls
//! [`super::super::run_worker`], which registers the thread here and never returns. Once they
//! have registered (or the page stops waiting), the page calls [`super::super::seal_workers`]:
//! the registered threads become the pool's workers, and [`super::super::threads`] counts them.
//! Before that the pool has no workers and every product runs on the caller.

use core::hint::spin_loop;
use core::ptr::null_mut;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
use std::boxed::Box;
use std::thread;
use std::vec::Vec;

use super::{WORKERS, Worker};

/// Epoch reads an idle worker spins for before it parks (a few hundred microseconds in
/// Chromium, about the native pool's `SPIN_MICROS`).
pub(super) const SPIN_CHECKS: u32 = 1 << 18;

/// Workers the page may register at most; more are refused ([`register`] returns `None`).
pub(super) const MAX_WORKERS: usize = 64;

/// One registered worker: its thread and its `sleeping` flag (leaked: workers live for ever).
struct Registration {
    thread: thread::Thread,
    sleeping: AtomicBool,
}

/// Slots claimed in order through `CLAIMED`; a slot is null until its worker has stored itself.
static SLOTS: [AtomicPtr<Registration>; MAX_WORKERS] =
    [const { AtomicPtr::new(null_mut()) }; MAX_WORKERS];
static CLAIMED: AtomicUsize = AtomicUsize::new(0);

/// Ranges the web workers have run (the page's evidence that its threads take part).
pub(in crate::cpu::fast::pool) static WORKER_RANGES: AtomicUsize = AtomicUsize::new(0);

/// Registers the calling thread; `None` when every slot is taken. Never blocks.
pub(super) fn register() -> Option<&'static AtomicBool> {
    let i = CLAIMED.fetch_add(1, AcqRel);
    let slot = SLOTS.get(i)?;
    let reg: &'static Registration = Box::leak(Box::new(Registration {
        thread: thread::current(),
        sleeping: AtomicBool::new(false),
    }));
    slot.store(reg as *const Registration as *mut Registration, Release);
    Some(&reg.sleeping)
}

/// Registered workers so far (claimed slots whose worker has stored itself).
pub(in crate::cpu::fast::pool) fn registered() -> usize {
    SLOTS.iter().filter(|s| !s.load(Acquire).is_null()).count()
}

/// Makes the registered workers the pool's, once: later calls (and workers registered after
/// the first) change nothing. Returns how many the pool has. Never blocks.
pub(in crate::cpu::fast::pool) fn seal() -> usize {
    if let Some(w) = WORKERS.get() {
        return w.len();
    }
    warm();
    let all: Vec<Worker> = SLOTS
        .iter()
        .filter_map(|s| {
            let p = s.load(Acquire);
            // SAFETY: a non-null slot holds a leaked `Registration`, never freed.
            (!p.is_null()).then(|| unsafe { &*p })
        })
        .map(|r| Worker {
            thread: r.thread.clone(),
            sleeping: &r.sleeping,
        })
        .collect();
    // Only the page's main thread seals; a lost race would leave the other list in place.
    let _ = WORKERS.set(all);
    WORKERS.get().map_or(0, Vec::len)
}

/// Reads the settings the products read once (each a `OnceLock`) on this thread, before any
/// worker runs a range: a worker's first read must never find one being set by the page's
/// main thread, or the other way round, since the main thread cannot wait for it.
fn warm() {
    use crate::cpu::fast::{config, isa::Isa, qdot::Family};
    let _ = (
        config::forced_kernel(),
        config::exact_activations(),
        config::activation_precision(),
        Isa::selected(),
        Family::best(),
    );
}

/// The pool's workers: none until [`seal`].
pub(in crate::cpu::fast::pool) fn workers() -> &'static [Worker] {
    WORKERS.get().map_or(&[], Vec::as_slice)
}

/// A web worker's life: registered, then the pool's worker loop for ever. A worker refused a
/// slot spins idle (it returns nothing to a page that expects it to stay).
pub(in crate::cpu::fast::pool) fn run_worker() -> ! {
    match register() {
        Some(sleeping) => loop {
            super::worker(sleeping);
        },
        None => loop {
            thread::park();
            spin_loop();
        },
    }
}
