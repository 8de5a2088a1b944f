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

use wasmtime::Engine;

use crate::lambda::{self, inc, Code, Lambda, HDR};
use crate::sched::{Job, JobKind, Mode, ReplyTo, Sched};
use crate::shm::Shm;
use crate::wire::{IdHash, LambdaId, ID_LEN};

mod external;
mod host;
mod receive;
mod worker;
pub use external::*;
pub use host::*;
pub use receive::*;
pub use worker::worker_loop;

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
    /// TCP connections closed at accept because their peer IP had its share open (issue 39).
    pub conns_refused_peer: AtomicU64,
    /// TCP connections closed after `--tcp-idle-ms` with nothing in flight (issue 39).
    pub conns_idle_closed: AtomicU64,
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
    /// Most TCP connections open at once from one peer IP (issue 39: one client cannot take
    /// the whole pool).
    pub max_conns_per_peer: usize,
    /// A TCP connection with no request in flight that sends nothing for this long is closed.
    pub tcp_idle: Duration,
    /// How workers wait for work (src/poll.rs): spin a while, then block.
    pub poll: crate::poll::Policy,
    /// Wasm lambdas run in slices of this length (src/slice.rs); `None`: to completion.
    pub slice: Option<Duration>,
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
    /// The match table: lambda id -> lambda. IDs are random 64-bit values (issue 39), so a hash
    /// map replaces the dense array over 0..=65535; a lookup hashes 8 bytes and clones an Arc
    /// under a read lock (no allocation). Writers (deploy, swap, remove) are rare.
    pub table: RwLock<HashMap<LambdaId, Arc<Lambda>, IdHash>>,
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
    pub max_conns_per_peer: usize,
    pub tcp_idle: Duration,
    /// TCP connections open now per peer IP (at most `max_conns_per_peer` each).
    pub tcp_peers: Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    /// Stream functions (`--stream`; src/stream/): their table and listener counters.
    pub streams: crate::stream::Streams,
    pub poll: crate::poll::Policy,
    pub polled: PollStats,
    /// Set when wasm lambdas run in slices (`--slice-us` above 0).
    pub slicer: Option<Arc<crate::slice::Slicer>>,
    /// Compiled modules, shared by the lambdas deployed from the same bytes (src/modules.rs).
    pub modules: crate::modules::Modules,
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
        let sched = Sched::new(cfg.mode, cfg.queue_depth);
        let slicer = match cfg.slice {
            Some(d) => Some(Arc::new(
                crate::slice::Slicer::new(d, cfg.mode == Mode::Drr, sched.waiting.clone())
                    .map_err(|e| std::io::Error::other(format!("wasmtime engine: {e:#}")))?,
            )),
            None => None,
        };
        Ok(Server {
            engine,
            fuel_engine: std::sync::OnceLock::new(),
            table: RwLock::new(HashMap::with_capacity_and_hasher(64, IdHash::default())),
            sched,
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
            max_conns_per_peer: cfg.max_conns_per_peer,
            tcp_idle: cfg.tcp_idle,
            tcp_peers: Mutex::new(Default::default()),
            streams: Default::default(),
            poll: cfg.poll,
            polled: PollStats::default(),
            slicer,
            modules: Default::default(),
        })
    }

    #[inline]
    pub fn lookup(&self, id: LambdaId) -> Option<Arc<Lambda>> {
        self.table.read().unwrap().get(&id).cloned()
    }

    /// Install `l` at its id (a hot swap when one is there); returns the old version.
    pub fn install(&self, l: Arc<Lambda>) -> Option<Arc<Lambda>> {
        let old = self.table.write().unwrap().insert(l.id, l);
        if let Some(o) = &old {
            o.retired.store(true, Ordering::Release);
            self.retire_gen.fetch_add(1, Ordering::Release);
        }
        old
    }

    pub fn remove(&self, id: LambdaId) -> Option<Arc<Lambda>> {
        let old = self.table.write().unwrap().remove(&id);
        if let Some(o) = &old {
            o.retired.store(true, Ordering::Release);
            self.retire_gen.fetch_add(1, Ordering::Release);
        }
        old
    }

    /// Match stage: `dgram` is a whole request (id + payload).
    pub fn dispatch(&self, dgram: &[u8], reply: ReplyTo, scratch: &mut Vec<u8>) {
        let id = LambdaId::from_be_bytes(dgram[..ID_LEN].try_into().unwrap());
        match self.lookup(id) {
            Some(l) => {
                inc(&l.stats.calls);
                // Larger than the lambda's buffer: answer now rather than queue a copy of the
                // payload that the worker would refuse anyway (this bounds queued bytes).
                if dgram.len() - ID_LEN > l.input_capacity() {
                    inc(&l.stats.too_large);
                    self.reply_simple(&reply, id, TOO_LARGE, b"", scratch);
                    return;
                }
                let job = Job {
                    lambda: l,
                    kind: JobKind::Request(dgram[ID_LEN..].to_vec()),
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
        id: LambdaId,
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
    pub fn reply_out(&self, to: &ReplyTo, id: LambdaId, mut status: u8, out: &mut Vec<u8>) {
        // out = [frame length (4)][id (ID_LEN)][status (1)][payload]; UDP sends from byte 4.
        const F: usize = crate::wire::FRAME_LEN;
        match to {
            ReplyTo::Udp(addr) => {
                if out.len() - F > MAX_DGRAM {
                    status = TOO_LARGE;
                    out.truncate(HDR);
                }
                out[F..F + ID_LEN].copy_from_slice(&id.to_be_bytes());
                out[F + ID_LEN] = status;
                let _ = self.udp.send_to(&out[F..], addr);
            }
            ReplyTo::Tcp { conn, seq, req_len } => {
                let len = (out.len() - F) as u32;
                out[0..F].copy_from_slice(&len.to_be_bytes());
                out[F..F + ID_LEN].copy_from_slice(&id.to_be_bytes());
                out[F + ID_LEN] = status;
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

    fn unix_answer(&self, path: &PathBuf, id: LambdaId, status: u8, n: usize) {
        let mut h = [0u8; crate::wire::MEMFD_REPLY];
        h[..ID_LEN].copy_from_slice(&id.to_be_bytes());
        h[ID_LEN] = status;
        h[ID_LEN + 1..].copy_from_slice(&(n as u32).to_be_bytes());
        if let Some(u) = &self.unix {
            let _ = u.send_to(&h, path);
        }
    }

    pub fn lambda_json(&self, l: &Lambda) -> serde_json::Value {
        let s = &l.stats;
        let wasm = match &l.code {
            Code::Wasm {
                entry,
                module,
                sliced,
                ..
            } => Some((entry.as_deref(), module, *sliced)),
            Code::Native(_) => None,
        };
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "id": l.id, "name": l.name, "version": l.version, "group": &*l.group, "weight": l.weight,
            "kind": if wasm.is_some() { "wasm" } else { "native" },
            "sliced": wasm.is_some_and(|(_, _, sliced)| sliced),
            "entry": wasm.and_then(|(entry, _, _)| entry),
            "module": wasm.map(|(_, m, _)| m.digest.as_str()),
            "code_bytes": wasm.map(|(_, m, _)| m.code_bytes),
            "timeout_ms": l.timeout_ms, "fuel": l.fuel,
            "external": l.external.map(|a| a.to_string()),
            "calls": r(&s.calls), "ok": r(&s.ok), "traps": r(&s.traps), "timeouts": r(&s.timeouts),
            "too_large": r(&s.too_large), "overloaded": r(&s.overloaded),
            "bad_request": r(&s.bad_request), "external_errors": r(&s.external_errors),
            "queue_len": self.sched.queue_len(l.id),
        })
    }
}

/// Epoch ticker: one epoch per millisecond of wall-clock time (the unit of lambda timeouts);
/// it catches up if a sleep overshoots, so timeouts do not stretch with timer slack. While a
/// sliced call is in flight it also ticks the slicer's engine once per slice (src/slice.rs).
pub fn ticker(srv: Arc<Server>, stop: Arc<AtomicBool>) {
    // Without this the kernel may defer each wake-up by up to 50 µs, stretching short slices.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000u64, 0u64, 0u64, 0u64) };
    let start = Instant::now();
    let mut ticks: u128 = 0;
    while !stop.load(Ordering::Relaxed) {
        match &srv.slicer {
            Some(s) if s.in_flight.load(Ordering::Acquire) > 0 => {
                std::thread::sleep(s.slice.min(Duration::from_micros(500)));
                s.engine.increment_epoch();
            }
            _ => std::thread::sleep(Duration::from_micros(500)),
        }
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
