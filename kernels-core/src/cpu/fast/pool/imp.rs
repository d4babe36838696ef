//! The pool's threads (with the `threads` feature, natively, and on wasm32 built with the
//! `atomics` target feature, whose workers are web workers: `web`). See the parent module
//! for what the pool promises; this is how.
//!
//! One product at a time owns the workers (`busy`). Its job lives on the caller's stack; the
//! caller publishes a pointer to it in `job`, then bumps `epoch`. A worker that sees a new
//! epoch counts itself in `refs`, reads `job` and takes ranges from the job's counter until
//! none are left. The caller takes ranges too, waits until every range is `done`, clears
//! `job`, and returns only once `refs` is back to 0: no worker can hold the job after that.
//! Every access to `epoch`, `job`, `refs` and a worker's `sleeping` is `SeqCst`, so a worker
//! that counted itself in before the caller cleared `job` is seen by the caller's wait, and a
//! worker about to park sees the new epoch or is seen asleep (and unparked) by the caller.
//!
//! In a browser the caller is the page's main thread, which may not block
//! (`memory.atomic.wait32` traps there): on wasm32 the caller only spins, and takes the job's
//! failure lock with `try_lock`. Workers park as natively (web workers may wait).

use core::hint::spin_loop;
use core::ops::Range;
use core::ptr::null_mut;
use core::sync::atomic::AtomicBool;
use core::sync::atomic::AtomicPtr;
use core::sync::atomic::AtomicUsize;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::any::Any;
use std::boxed::Box;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::MutexGuard;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread::{self, Thread};
#[cfg(not(target_arch = "wasm32"))]
use std::time::{Duration, Instant};
use std::vec::Vec;

#[cfg(not(target_arch = "wasm32"))]
use super::SPIN_MICROS;
#[cfg(not(target_arch = "wasm32"))]
use crate::cpu::fast::config;
use crate::error::{Error, Result};

/// How long the caller spins for the others' ranges before it parks (it is unparked by the
/// thread that finishes the last range).
#[cfg(not(target_arch = "wasm32"))]
const CALLER_SPIN: Duration = Duration::from_micros(50);

type Panic = Box<dyn Any + Send + 'static>;

/// One product's ranges.
struct Job<'a> {
    f: &'a (dyn Fn(Range<usize>) -> Result<()> + Sync),
    len: usize,
    chunk: usize,
    chunks: usize,
    /// Workers that may join (the product's thread count less the caller).
    helpers: usize,
    joined: AtomicUsize,
    next: AtomicUsize,
    done: AtomicUsize,
    caller: Thread,
    failure: Mutex<Failure>,
}

/// What went wrong in a job's ranges.
#[derive(Default)]
struct Failure {
    /// The error of the lowest range that returned one, with that range's index.
    error: Option<(usize, Error)>,
    /// The first panic caught.
    panic: Option<Panic>,
}

/// The state the caller and the workers share.
struct Shared {
    epoch: AtomicUsize,
    job: AtomicPtr<Job<'static>>,
    refs: AtomicUsize,
    busy: AtomicBool,
}

static SHARED: Shared = Shared {
    epoch: AtomicUsize::new(0),
    job: AtomicPtr::new(null_mut()),
    refs: AtomicUsize::new(0),
    busy: AtomicBool::new(false),
};

/// A worker as the caller sees it.
pub(super) struct Worker {
    thread: Thread,
    sleeping: &'static AtomicBool,
}

static WORKERS: OnceLock<Vec<Worker>> = OnceLock::new();

/// The workers, `config::threads() - 1` of them, started on first use. A thread the OS refuses
/// to start is one worker fewer (none: everything runs on the caller).
#[cfg(not(target_arch = "wasm32"))]
fn workers() -> &'static [Worker] {
    WORKERS.get_or_init(|| {
        let mut all = Vec::new();
        for i in 0..config::threads().saturating_sub(1) {
            let sleeping: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
            let spawned = thread::Builder::new()
                .name(std::format!("kernels-pool-{i}"))
                .spawn(move || worker(sleeping));
            match spawned {
                Ok(h) => all.push(Worker {
                    thread: h.thread().clone(),
                    sleeping,
                }),
                Err(_) => break,
            }
        }
        all
    })
}

