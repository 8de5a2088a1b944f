//! The executor: match table, receivers (UDP, TCP, Unix+memfd), workers, the miss path to the
//! host, and external calls.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use wasmtime::{Engine, InstancePre};

use crate::lambda::{self, inc, Code, Lambda, Outcome, WasmInst, HDR, MAX_ID};
use crate::sched::{Job, JobKind, Mode, Pop, ReplyTo, Sched};
use crate::shm::Shm;

mod external;
mod host;
mod receive;
pub use external::*;
pub use host::*;
pub use receive::*;

// The status codes and datagram limit of the wire format (src/wire.rs), for the submodules.
pub use crate::wire::{
    BAD_REQUEST, EXTERNAL_ERROR, HOST_ERROR, HOST_OK, MAX_DGRAM, OK, OVERLOADED, TIMEOUT,
    TOO_LARGE, TRAP, UNKNOWN,
};

/// Datagrams a worker classifies from the socket before each job (see Server::drain_udp).
const DRAIN_MAX: usize = 256;
/// Host tokens unanswered for this long are expired.
pub const HOST_TIMEOUT: Duration = Duration::from_secs(5);
/// Most host requests waiting for an answer at once.
pub const MAX_HOST_PENDING: usize = 65536;
/// External calls unanswered for this long fail the connection.
pub const EXTERNAL_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Default)]
pub struct GlobalStats {
    pub malformed_short: AtomicU64,
    pub unknown: AtomicU64,
    pub host_forwarded: AtomicU64,
    pub host_errors: AtomicU64,
    pub packets: AtomicU64,
    /// Control connections that failed the challenge-response.
    pub auth_failures: AtomicU64,
    /// TCP and control connections closed at accept (over the connection cap).
    pub conns_refused: AtomicU64,
    /// TCP connections closed for a frame over `--max-frame`, or for not reading their replies
    /// while more than the per-connection buffer of them piled up.
    pub frames_too_large: AtomicU64,
}

/// One TCP connection as a reply sees it: the channel to its writer, and the byte accounting
/// it shares with the writer. The writer holds only `state`, never `tx`, so the channel closes
/// (and the writer ends) once the reader and every job of the connection are done.
pub struct TcpConn {
    pub tx: Sender<(u64, Vec<u8>, usize)>,
    pub state: Arc<TcpState>,
}

/// Bytes one TCP connection holds (requests admitted but not yet answered, replies not yet
/// written), so a client cannot make the executor buffer more than `limit` for it.
pub struct TcpState {
    pub pending: AtomicUsize,
    pub limit: usize,
    /// Set when a reply would pass `limit`: the writer closes the connection at that point.
    pub overflow: AtomicBool,
}

pub struct Config {
    pub workers: usize,
    pub pin: bool,
    pub mode: Mode,
    pub queue_depth: usize,
    pub host: Option<SocketAddr>,
    /// Largest TCP frame (and memfd input) accepted, in bytes.
    pub max_frame: usize,
    /// Most TCP connections open at once.
    pub max_conns: usize,
    /// How workers wait for work (src/poll.rs): spin a while, then block.
    pub poll: crate::poll::Policy,
}

/// What the workers spent polling (src/poll.rs), summed over them.
#[derive(Default)]
pub struct PollStats {
    pub spun_ns: AtomicU64,
    pub caught: AtomicU64,
    pub blocked: AtomicU64,
}

pub struct Server {
    pub engine: Engine,
    /// The fuel-counting engine, made on the first deploy that asks for `fuel`.
    pub fuel_engine: std::sync::OnceLock<Result<Engine, String>>,
    pub table: Vec<RwLock<Option<Arc<Lambda>>>>,
    pub sched: Sched,
    pub udp: UdpSocket,
    pub unix: Option<UnixDatagram>,
    pub host: Option<HostFwd>,
    pub ext: ExtIo,
    pub g: GlobalStats,
    pub retire_gen: AtomicU64,
    pub next_uid: AtomicU64,
    pub deploy_lock: Mutex<()>,
    pub workers: usize,
    pub max_frame: usize,
    pub max_conns: usize,
    /// TCP connections open now (at most `max_conns`).
    pub tcp_conns: AtomicUsize,
    /// Stream functions (`--stream`; src/stream/): their table and listener counters.
    pub streams: crate::stream::Streams,
    pub poll: crate::poll::Policy,
    pub polled: PollStats,
}

fn set_sock_buf(fd: i32, size: i32) {
    unsafe {
        for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &size as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as u32,
            );
        }
    }
}

