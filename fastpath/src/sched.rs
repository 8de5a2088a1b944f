//! Per-lambda queues and the workers' pick: deficit round-robin (weighted fair queueing
//! between lambdas, quantum = weight, cost 1 per request or per slice of a sliced call) or one
//! shared FIFO. A suspended call goes back to the front of its lambda's queue, so a lambda's
//! calls still finish in the order they started. A lambda that becomes active goes before a
//! lone lambda whose turn is used up (it would have gone to the back had anyone been behind it),
//! so a light request waits at most one quantum behind a heavy lambda, not two.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::lambda::Lambda;
use crate::shm::Shm;
use crate::wire::{IdHash, LambdaId};

/// Where a reply goes.
pub enum ReplyTo {
    Udp(SocketAddr),
    /// A TCP connection's writer thread (it puts replies back in request order by `seq`);
    /// `req_len` request bytes stay counted against the connection until the reply is written.
    Tcp {
        conn: Arc<crate::server::TcpConn>,
        seq: u64,
        req_len: usize,
    },
    /// A Unix datagram client; the input and the reply live in `shm`.
    Unix {
        path: std::path::PathBuf,
        shm: Shm,
    },
}

pub enum JobKind {
    Request(Vec<u8>),
    /// Input is the shared memory of `ReplyTo::Unix`.
    ShmRequest,
    /// An external call's reply, for `nf_resume`.
    Resume(Vec<u8>),
    /// A sliced call suspended at a slice's end (src/slice.rs), to run its next slice.
    Slice(crate::slice::Running<crate::lambda::WasmInst>),
}

pub struct Job {
    pub lambda: Arc<Lambda>,
    pub kind: JobKind,
    pub reply: ReplyTo,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Drr,
    Fifo,
}

#[derive(Default)]
struct LQueue {
    q: VecDeque<Job>,
    /// Jobs of this lambda waiting (in `q` for DRR, in the shared FIFO otherwise).
    len: usize,
    deficit: i64,
    active: bool,
}

struct Inner {
    queues: HashMap<LambdaId, LQueue, IdHash>,
    active: VecDeque<LambdaId>,
    /// The lambda alone in `active` that has used up its turn: a lambda that becomes active
    /// goes before it (it would have gone to the back had anyone been behind it), so a light
    /// request waits at most one quantum (one slice of a sliced call), not two.
    spent: Option<LambdaId>,
    fifo: VecDeque<Job>,
    waiting: usize,
    shutdown: bool,
}

pub struct Sched {
    inner: Mutex<Inner>,
    cv: Condvar,
    pub mode: Mode,
    depth: usize,
    /// Jobs queued now, read without the lock by the sliced calls' epoch callbacks.
    pub waiting: Arc<AtomicUsize>,
}

pub enum Pop {
    Job(Job),
    Idle,
    Shutdown,
}