/// Runs the `chunks` ranges of `chunk` elements of `0..len` on the caller and up to
/// `threads - 1` workers.
pub(super) fn run(
    threads: usize,
    len: usize,
    chunk: usize,
    chunks: usize,
    f: &(dyn Fn(Range<usize>) -> Result<()> + Sync),
) -> Result<()> {
    let workers = workers();
    let helpers = threads
        .saturating_sub(1)
        .min(workers.len())
        .min(chunks.saturating_sub(1));
    if helpers == 0
        || SHARED
            .busy
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
    {
        return super::inline(len, chunk, chunks, f);
    }
    let job = Job {
        f,
        len,
        chunk,
        chunks,
        helpers,
        joined: AtomicUsize::new(0),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        caller: thread::current(),
        failure: Mutex::new(Failure::default()),
    };
    SHARED
        .job
        .store(&job as *const Job<'_> as *mut Job<'static>, SeqCst);
    SHARED.epoch.fetch_add(1, SeqCst);
    for w in workers.iter().take(helpers) {
        if w.sleeping.load(SeqCst) {
            w.thread.unpark();
        }
    }
    work(&job, true);
    wait_done(&job);
    SHARED.job.store(null_mut(), SeqCst);
    let mut spins = 0u32;
    while SHARED.refs.load(SeqCst) != 0 {
        spins = spins.saturating_add(1);
        if spins < 1 << 12 {
            spin_loop();
        } else {
            thread::yield_now();
        }
    }
    SHARED.busy.store(false, Release);
    let failure = job
        .failure
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = failure.panic {
        resume_unwind(p);
    }
    match failure.error {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Waits until every range of `job` is done: spinning, then parked (unparked by the thread that
/// finishes the last range).
#[cfg(not(target_arch = "wasm32"))]
fn wait_done(job: &Job) {
    let start = Instant::now();
    while job.done.load(Acquire) < job.chunks {
        if start.elapsed() < CALLER_SPIN {
            spin_loop();
        } else {
            thread::park_timeout(Duration::from_micros(200));
        }
    }
}

/// Waits until every range of `job` is done, spinning: the caller is the page's main thread,
/// which must not block.
#[cfg(target_arch = "wasm32")]
fn wait_done(job: &Job) {
    while job.done.load(Acquire) < job.chunks {
        spin_loop();
    }
}

/// Takes the job's ranges until none is left. The thread that finishes the last range wakes
/// the caller (unless it is the caller).
fn work(job: &Job, is_caller: bool) {
    loop {
        let i = job.next.fetch_add(1, Relaxed);
        if i >= job.chunks {
            return;
        }
        let r = i * job.chunk..((i + 1) * job.chunk).min(job.len);
        match catch_unwind(AssertUnwindSafe(|| (job.f)(r))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => job.fail(i, Some(e), None),
            Err(p) => job.fail(i, None, Some(p)),
        }
        #[cfg(target_arch = "wasm32")]
        if !is_caller {
            web::WORKER_RANGES.fetch_add(1, Relaxed);
        }
        if job.done.fetch_add(1, AcqRel) + 1 == job.chunks && !is_caller {
            job.caller.unpark();
        }
    }
}

impl Job<'_> {
    fn fail(&self, i: usize, error: Option<Error>, panic: Option<Panic>) {
        let mut f = lock(&self.failure);
        if f.panic.is_none() {
            f.panic = panic;
        }
        if let Some(e) = error
            && f.error.as_ref().is_none_or(|(j, _)| i < *j)
        {
            f.error = Some((i, e));
        }
    }
}

/// Locks `m` (a poisoned lock is taken as it is).
#[cfg(not(target_arch = "wasm32"))]
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Locks `m` spinning on `try_lock`: a contended `lock` would wait on the futex, which traps on
/// the page's main thread.
#[cfg(target_arch = "wasm32")]
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    loop {
        match m.try_lock() {
            Ok(g) => return g,
            Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => spin_loop(),
        }
    }
}

/// A worker's life: wait for an epoch, join its job, repeat.
pub(super) fn worker(sleeping: &'static AtomicBool) {
    // From 0, not the current epoch: a job published while this thread was starting is joined.
    let mut seen = 0;
    loop {
        seen = wait(seen, sleeping);
        SHARED.refs.fetch_add(1, SeqCst);
        let p = SHARED.job.load(SeqCst);
        if !p.is_null() {
            // SAFETY: the job's caller keeps it alive until `refs` is 0 after it cleared `job`;
            // this thread counted itself in `refs` before reading a non-null `job`.
            let job = unsafe { &*p };
            if job.joined.fetch_add(1, Relaxed) < job.helpers {
                work(job, false);
            }
        }
        SHARED.refs.fetch_sub(1, SeqCst);
    }
}

/// Waits for an epoch other than `seen`: spinning for [`super::SPIN_MICROS`] (counted on
/// wasm32), then parked.
fn wait(seen: usize, sleeping: &AtomicBool) -> usize {
    let mut spin = Spin::new();
    loop {
        let e = SHARED.epoch.load(SeqCst);
        if e != seen {
            return e;
        }
        if spin.more() {
            spin_loop();
            continue;
        }
        sleeping.store(true, SeqCst);
        while SHARED.epoch.load(SeqCst) == seen {
            thread::park();
        }
        sleeping.store(false, SeqCst);
        spin = Spin::new();
    }
}

/// An idle worker's spin before it parks: [`super::SPIN_MICROS`] by the clock.
#[cfg(not(target_arch = "wasm32"))]
struct Spin {
    since: Instant,
    n: u32,
}

#[cfg(not(target_arch = "wasm32"))]
impl Spin {
    fn new() -> Spin {
        Spin {
            since: Instant::now(),
            n: 0,
        }
    }

    /// Whether to spin once more (the clock is read every 256 calls).
    fn more(&mut self) -> bool {
        self.n = self.n.wrapping_add(1);
        !self.n.is_multiple_of(256) || self.since.elapsed() < Duration::from_micros(SPIN_MICROS)
    }
}

/// An idle worker's spin before it parks, counted: wasm32-unknown-unknown has no clock in std.
#[cfg(target_arch = "wasm32")]
struct Spin(u32);

#[cfg(target_arch = "wasm32")]
impl Spin {
    fn new() -> Spin {
        Spin(0)
    }

    /// Whether to spin once more: [`web::SPIN_CHECKS`] epoch reads in all.
    fn more(&mut self) -> bool {
        self.0 = self.0.saturating_add(1);
        self.0 < web::SPIN_CHECKS
    }
}

#[cfg(target_arch = "wasm32")]
pub(super) mod web;
#[cfg(target_arch = "wasm32")]
use web::workers;