impl Server {
    pub fn new(
        engine: Engine,
        udp: UdpSocket,
        unix: Option<UnixDatagram>,
        cfg: &Config,
    ) -> std::io::Result<Server> {
        set_sock_buf(udp.as_raw_fd(), 8 << 20);
        let host = match cfg.host {
            Some(addr) => {
                let sock = UdpSocket::bind("127.0.0.1:0")?;
                sock.set_read_timeout(Some(Duration::from_millis(100)))?;
                set_sock_buf(sock.as_raw_fd(), 4 << 20);
                Some(HostFwd::new(sock, addr))
            }
            None => None,
        };
        Ok(Server {
            engine,
            fuel_engine: std::sync::OnceLock::new(),
            table: (0..=MAX_ID).map(|_| RwLock::new(None)).collect(),
            sched: Sched::new(cfg.mode, cfg.queue_depth),
            udp,
            unix,
            host,
            ext: ExtIo::new(),
            g: GlobalStats::default(),
            retire_gen: AtomicU64::new(0),
            next_uid: AtomicU64::new(1),
            deploy_lock: Mutex::new(()),
            workers: cfg.workers,
            max_frame: cfg.max_frame,
            max_conns: cfg.max_conns,
            tcp_conns: AtomicUsize::new(0),
            streams: Default::default(),
            poll: cfg.poll,
            polled: PollStats::default(),
        })
    }

    #[inline]
    pub fn lookup(&self, id: u32) -> Option<Arc<Lambda>> {
        self.table.get(id as usize)?.read().unwrap().clone()
    }

    /// Install `l` at its id (a hot swap when one is there); returns the old version.
    pub fn install(&self, l: Arc<Lambda>) -> Option<Arc<Lambda>> {
        let old = self.table[l.id as usize].write().unwrap().replace(l);
        if let Some(o) = &old {
            o.retired.store(true, Ordering::Release);
            self.retire_gen.fetch_add(1, Ordering::Release);
        }
        old
    }

    pub fn remove(&self, id: u32) -> Option<Arc<Lambda>> {
        let old = self.table.get(id as usize)?.write().unwrap().take();
        if let Some(o) = &old {
            o.retired.store(true, Ordering::Release);
            self.retire_gen.fetch_add(1, Ordering::Release);
        }
        old
    }

    /// Match stage: `dgram` is a whole request (id + payload).
    pub fn dispatch(&self, dgram: &[u8], reply: ReplyTo, scratch: &mut Vec<u8>) {
        let id = u32::from_be_bytes(dgram[..4].try_into().unwrap());
        match self.lookup(id) {
            Some(l) => {
                inc(&l.stats.calls);
                // Larger than the lambda's buffer: answer now rather than queue a copy of the
                // payload that the worker would refuse anyway (this bounds queued bytes).
                if dgram.len() - 4 > l.input_capacity() {
                    inc(&l.stats.too_large);
                    self.reply_simple(&reply, id, TOO_LARGE, b"", scratch);
                    return;
                }
                let job = Job {
                    lambda: l,
                    kind: JobKind::Request(dgram[4..].to_vec()),
                    reply,
                };
                if let Err(job) = self.sched.push(job, false) {
                    inc(&job.lambda.stats.overloaded);
                    self.reply_simple(&job.reply, id, OVERLOADED, b"", scratch);
                }
            }
            None => match &self.host {
                Some(h) => h.forward(self, dgram, reply, scratch),
                None => {
                    inc(&self.g.unknown);
                    self.reply_simple(&reply, id, UNKNOWN, b"", scratch);
                }
            },
        }
    }

    /// Reply with a payload given separately (off the worker hot path).
    pub fn reply_simple(
        &self,
        to: &ReplyTo,
        id: u32,
        status: u8,
        payload: &[u8],
        scratch: &mut Vec<u8>,
    ) {
        scratch.clear();
        scratch.resize(HDR, 0);
        scratch.extend_from_slice(payload);
        self.reply_out(to, id, status, scratch);
    }

    /// Send the reply whose payload is `out[HDR..]` (the first HDR bytes are header room).
    pub fn reply_out(&self, to: &ReplyTo, id: u32, mut status: u8, out: &mut Vec<u8>) {
        match to {
            ReplyTo::Udp(addr) => {
                if out.len() - 4 > MAX_DGRAM {
                    status = TOO_LARGE;
                    out.truncate(HDR);
                }
                out[4..8].copy_from_slice(&id.to_be_bytes());
                out[8] = status;
                let _ = self.udp.send_to(&out[4..], addr);
            }
            ReplyTo::Tcp { conn, seq, req_len } => {
                let len = (out.len() - 4) as u32;
                out[0..4].copy_from_slice(&len.to_be_bytes());
                out[4..8].copy_from_slice(&id.to_be_bytes());
                out[8] = status;
                let n = out.len();
                // One atomic add, no syscall: the hot path stays as it was.
                let st = &conn.state;
                let before = st.pending.fetch_add(n, Ordering::AcqRel);
                // Over the limit with other requests or replies still pending: the client is not
                // reading its replies, so stop buffering for it (one large reply on its own is
                // always let through). An empty reply at this seq tells the writer to close the
                // connection there.
                if before + n > st.limit && before > *req_len {
                    st.pending.fetch_sub(n, Ordering::AcqRel);
                    st.overflow.store(true, Ordering::Release);
                    let _ = conn.tx.send((*seq, Vec::new(), *req_len));
                } else {
                    let _ = conn.tx.send((*seq, out.clone(), *req_len));
                }
            }
            ReplyTo::Unix { path, shm } => {
                let payload = &out[HDR..];
                let n = if payload.len() > shm.len() {
                    status = TOO_LARGE;
                    0
                } else {
                    shm.mapping_mut()[..payload.len()].copy_from_slice(payload);
                    payload.len()
                };
                self.unix_answer(path, id, status, n);
            }
        }
    }

