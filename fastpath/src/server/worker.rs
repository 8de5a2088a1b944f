//! The workers: each takes the next job (src/poll.rs decides how it waits), runs the lambda and
//! answers, or (a sliced call, src/slice.rs) queues the call's continuation after a slice.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::InstancePre;

use super::*;
use crate::lambda::{self, inc, Code, Lambda, Outcome, Sliced, WasmInst, HDR};
use crate::quota;
use crate::sched::{Job, JobKind, Pop, ReplyTo};

struct Cached {
    lambda: Arc<Lambda>,
    inst: WasmInst,
    /// When this worker last used it (`tick`): a full cache evicts the least recently used.
    used: u64,
}

thread_local! {
    static TICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// This worker's use counter (one thread's cache, so no atomic on the call path).
#[inline]
fn tick() -> u64 {
    TICKS.with(|t| {
        let n = t.get() + 1;
        t.set(n);
        n
    })
}

pub fn worker_loop(srv: Arc<Server>, idx: usize, pin: bool) {
    if pin {
        if let Some(cores) = core_affinity::get_core_ids() {
            if !cores.is_empty() {
                core_affinity::set_for_current(cores[idx % cores.len()]);
            }
        }
    }
    let mut cache: HashMap<u64, Cached> = HashMap::new();
    let mut seen_gen = srv.retire_gen.load(Ordering::Acquire);
    let mut out: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut dbuf = vec![0u8; 65536];
    let mut scratch = Vec::with_capacity(256);
    let mut poller = crate::poll::Poller::new(srv.poll);
    loop {
        let gen = srv.retire_gen.load(Ordering::Acquire);
        if gen != seen_gen {
            seen_gen = gen;
            cache.retain(|_, c| !c.lambda.retired.load(Ordering::Acquire));
        }
        match next_job(&srv, &mut poller, &mut dbuf, &mut scratch) {
            Pop::Shutdown => return,
            Pop::Idle => continue,
            Pop::Job(job) => {
                // A bug in one call must not take the worker down: drop its instances and go on.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    process(&srv, &mut cache, job, &mut out)
                }));
                if r.is_err() {
                    cache.clear();
                }
            }
        }
    }
}

/// The worker's next job: one waiting, else one the socket holds, else (src/poll.rs) spin on
/// both for the poller's budget, else block on the queue (the receiver thread wakes it).
fn next_job(
    srv: &Server,
    poller: &mut crate::poll::Poller,
    dbuf: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Pop {
    srv.drain_udp(dbuf, scratch, DRAIN_MAX);
    if let Some(job) = srv.sched.try_pop() {
        poller.arrived(Instant::now(), Duration::ZERO, true);
        return Pop::Job(job);
    }
    poller.idle(Instant::now());
    let (found, spun) = crate::poll::spin_for(poller.budget(), || {
        if srv.sched.is_shut_down() {
            return Some(Pop::Shutdown);
        }
        srv.drain_udp(dbuf, scratch, DRAIN_MAX);
        srv.sched.try_pop().map(Pop::Job)
    });
    let p = &srv.polled;
    p.spun_ns
        .fetch_add(spun.as_nanos() as u64, Ordering::Relaxed);
    match found {
        Some(Pop::Job(job)) => {
            p.caught.fetch_add(1, Ordering::Relaxed);
            poller.arrived(Instant::now(), spun, true);
            Pop::Job(job)
        }
        Some(other) => other,
        None => {
            poller.gave_up(spun);
            let popped = srv.sched.pop(Duration::from_millis(100));
            if matches!(popped, Pop::Job(_)) {
                p.blocked.fetch_add(1, Ordering::Relaxed);
                poller.arrived(Instant::now(), Duration::ZERO, false);
            }
            popped
        }
    }
}

/// One call as the worker runs it: the job's parts, borrowed, and the input they give.
struct Call<'a> {
    lambda: &'a Arc<Lambda>,
    kind: &'a JobKind,
    reply: &'a ReplyTo,
    input: &'a [u8],
    /// The call resumes after an external request (its input is the external reply).
    resume: bool,
}

