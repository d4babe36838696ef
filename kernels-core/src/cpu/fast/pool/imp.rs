//! The pool's threads (with the `threads` feature, natively). See the parent module for what
//! the pool promises; this is how.
//!
//! One product at a time owns the workers (`busy`). Its job lives on the caller's stack; the
//! caller publishes a pointer to it in `job`, then bumps `epoch`. A worker that sees a new
//! epoch counts itself in `refs`, reads `job` and takes ranges from the job's counter until
//! none are left. The caller takes ranges too, waits until every range is `done`, clears
//! `job`, and returns only once `refs` is back to 0: no worker can hold the job after that.
//! Every access to `epoch`, `job`, `refs` and a worker's `sleeping` is `SeqCst`, so a worker
//! that counted itself in before the caller cleared `job` is seen by the caller's wait, and a
//! worker about to park sees the new epoch or is seen asleep (and unparked) by the caller.

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
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::SPIN_MICROS;
use crate::cpu::fast::config;
use crate::error::{Error, Result};

/// How long the caller spins for the others' ranges before it parks (it is unparked by the
/// thread that finishes the last range).
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
struct Worker {
    thread: Thread,
    sleeping: &'static AtomicBool,
}

static WORKERS: OnceLock<Vec<Worker>> = OnceLock::new();

/// The workers, `config::threads() - 1` of them, started on first use. A thread the OS refuses
/// to start is one worker fewer (none: everything runs on the caller).
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
    let start = Instant::now();
    while job.done.load(Acquire) < chunks {
        if start.elapsed() < CALLER_SPIN {
            spin_loop();
        } else {
            thread::park_timeout(Duration::from_micros(200));
        }
    }
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
        if job.done.fetch_add(1, AcqRel) + 1 == job.chunks && !is_caller {
            job.caller.unpark();
        }
    }
}

impl Job<'_> {
    fn fail(&self, i: usize, error: Option<Error>, panic: Option<Panic>) {
        let mut f = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
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

/// A worker's life: wait for an epoch, join its job, repeat.
fn worker(sleeping: &'static AtomicBool) {
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

/// Waits for an epoch other than `seen`: spinning for [`SPIN_MICROS`], then parked.
fn wait(seen: usize, sleeping: &AtomicBool) -> usize {
    let spin = Duration::from_micros(SPIN_MICROS);
    let mut since = Instant::now();
    let mut n = 0u32;
    loop {
        let e = SHARED.epoch.load(SeqCst);
        if e != seen {
            return e;
        }
        n = n.wrapping_add(1);
        if !n.is_multiple_of(256) || since.elapsed() < spin {
            spin_loop();
            continue;
        }
        sleeping.store(true, SeqCst);
        while SHARED.epoch.load(SeqCst) == seen {
            thread::park();
        }
        sleeping.store(false, SeqCst);
        since = Instant::now();
    }
}
