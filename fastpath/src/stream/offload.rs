//! WebAssembly stream stages run off the event loop, one at a time per group, groups taking turns.
//!
//! The stream loop (`serve`) runs native stages inline: they are our code, O(K) per element and
//! cut into turns of bounded work. A `wasm` stage is the deployer's code: one call may spin until
//! the request's budget (`timeout_ms`, up to `fastpath.max_timeout_ms`) runs out. Run inline, a
//! few such requests held every other stream request of every tenant for seconds each (red team,
//! issue 39, N1: 14 anonymous spinner requests made another function's calls take 12–14 s). So
//! the loop only does I/O for a wasm connection: it reads a batch of the payload (at most
//! [`BATCH`] bytes), hands the batch and the connection's pipeline to this pool as a [`Job`],
//! stops reading that connection until the [`Done`] comes back (the client's bytes wait in the
//! socket: back-pressure, no buffering), and meanwhile serves everyone else.
//!
//! **Scheduling.** Each stream function belongs to a *group* (the deploy's `group`; the gateway
//! sends the function's namespace, a bare executor defaults to the function's name). A group runs
//! at most one job at a time, and groups with work waiting take turns (round robin, one job
//! each), on [`threads`] worker threads. So whatever one group's callers send, the other groups
//! wait for at most one job per group ahead of them, and with more threads than busy groups not
//! at all. Worked example, 2 threads: tenant-b's spinner function has 14 requests queued, each
//! job running to its 1 s budget; tenant-a's request arrives: tenant-b holds one thread, the
//! other is free, tenant-a's job starts at once. A third group would wait for the next free
//! thread, at most one job (≤ 1 s) behind.
//!
//! **Instantiation** (`_initialize`, `nf_stream_init`) is module code too, so it is the first
//! job of a request, not work of the loop.
//!
//! Known caveats:
//! * Within a group requests queue behind each other: a group's own slow function delays the
//!   group's other functions (a namespace is one trust domain: its deployer owns all of them).
//!   A request queued longer than the stream idle time (`--stream-idle-ms`) is answered TIMEOUT.
//! * A job whose connection closed before it started is skipped ([`Job::cancel`]); one already
//!   running finishes its call (at most the request's budget) and its result is dropped.
//! * The threads compete for the CPU with the lambdas' workers: a group's share is one thread.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use super::spec::{Pipeline, Refusal};
use super::StreamFn;

/// Payload bytes handed to one job at most (the loop reads no more of that connection until the
/// job is done).
pub const BATCH: usize = 64 << 10;

/// Worker threads: the machine's cores, at least 2 (so one busy group never stalls the rest),
/// at most 4.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 4)
}

/// One batch of a connection's payload to run through its pipeline.
pub struct Job {
    /// The connection's loop token (slot and generation): the loop drops a result whose
    /// connection has gone since.
    pub tok: usize,
    pub f: Arc<StreamFn>,
    /// `None`: the request's first job, which instantiates the module.
    pub pipe: Option<Pipeline>,
    pub bytes: Vec<u8>,
    /// The payload ended with these bytes: finish and make the reply.
    pub finish: bool,
    /// Set by the loop when the connection closes: a job not yet started is skipped.
    pub cancel: Arc<AtomicBool>,
}

/// A job's outcome, back on the loop.
pub struct Done {
    pub tok: usize,
    pub pipe: Option<Pipeline>,
    /// `Ok(Some(reply))` after the finish, `Ok(None)` to read on, `Err` to refuse the request.
    pub result: Result<Option<Vec<u8>>, Refusal>,
}

#[derive(Default)]
struct Queues {
    waiting: HashMap<Arc<str>, VecDeque<Job>>,
    /// Groups with a job waiting and none running, in turn order.
    turns: VecDeque<Arc<str>>,
    running: HashSet<Arc<str>>,
}

struct Shared {
    q: Mutex<Queues>,
    cv: Condvar,
}

/// The pool, as the loop holds it.
pub struct Offload {
    shared: Arc<Shared>,
    pub done: Receiver<Done>,
}

impl Offload {
    /// Start `threads` workers; `wake` is called after each job (the loop's mio waker).
    pub fn start(threads: usize, wake: Arc<dyn Fn() + Send + Sync>) -> Offload {
        let shared = Arc::new(Shared {
            q: Mutex::new(Queues::default()),
            cv: Condvar::new(),
        });
        let (tx, rx) = channel();
        for i in 0..threads {
            let (shared, tx, wake) = (shared.clone(), tx.clone(), wake.clone());
            std::thread::Builder::new()
                .name(format!("stream-wasm-{i}"))
                .spawn(move || work(&shared, &tx, &*wake))
                .expect("spawn a stream wasm thread");
        }
        Offload { shared, done: rx }
    }

    pub fn submit(&self, job: Job) {
        let group = job.f.group.clone();
        let mut q = self.shared.q.lock().unwrap();
        let queue = q.waiting.entry(group.clone()).or_default();
        let first = queue.is_empty();
        queue.push_back(job);
        if first && !q.running.contains(&group) {
            q.turns.push_back(group);
            self.shared.cv.notify_one();
        }
    }
}

fn work(shared: &Shared, tx: &Sender<Done>, wake: &(dyn Fn() + Send + Sync)) {
    loop {
        let (group, job) = {
            let mut q = shared.q.lock().unwrap();
            loop {
                if let Some(g) = q.turns.pop_front() {
                    let job = q.waiting.get_mut(&g).and_then(VecDeque::pop_front);
                    if let Some(job) = job {
                        q.running.insert(g.clone());
                        break (g, job);
                    }
                    q.waiting.remove(&g);
                    continue;
                }
                q = shared.cv.wait(q).unwrap();
            }
        };
        let done = if job.cancel.load(Ordering::Relaxed) {
            None
        } else {
            Some(run(job))
        };
        {
            let mut q = shared.q.lock().unwrap();
            q.running.remove(&group);
            match q.waiting.get(&group) {
                Some(w) if !w.is_empty() => {
                    q.turns.push_back(group); // its next job, after the other groups' turns
                    shared.cv.notify_one();
                }
                _ => {
                    q.waiting.remove(&group);
                }
            }
        }
        if let Some(done) = done {
            if tx.send(done).is_err() {
                return; // the loop is gone
            }
            wake();
        }
    }
}

/// Run one job: instantiate on the first, feed the batch, finish at the end. A panic costs the
/// request (TRAP), never the thread.
fn run(job: Job) -> Done {
    let Job {
        tok,
        f,
        pipe,
        bytes,
        finish,
        ..
    } = job;
    let mut pipe = match pipe.map_or_else(|| f.chain.pipeline_for(&f.group), Ok) {
        Ok(p) => p,
        Err(why) => {
            return Done {
                tok,
                pipe: None,
                result: Err(why),
            }
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut scratch = Vec::with_capacity(bytes.len() / 4 + 1);
        pipe.feed(&bytes, &mut scratch)?;
        if finish {
            pipe.finish(&mut scratch).map(Some)
        } else {
            Ok(None)
        }
    }))
    .unwrap_or_else(|_| Err(Refusal::Trap("the stream stage panicked".into())));
    Done {
        tok,
        pipe: Some(pipe),
        result,
    }
}
