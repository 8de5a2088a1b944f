//! Preemptive slices: a wasm lambda's call runs in slices of `--slice-us` so that a light
//! lambda waits at most about one slice behind a heavy call, not the heavy call's whole length.
//!
//! Mechanism. Lambdas are compiled on their own engine (`Slicer::engine`), whose epoch the
//! `epoch` thread advances once per slice while any sliced call is in flight (and not at all
//! otherwise, so an idle executor pays nothing). Each instance's store has an epoch-deadline
//! callback that runs at every tick: once the call has run (not waited) its timeout it traps;
//! else, if the scheduler holds waiting jobs and the executor preempts (`--sched drr`), it
//! yields; else the call continues for another slice. A call is run with `call_async` and
//! polled by the worker itself (no async runtime: a no-op waker, since nothing else ever wakes
//! it); a yield makes the poll return `Pending`, and the worker puts the suspended call (the
//! future owns its instance and the fiber stack it runs on) back at the front of its lambda's
//! queue. Deficit round-robin then charges the lambda one unit per slice, not per call.
//!
//! Worked example (`--workers 1 --sched drr --slice-us 50`): a heavy call needing 400 µs is
//! running when a light request arrives. At the next tick (≤ 50 µs, plus the ticker's wake-up
//! lateness) the callback sees a waiting job and yields; the worker queues the heavy
//! continuation, DRR picks the light lambda (its turn), answers it in ~5 µs, then resumes the
//! heavy call exactly where it stopped. Without slicing the light request waits up to 400 µs.
//!
//! Known caveats:
//! * A slice is wall-clock time measured by a sleeping thread: on a loaded machine the ticker
//!   wakes late, so slices stretch (they never shrink). `PR_SET_TIMERSLACK` is set to 1 µs on
//!   the ticker to keep the kernel from batching its wake-ups.
//! * Only wasm lambdas without a `fuel` budget are sliced (fuel lambdas use the fuel-counting
//!   engine and run to completion); native lambdas are ours, short, and run to completion.
//! * While a call is suspended its instance is out of the worker's cache, so a second call of
//!   the same lambda on that worker makes another instance (from the pooling allocator);
//!   global state of the lambda then lives in two instances, as with several workers.
//! * `--sched fifo` never yields: FIFO means calls in arrival order, run to completion.
//! * Each yield costs a fiber switch and a queue round trip (about a microsecond, measured in
//!   benchmarks/fastpath.py); calls shorter than a slice never yield.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use wasmtime::{Engine, Store, UpdateDeadline};

/// The default slice (`--slice-us`).
pub const DEFAULT_SLICE: Duration = Duration::from_micros(50);

/// The executor's slicing: the engine of sliced lambdas and what its callbacks consult.
pub struct Slicer {
    pub engine: Engine,
    pub slice: Duration,
    /// Yield when jobs wait (DRR); never yield (FIFO: run to completion).
    pub preempt: bool,
    /// Sliced calls started and not finished (running or suspended); the ticker ticks the
    /// engine only while this is above zero.
    pub in_flight: AtomicUsize,
    /// Jobs waiting in the scheduler (`Sched::waiting`).
    pub waiting: Arc<AtomicUsize>,
    /// Yields so far, for `stats`.
    pub yields: AtomicU64,
    /// Process start, the origin of the calls' deadlines in nanoseconds.
    origin: Instant,
}