fn process(srv: &Server, cache: &mut HashMap<u64, Cached>, job: Job, out: &mut Vec<u8>) {
    let Job {
        lambda: l,
        kind,
        reply,
    } = job;
    out.clear();
    out.resize(HDR, 0);
    if let JobKind::Slice(running) = kind {
        return next_slice(srv, cache, l, running, reply, out);
    }
    let (input, resume) = job_input(&kind, &reply);
    let call = Call {
        lambda: &l,
        kind: &kind,
        reply: &reply,
        input,
        resume,
    };
    // A panic while running this call must still answer it: a TCP connection's writer sends
    // replies in request order, so one lost reply would hold back every later one forever.
    let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_call(srv, cache, call, out)
    }));
    conclude(srv, cache, l, reply, computed, out);
}

/// Answer a call (or its latest slice) by what it gave: its outcome; nothing when answered
/// already; its next slice queued at the front of its lambda's queue; a TRAP after a panic.
fn conclude(
    srv: &Server,
    cache: &mut HashMap<u64, Cached>,
    l: Arc<Lambda>,
    reply: ReplyTo,
    computed: std::thread::Result<Ran>,
    out: &mut Vec<u8>,
) {
    let outcome = match computed {
        Ok(Ran::Outcome(o)) => o,
        Ok(Ran::Answered) => return, // in place on shared memory, or cannot instantiate
        Ok(Ran::Suspended(running)) => {
            srv.sched.push_slice(Job {
                lambda: l,
                kind: JobKind::Slice(running),
                reply,
            });
            return;
        }
        Err(_) => {
            cache.clear();
            Outcome::Trap("the executor panicked in this call; its instances were dropped".into())
        }
    };
    reply_outcome(srv, l, reply, outcome, out);
}

/// The job's input (a memfd request reads it from the shared memory) and whether it resumes.
#[inline]
fn job_input<'a>(kind: &'a JobKind, reply: &'a ReplyTo) -> (&'a [u8], bool) {
    match kind {
        JobKind::Request(v) => (v, false),
        JobKind::Resume(v) => (v, true),
        JobKind::Slice(_) => (&[], false), // taken by `next_slice` before this
        JobKind::ShmRequest => match reply {
            ReplyTo::Unix { shm, .. } => (shm.input(), false),
            _ => (&[], false),
        },
    }
}

/// What running a call (or one slice of it) gave.
enum Ran {
    Outcome(Outcome),
    /// The call was answered already.
    Answered,
    /// A sliced call yielded; it continues in a later job.
    Suspended(crate::slice::Running<WasmInst>),
}

/// Run the call's lambda to its outcome (or, sliced, to its first yield).
#[inline]
fn run_call(srv: &Server, cache: &mut HashMap<u64, Cached>, call: Call, out: &mut Vec<u8>) -> Ran {
    match &call.lambda.code {
        Code::Native(k) => run_native_call(srv, *k, &call, out).map_or(Ran::Answered, Ran::Outcome),
        Code::Wasm {
            module,
            entry,
            sliced,
            ..
        } => run_wasm_call(
            srv,
            cache,
            (&module.pre, entry.as_deref()),
            *sliced,
            &call,
            out,
        ),
    }
}

/// Run a suspended call's next slice; answer it if it finished, else queue it again.
fn next_slice(
    srv: &Server,
    cache: &mut HashMap<u64, Cached>,
    l: Arc<Lambda>,
    running: crate::slice::Running<WasmInst>,
    reply: ReplyTo,
    out: &mut Vec<u8>,
) {
    let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        settle(cache, &l, Sliced::resume(running, out))
    }));
    conclude(srv, cache, l, reply, computed, out);
}