    fn unix_answer(&self, path: &PathBuf, id: u32, status: u8, n: usize) {
        let mut h = [0u8; 9];
        h[..4].copy_from_slice(&id.to_be_bytes());
        h[4] = status;
        h[5..].copy_from_slice(&(n as u32).to_be_bytes());
        if let Some(u) = &self.unix {
            let _ = u.send_to(&h, path);
        }
    }

    pub fn lambda_json(&self, l: &Lambda) -> serde_json::Value {
        let s = &l.stats;
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "id": l.id, "name": l.name, "version": l.version, "weight": l.weight,
            "kind": match l.code { Code::Wasm { .. } => "wasm", Code::Native(_) => "native" },
            "timeout_ms": l.timeout_ms, "fuel": l.fuel,
            "external": l.external.map(|a| a.to_string()),
            "calls": r(&s.calls), "ok": r(&s.ok), "traps": r(&s.traps), "timeouts": r(&s.timeouts),
            "too_large": r(&s.too_large), "overloaded": r(&s.overloaded),
            "bad_request": r(&s.bad_request), "external_errors": r(&s.external_errors),
            "queue_len": self.sched.queue_len(l.id),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Workers

struct Cached {
    lambda: Arc<Lambda>,
    inst: WasmInst,
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
fn next_job(srv: &Server, poller: &mut crate::poll::Poller, dbuf: &mut [u8], scratch: &mut Vec<u8>) -> Pop {
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
    p.spun_ns.fetch_add(spun.as_nanos() as u64, Ordering::Relaxed);
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
        run_call(srv, cache, &call, out)
    }));
    let outcome = match computed {
        Ok(Some(o)) => o,
        Ok(None) => return, // answered already (in place on shared memory, or cannot instantiate)
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
        JobKind::ShmRequest => match reply {
            ReplyTo::Unix { shm, .. } => (shm.input(), false),
            _ => (&[], false),
        },
    }
}

/// Run the call's lambda to its outcome; `None` when the call was answered already.
#[inline]
fn run_call(
    srv: &Server,
    cache: &mut HashMap<u64, Cached>,
    call: &Call,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    match &call.lambda.code {
        Code::Native(k) => run_native_call(srv, *k, call, out),
        Code::Wasm { pre, .. } => run_wasm_call(srv, cache, pre, call, out),
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
    pre: &InstancePre<()>,
    call: &Call,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    let l = call.lambda;
    let c = match cache.entry(l.uid) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => match WasmInst::new(pre) {
            Ok(inst) => v.insert(Cached {
                lambda: l.clone(),
                inst,
            }),
            Err(e) => {
                inc(&l.stats.traps);
                let msg = format!("cannot instantiate lambda: {e}");
                srv.reply_simple(call.reply, l.id, TRAP, msg.as_bytes(), out);
                return None;
            }
        },
    };
    let o = c
        .inst
        .call(call.input, call.resume, l.timeout_ms, l.fuel, out);
    if matches!(o, Outcome::Trap(_) | Outcome::Timeout) || l.retired.load(Ordering::Relaxed) {
        // After a trap or timeout the instance is rebuilt on its next call; a swapped-out
        // version's instance (still draining its queued calls) is not kept.
        cache.remove(&l.uid);
    }
    Some(o)
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

/// Epoch ticker: one epoch per millisecond of wall-clock time (the unit of lambda timeouts);
/// it catches up if a sleep overshoots, so timeouts do not stretch with timer slack.
pub fn ticker(srv: Arc<Server>, stop: Arc<AtomicBool>) {
    let start = Instant::now();
    let mut ticks: u128 = 0;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_micros(500));
        let now = start.elapsed().as_millis();
        while ticks < now {
            srv.engine.increment_epoch();
            if let Some(Ok(e)) = srv.fuel_engine.get() {
                e.increment_epoch();
            }
            ticks += 1;
        }
    }
}