impl Sched {
    pub fn new(mode: Mode, depth: usize) -> Sched {
        Sched {
            inner: Mutex::new(Inner {
                queues: HashMap::default(),
                active: VecDeque::new(),
                spent: None,
                fifo: VecDeque::new(),
                waiting: 0,
                shutdown: false,
            }),
            cv: Condvar::new(),
            mode,
            depth: depth.max(1),
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Enqueue; `Err(job)` when the lambda's queue is full (unless `bypass`, for continuations
    /// of external calls, which must never be dropped).
    pub fn push(&self, job: Job, bypass: bool) -> Result<(), Job> {
        self.enqueue(job, bypass, false)
    }

    /// Queue a suspended sliced call at the front of its lambda's queue (never dropped).
    pub fn push_slice(&self, job: Job) {
        let _ = self.enqueue(job, true, true);
    }

    fn enqueue(&self, job: Job, bypass: bool, front: bool) -> Result<(), Job> {
        let id = job.lambda.id;
        let mut g = self.inner.lock().unwrap();
        let inner = &mut *g;
        let lq = inner.queues.entry(id).or_default();
        if lq.len >= self.depth && !bypass {
            return Err(job);
        }
        lq.len += 1;
        self.waiting.fetch_add(1, Ordering::Relaxed);
        match (self.mode, front) {
            (Mode::Fifo, false) => inner.fifo.push_back(job),
            (Mode::Fifo, true) => inner.fifo.push_front(job),
            (Mode::Drr, _) => {
                if front {
                    lq.q.push_front(job);
                } else {
                    lq.q.push_back(job);
                }
                if !lq.active {
                    lq.active = true;
                    lq.deficit = 0;
                    inner.active.push_back(id);
                    if inner.spent.take().is_some() {
                        inner.active.rotate_left(1);
                    }
                }
            }
        }
        let wake = inner.waiting > 0;
        drop(g);
        if wake {
            self.cv.notify_one();
        }
        Ok(())
    }

    fn take(&self, inner: &mut Inner) -> Option<Job> {
        let job = self.pick(inner)?;
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        Some(job)
    }

    fn pick(&self, inner: &mut Inner) -> Option<Job> {
        match self.mode {
            Mode::Fifo => {
                let job = inner.fifo.pop_front()?;
                if let Some(lq) = inner.queues.get_mut(&job.lambda.id) {
                    lq.len -= 1;
                }
                Some(job)
            }
            Mode::Drr => loop {
                let id = *inner.active.front()?;
                let lq = inner.queues.get_mut(&id).expect("active queue exists");
                let Some(job) = lq.q.pop_front() else {
                    lq.active = false;
                    lq.deficit = 0;
                    inner.active.pop_front();
                    inner.spent = None;
                    continue;
                };
                if lq.deficit < 1 {
                    // A new turn: the quantum is the lambda's weight (cost 1 per request).
                    lq.deficit += job.lambda.weight.max(1) as i64;
                }
                lq.deficit -= 1;
                lq.len -= 1;
                inner.spent = None;
                if lq.q.is_empty() {
                    lq.active = false;
                    lq.deficit = 0;
                    inner.active.pop_front();
                } else if lq.deficit < 1 {
                    if inner.active.len() == 1 {
                        inner.spent = Some(id);
                    }
                    inner.active.rotate_left(1);
                }
                return Some(job);
            },
        }
    }

    /// Next job for a worker; waits up to `idle` for one.
    pub fn pop(&self, idle: Duration) -> Pop {
        let mut g = self.inner.lock().unwrap();
        loop {
            if g.shutdown {
                return Pop::Shutdown;
            }
            if let Some(j) = self.take(&mut g) {
                return Pop::Job(j);
            }
            g.waiting += 1;
            let (ng, to) = self.cv.wait_timeout(g, idle).unwrap();
            g = ng;
            g.waiting -= 1;
            if to.timed_out() {
                if let Some(j) = self.take(&mut g) {
                    return Pop::Job(j);
                }
                return Pop::Idle;
            }
        }
    }

    /// A job waiting now, without waiting for one (a polling worker's check).
    pub fn try_pop(&self) -> Option<Job> {
        let mut g = self.inner.lock().unwrap();
        if g.shutdown {
            return None;
        }
        self.take(&mut g)
    }

    pub fn is_shut_down(&self) -> bool {
        self.inner.lock().unwrap().shutdown
    }

    pub fn queue_len(&self, id: LambdaId) -> usize {
        self.inner
            .lock()
            .unwrap()
            .queues
            .get(&id)
            .map_or(0, |q| q.len)
    }

    pub fn shutdown(&self) {
        self.inner.lock().unwrap().shutdown = true;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lambda::{Code, LambdaStats, NativeKind};

    fn lambda(id: LambdaId, weight: u32) -> Arc<Lambda> {
        Arc::new(Lambda {
            id,
            name: format!("l{id}"),
            version: 1,
            weight,
            timeout_ms: 50,
            fuel: None,
            external: None,
            code: Code::Native(NativeKind::Web),
            uid: id,
            retired: Default::default(),
            stats: Arc::new(LambdaStats::default()),
            group: format!("l{id}").into(),
        })
    }

    fn job(l: &Arc<Lambda>, tag: u8) -> Job {
        Job {
            lambda: l.clone(),
            kind: JobKind::Request(vec![tag]),
            reply: ReplyTo::Udp("127.0.0.1:9".parse().unwrap()),
        }
    }

    fn tag(j: &Job) -> (LambdaId, u8) {
        match &j.kind {
            JobKind::Request(v) => (j.lambda.id, v[0]),
            _ => (j.lambda.id, 0),
        }
    }

    /// A suspended call's next slice goes to the front of its lambda's queue (its calls finish
    /// in the order they started) and costs a turn: the other lambda runs in between.
    #[test]
    fn a_slice_goes_back_to_the_front_of_its_queue_and_costs_a_turn() {
        let s = Sched::new(Mode::Drr, 16);
        let (heavy, light) = (lambda(1, 1), lambda(2, 1));
        assert!(s.push(job(&heavy, 1), false).is_ok());
        assert!(s.push(job(&heavy, 2), false).is_ok());
        assert!(s.push(job(&light, 1), false).is_ok());
        assert_eq!(s.waiting.load(Ordering::Relaxed), 3);
        let first = s.try_pop().unwrap();
        assert_eq!(tag(&first), (1, 1));
        s.push_slice(first); // heavy call 1 yields after a slice
        let order: Vec<_> = std::iter::from_fn(|| s.try_pop())
            .map(|j| tag(&j))
            .collect();
        assert_eq!(order, vec![(2, 1), (1, 1), (1, 2)]);
        assert_eq!(s.waiting.load(Ordering::Relaxed), 0);
    }

    /// A lambda alone that used up its turn yields the next turn to one that arrives: the
    /// light request waits one quantum, as it would had it been queued before the turn ended.
    #[test]
    fn a_newcomer_goes_before_a_lambda_that_used_up_its_turn() {
        let s = Sched::new(Mode::Drr, 16);
        let (heavy, light) = (lambda(1, 1), lambda(2, 1));
        assert!(s.push(job(&heavy, 1), false).is_ok());
        assert!(s.push(job(&heavy, 2), false).is_ok());
        let first = s.try_pop().unwrap(); // heavy's turn is used up; it is alone
        s.push_slice(first);
        assert!(s.push(job(&light, 1), false).is_ok());
        let order: Vec<_> = std::iter::from_fn(|| s.try_pop())
            .map(|j| tag(&j))
            .collect();
        assert_eq!(order, vec![(2, 1), (1, 1), (1, 2)]);
        // Weighted shares between backlogged lambdas are unchanged (1:3).
        let (a, b) = (lambda(3, 1), lambda(4, 3));
        for i in 0..8 {
            assert!(s.push(job(&a, i), false).is_ok());
            assert!(s.push(job(&b, i), false).is_ok());
        }
        let ids: Vec<LambdaId> = (0..8).map(|_| s.try_pop().unwrap().lambda.id).collect();
        assert_eq!(ids, vec![3, 4, 4, 4, 3, 4, 4, 4]);
    }

    /// A slice is never refused, even past the queue depth (dropping it would lose the call).
    #[test]
    fn a_slice_is_queued_past_the_depth() {
        let s = Sched::new(Mode::Fifo, 1);
        let l = lambda(1, 1);
        assert!(s.push(job(&l, 1), false).is_ok());
        assert!(s.push(job(&l, 2), false).is_err());
        s.push_slice(job(&l, 3));
        let order: Vec<_> = std::iter::from_fn(|| s.try_pop())
            .map(|j| tag(&j))
            .collect();
        assert_eq!(order, vec![(1, 3), (1, 1)]);
    }
}