/// A finished sliced call's instance goes back to the cache (unless the call trapped or timed
/// out, the version was retired, or this worker made another instance meanwhile).
fn settle(cache: &mut HashMap<u64, Cached>, l: &Arc<Lambda>, s: Sliced) -> Ran {
    match s {
        Sliced::Suspended(r) => Ran::Suspended(r),
        Sliced::Done(inst, o) => {
            let keep = !matches!(o, Outcome::Trap(_) | Outcome::Timeout)
                && !l.retired.load(Ordering::Relaxed);
            if keep {
                cache.entry(l.uid).or_insert(Cached {
                    lambda: l.clone(),
                    inst,
                    used: tick(),
                });
            }
            Ran::Outcome(o)
        }
    }
}

#[inline]
fn run_native_call(
    srv: &Server,
    k: lambda::NativeKind,
    call: &Call,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    if !call.resume && call.input.len() > k.buffer_size() {
        Some(Outcome::TooLarge)
    } else if let (lambda::NativeKind::Gray, JobKind::ShmRequest, ReplyTo::Unix { shm, path }) =
        (k, call.kind, call.reply)
    {
        // Native in place on the shared memory.
        let l = call.lambda;
        let in_len = shm.in_len;
        match lambda::gray_in_place(&mut shm.mapping_mut()[..in_len]) {
            Some(n) => {
                inc(&l.stats.ok);
                srv.unix_answer(path, l.id, OK, n);
            }
            None => {
                inc(&l.stats.bad_request);
                srv.unix_answer(path, l.id, BAD_REQUEST, 0);
            }
        }
        None
    } else {
        Some(lambda::run_native(k, call.input, call.resume, out))
    }
}

/// Run a wasm call on this worker's instance of the lambda (made on its first call).
#[inline]
fn run_wasm_call(
    srv: &Server,
    cache: &mut HashMap<u64, Cached>,
    (pre, entry): (&InstancePre<()>, Option<&str>),
    sliced: bool,
    call: &Call,
    out: &mut Vec<u8>,
) -> Ran {
    let l = call.lambda;
    let slicer = if sliced { srv.slicer.as_ref() } else { None };
    let make = |cache: &mut HashMap<u64, Cached>, out: &mut Vec<u8>| {
        new_instance(cache, l, || WasmInst::new(pre, slicer, entry)).map_err(|e| {
            // No slot even after evicting an idle instance: the executor is full, not the lambda broken.
            let (status, counter) = if e.starts_with("instantiate:") {
                (OVERLOADED, &l.stats.overloaded)
            } else {
                (TRAP, &l.stats.traps)
            };
            inc(counter);
            let msg = format!("cannot instantiate lambda: {e}");
            srv.reply_simple(call.reply, l.id, status, msg.as_bytes(), out);
            Ran::Answered
        })
    };
    if sliced {
        // The instance travels with the call while it is suspended (`settle` puts it back).
        let inst = match cache.remove(&l.uid) {
            Some(c) => c.inst,
            None => match make(cache, out) {
                Ok(inst) => inst,
                Err(ran) => return ran,
            },
        };
        return settle(
            cache,
            l,
            inst.call_sliced(call.input, call.resume, l.timeout_ms, out),
        );
    }
    if !cache.contains_key(&l.uid) {
        match make(cache, out) {
            Ok(inst) => {
                cache.insert(
                    l.uid,
                    Cached {
                        lambda: l.clone(),
                        inst,
                        used: 0,
                    },
                );
            }
            Err(ran) => return ran,
        }
    }
    let c = cache.get_mut(&l.uid).expect("inserted above");
    c.used = tick();
    let o = c
        .inst
        .call(call.input, call.resume, l.timeout_ms, l.fuel, out);
    if matches!(o, Outcome::Trap(_) | Outcome::Timeout) || l.retired.load(Ordering::Relaxed) {
        // After a trap or timeout the instance is rebuilt on its next call; a swapped-out
        // version's instance (still draining its queued calls) is not kept.
        cache.remove(&l.uid);
    }
    Ran::Outcome(o)
}