impl Slicer {
    pub fn new(
        slice: Duration,
        preempt: bool,
        waiting: Arc<AtomicUsize>,
    ) -> wasmtime::Result<Slicer> {
        Ok(Slicer {
            engine: crate::lambda::make_engine(false)?,
            slice,
            preempt,
            in_flight: AtomicUsize::new(0),
            waiting,
            yields: AtomicU64::new(0),
            origin: Instant::now(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

/// One sliced store's view of its current call, shared with its epoch callback. The timeout
/// bounds the call's run time: time spent suspended behind other lambdas does not count, so
/// slicing never makes a call time out that would have finished running to completion.
pub struct CallClock {
    /// When the call last started running (nanoseconds since `Slicer::origin`).
    ran_from_ns: AtomicU64,
    /// Run time left when it did.
    budget_ns: AtomicU64,
    /// Set only while the call runs under `call_async` (a sync call cannot yield).
    may_yield: AtomicBool,
}

impl CallClock {
    /// Arm the clock for a call of at most `timeout_ms` of run time; only a call run by
    /// `call_async` may yield (instantiation and the ABI getters run synchronously).
    pub fn arm(&self, slicer: &Slicer, timeout_ms: u64, may_yield: bool) {
        self.budget_ns
            .store(timeout_ms.saturating_mul(1_000_000), Ordering::Relaxed);
        self.ran_from_ns.store(slicer.now_ns(), Ordering::Relaxed);
        self.may_yield.store(may_yield, Ordering::Relaxed);
    }

    /// The call runs again after a suspension.
    fn resumed(&self, slicer: &Slicer) {
        self.ran_from_ns.store(slicer.now_ns(), Ordering::Relaxed);
    }

    /// At a tick: trap past the budget, yield when others wait (charging the slice's run time
    /// to the budget), else go on.
    fn tick(&self, s: &Slicer) -> UpdateDeadline {
        let ran = s
            .now_ns()
            .saturating_sub(self.ran_from_ns.load(Ordering::Relaxed));
        let budget = self.budget_ns.load(Ordering::Relaxed);
        if ran >= budget {
            return UpdateDeadline::Interrupt;
        }
        if s.preempt
            && self.may_yield.load(Ordering::Relaxed)
            && s.waiting.load(Ordering::Relaxed) > 0
        {
            self.budget_ns.store(budget - ran, Ordering::Relaxed);
            s.yields.fetch_add(1, Ordering::Relaxed);
            return UpdateDeadline::Yield(1);
        }
        UpdateDeadline::Continue(1)
    }
}

/// Give `store` the slicing callback; returns the clock each call arms.
pub fn install(store: &mut Store<()>, slicer: &Arc<Slicer>) -> Arc<CallClock> {
    let clock = Arc::new(CallClock {
        ran_from_ns: AtomicU64::new(0),
        budget_ns: AtomicU64::new(u64::MAX),
        may_yield: AtomicBool::new(false),
    });
    let (c, s) = (clock.clone(), slicer.clone());
    store.epoch_deadline_callback(move |_ctx| Ok(c.tick(&s)));
    store.set_epoch_deadline(1);
    clock
}

/// Counts one sliced call (or instantiation) in flight for as long as it lives: the ticker
/// ticks the sliced engine only while there is one.
pub struct InFlight(Arc<Slicer>);

impl InFlight {
    pub fn new(slicer: &Arc<Slicer>) -> InFlight {
        slicer.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(slicer.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

type CallFuture<I> = Pin<Box<dyn Future<Output = (I, wasmtime::Result<i32>)> + Send>>;

/// A sliced call in flight: the future owns the instance (its store and fiber stack) and
/// gives it back with the call's result.
pub struct Running<I> {
    fut: CallFuture<I>,
    clock: Arc<CallClock>,
    in_flight: InFlight,
}

/// What running a sliced call's next slice gave.
pub enum Step<I> {
    Done(I, wasmtime::Result<i32>),
    Suspended(Running<I>),
}

impl<I> Running<I> {
    /// Start a call (`fut` is its `call_async`) and run it to its first yield or its end.
    pub fn start(slicer: &Arc<Slicer>, clock: Arc<CallClock>, fut: CallFuture<I>) -> Step<I> {
        Running {
            fut,
            clock,
            in_flight: InFlight::new(slicer),
        }
        .run()
    }

    /// Run the call's next slice.
    pub fn resume(self) -> Step<I> {
        self.clock.resumed(&self.in_flight.0);
        self.run()
    }

    /// Poll the call (a no-op waker: nothing but a worker ever resumes it).
    fn run(mut self) -> Step<I> {
        let mut cx = Context::from_waker(Waker::noop());
        match self.fut.as_mut().poll(&mut cx) {
            Poll::Ready((inst, r)) => Step::Done(inst, r),
            Poll::Pending => Step::Suspended(self),
        }
    }
}