/// A new instance from `make`. A worker keeps at most `lambda::pool().cache_per_worker` idle
/// instances (its share of its pools' slots, less the reserve, src/lambda.rs `Pool`): at that
/// many one idle instance of another lambda is dropped first (its global state goes, as after
/// a restart of that lambda). When the pool still has no free slot (other workers' instances,
/// suspended calls), one more is dropped and `make` is tried once more; then the call answers
/// OVERLOADED. Without it one tenant's stack of lambdas, each called once, held every slot and
/// every other lambda that needed an instance answered TRAP until they were removed, and the
/// executor's memory grew with every lambda (red team round 5, issue 39, and N2).
///
/// Before any of that the instance needs a ticket of its lambda's group (src/quota.rs: a group
/// holds at most half a pool's slots, suspended calls and stream requests included); a group at
/// its share first gives up one of its own idle instances here, else the call is OVERLOADED and
/// the other groups' instances stay (red team round 6, R3: 530 suspended spinners held every
/// slot and evicted every other tenant's instances).
fn new_instance(
    cache: &mut HashMap<u64, Cached>,
    l: &Lambda,
    make: impl Fn() -> Result<WasmInst, String>,
) -> Result<WasmInst, String> {
    let uid = l.uid;
    let ticket = match quota::acquire(&l.group) {
        Ok(t) => t,
        Err(e) => {
            if !evict_one(cache, uid, Some(&l.group)) {
                return Err(e);
            }
            quota::acquire(&l.group)?
        }
    };
    if cache.len() >= lambda::pool().cache_per_worker {
        evict_one(cache, uid, None);
    }
    let mut inst = match make() {
        Err(e) if e.starts_with("instantiate:") => {
            if evict_one(cache, uid, None) {
                make()?
            } else {
                return Err(e);
            }
        }
        r => r?,
    };
    inst.ticket = Some(ticket);
    Ok(inst)
}

/// Drop the least recently used cached instance of a lambda other than `uid` (of `group`'s
/// lambdas only, when given); whether there was one. (A scan of at most `cache_per_worker`
/// entries, only when one must go.)
fn evict_one(cache: &mut HashMap<u64, Cached>, uid: u64, group: Option<&Arc<str>>) -> bool {
    let victim = cache
        .iter()
        .filter(|(k, c)| **k != uid && group.is_none_or(|g| c.lambda.group == *g))
        .min_by_key(|(_, c)| c.used)
        .map(|(k, _)| *k);
    match victim {
        Some(k) => {
            cache.remove(&k);
            true
        }
        None => false,
    }
}

/// Count the outcome against the lambda and answer the call (or hand it to an external call).
#[inline]
fn reply_outcome(
    srv: &Server,
    l: Arc<Lambda>,
    reply: ReplyTo,
    outcome: Outcome,
    out: &mut Vec<u8>,
) {
    let id = l.id;
    let st = &l.stats;
    match outcome {
        Outcome::Reply => {
            inc(&st.ok);
            srv.reply_out(&reply, id, OK, out);
        }
        Outcome::External(bytes) => match l.external {
            Some(addr) => srv.ext.submit(
                srv,
                addr,
                bytes,
                Cont {
                    lambda: l,
                    reply,
                    t: Instant::now(),
                },
                out,
            ),
            None => {
                inc(&st.external_errors);
                srv.reply_simple(
                    &reply,
                    id,
                    EXTERNAL_ERROR,
                    b"lambda asked for an external call but has no `external` address",
                    out,
                );
            }
        },
        Outcome::BadRequest => {
            inc(&st.bad_request);
            srv.reply_simple(&reply, id, BAD_REQUEST, b"", out);
        }
        Outcome::Trap(msg) => {
            inc(&st.traps);
            srv.reply_simple(&reply, id, TRAP, msg.as_bytes(), out);
        }
        Outcome::Timeout => {
            inc(&st.timeouts);
            srv.reply_simple(&reply, id, TIMEOUT, b"", out);
        }
        Outcome::TooLarge => {
            inc(&st.too_large);
            srv.reply_simple(&reply, id, TOO_LARGE, b"", out);
        }
        Outcome::ExternalError(msg) => {
            inc(&st.external_errors);
            srv.reply_simple(&reply, id, EXTERNAL_ERROR, msg.as_bytes(), out);
        }
    }
}
