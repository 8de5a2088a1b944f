//! The executor: match table, receivers (UDP, TCP, Unix+memfd), workers, the miss path to the
//! host, and external calls.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use wasmtime::Engine;

use crate::lambda::{self, inc, Code, Lambda, Outcome, WasmInst, HDR, MAX_ID};
use crate::sched::{Job, JobKind, Mode, Pop, ReplyTo, Sched};
use crate::shm::Shm;

mod external;
mod host;
pub use external::*;
pub use host::*;

pub const OK: u8 = 0;
#[allow(dead_code)] // relayed from the host, never produced here
pub const HOST_OK: u8 = 1;
pub const UNKNOWN: u8 = 2;
pub const TRAP: u8 = 3;
pub const TIMEOUT: u8 = 4;
pub const TOO_LARGE: u8 = 5;
pub const OVERLOADED: u8 = 6;
pub const HOST_ERROR: u8 = 7;
pub const EXTERNAL_ERROR: u8 = 8;
pub const BAD_REQUEST: u8 = 9;

/// Datagrams a worker classifies from the socket before each job (see Server::drain_udp).
const DRAIN_MAX: usize = 256;
/// Largest UDP datagram payload.
pub const MAX_DGRAM: usize = 65507;
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
}

pub struct Config {
    pub workers: usize,
    pub pin: bool,
    pub mode: Mode,
    pub queue_depth: usize,
    pub host: Option<SocketAddr>,
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
            ReplyTo::Tcp { tx, seq } => {
                let len = (out.len() - 4) as u32;
                out[0..4].copy_from_slice(&len.to_be_bytes());
                out[4..8].copy_from_slice(&id.to_be_bytes());
                out[8] = status;
                let _ = tx.send((*seq, out.clone()));
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
    loop {
        let gen = srv.retire_gen.load(Ordering::Acquire);
        if gen != seen_gen {
            seen_gen = gen;
            cache.retain(|_, c| !c.lambda.retired.load(Ordering::Acquire));
        }
        srv.drain_udp(&mut dbuf, &mut scratch, DRAIN_MAX);
        match srv.sched.pop(Duration::from_millis(100)) {
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

fn process(srv: &Server, cache: &mut HashMap<u64, Cached>, job: Job, out: &mut Vec<u8>) {
    let Job {
        lambda: l,
        kind,
        reply,
    } = job;
    out.clear();
    out.resize(HDR, 0);
    let (input, resume): (&[u8], bool) = match &kind {
        JobKind::Request(v) => (v, false),
        JobKind::Resume(v) => (v, true),
        JobKind::ShmRequest => match &reply {
            ReplyTo::Unix { shm, .. } => (shm.input(), false),
            _ => (&[], false),
        },
    };
    // A panic while running this call must still answer it: a TCP connection's writer sends
    // replies in request order, so one lost reply would hold back every later one forever.
    let computed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Option<Outcome> {
        Some(match &l.code {
            Code::Native(k) => {
                if !resume && input.len() > k.buffer_size() {
                    Outcome::TooLarge
                } else if let (
                    lambda::NativeKind::Gray,
                    JobKind::ShmRequest,
                    ReplyTo::Unix { shm, path },
                ) = (k, &kind, &reply)
                {
                    // Native in place on the shared memory.
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
                    return None;
                } else {
                    lambda::run_native(*k, input, resume, out)
                }
            }
            Code::Wasm { pre, .. } => {
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
                            srv.reply_simple(&reply, l.id, TRAP, msg.as_bytes(), out);
                            return None;
                        }
                    },
                };
                let o = c.inst.call(input, resume, l.timeout_ms, l.fuel, out);
                if matches!(o, Outcome::Trap(_) | Outcome::Timeout)
                    || l.retired.load(Ordering::Relaxed)
                {
                    // After a trap or timeout the instance is rebuilt on its next call; a swapped-out
                    // version's instance (still draining its queued calls) is not kept.
                    cache.remove(&l.uid);
                }
                o
            }
        })
    }));
    let outcome = match computed {
        Ok(Some(o)) => o,
        Ok(None) => return, // answered already (in place on shared memory, or cannot instantiate)
        Err(_) => {
            cache.clear();
            Outcome::Trap("the executor panicked in this call; its instances were dropped".into())
        }
    };
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

// ---------------------------------------------------------------------------------------------
// Receivers

/// One datagram already waiting on the UDP socket, without blocking: (length, sender).
fn recv_nowait(fd: i32, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: buf and addr are valid for the lengths given; the kernel writes at most those.
    let n = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if n < 0 {
        return None;
    }
    let from = match addr.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            SocketAddr::from((
                u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port)))
        }
        _ => return None,
    };
    Some((n as usize, from))
}

impl Server {
    /// Classify what already waits on the UDP socket before a worker picks its next job. The
    /// receiver thread competes for the CPU with the workers (and, on two cores, the clients),
    /// so under a heavy lambda's burst a light lambda's datagram could sit in the kernel buffer
    /// behind the whole burst, where weighted fair queueing cannot see it.
    pub fn drain_udp(&self, buf: &mut [u8], scratch: &mut Vec<u8>, max: usize) {
        let fd = self.udp.as_raw_fd();
        for _ in 0..max {
            let Some((n, from)) = recv_nowait(fd, buf) else {
                return;
            };
            self.accept_datagram(&buf[..n], from, scratch);
        }
    }

    fn accept_datagram(&self, dgram: &[u8], from: SocketAddr, scratch: &mut Vec<u8>) {
        inc(&self.g.packets);
        if dgram.len() < 4 {
            inc(&self.g.malformed_short);
            return;
        }
        self.dispatch(dgram, ReplyTo::Udp(from), scratch);
    }
}

pub fn udp_loop(srv: Arc<Server>) {
    let mut buf = vec![0u8; 65536];
    let mut scratch = Vec::with_capacity(256);
    loop {
        let (n, from) = match srv.udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        srv.accept_datagram(&buf[..n], from, &mut scratch);
    }
}

pub fn tcp_accept_loop(srv: Arc<Server>, listener: TcpListener) {
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        let srv = srv.clone();
        std::thread::spawn(move || tcp_conn(srv, s));
    }
}

fn tcp_conn(srv: Arc<Server>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(wstream) = stream.try_clone() else {
        return;
    };
    let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
    std::thread::spawn(move || tcp_writer(wstream, rx));
    let mut r = std::io::BufReader::with_capacity(1 << 16, stream);
    let mut seq = 0u64;
    let mut buf = Vec::new();
    let mut scratch = Vec::with_capacity(256);
    loop {
        let mut lb = [0u8; 4];
        if r.read_exact(&mut lb).is_err() {
            break;
        }
        let len = u32::from_be_bytes(lb) as usize;
        if len > (16 << 20) {
            break; // not a frame of this protocol; drop the connection
        }
        buf.resize(len, 0);
        if r.read_exact(&mut buf).is_err() {
            break;
        }
        inc(&srv.g.packets);
        if len < 4 {
            inc(&srv.g.malformed_short);
            continue;
        }
        let to = ReplyTo::Tcp {
            tx: tx.clone(),
            seq,
        };
        seq += 1;
        srv.dispatch(&buf, to, &mut scratch);
    }
}

fn tcp_writer(stream: TcpStream, rx: Receiver<(u64, Vec<u8>)>) {
    let mut w = BufWriter::with_capacity(1 << 16, stream);
    let mut next = 0u64;
    let mut held: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    while let Ok(first) = rx.recv() {
        let mut item = Some(first);
        loop {
            if let Some((seq, bytes)) = item.take() {
                held.insert(seq, bytes);
                while let Some(b) = held.remove(&next) {
                    if w.write_all(&b).is_err() {
                        return;
                    }
                    next += 1;
                }
            }
            match rx.try_recv() {
                Ok(x) => item = Some(x),
                Err(_) => break,
            }
        }
        if w.flush().is_err() {
            return;
        }
    }
}

pub fn unix_loop(srv: Arc<Server>) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    use std::io::IoSliceMut;
    let Some(sock) = srv.unix.as_ref() else {
        return;
    };
    let fd = sock.as_raw_fd();
    let mut scratch = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut buf)];
        let (n, fds, from) =
            match recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC) {
                Ok(msg) => {
                    let mut fds: Vec<OwnedFd> = Vec::new();
                    if let Ok(cm) = msg.cmsgs() {
                        for c in cm {
                            if let ControlMessageOwned::ScmRights(v) = c {
                                for raw in v {
                                    fds.push(unsafe {
                                        <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw)
                                    });
                                }
                            }
                        }
                    }
                    let from = msg.address.and_then(|a| a.path().map(|p| p.to_path_buf()));
                    (msg.bytes, fds, from)
                }
                Err(_) => continue,
            };
        inc(&srv.g.packets);
        let Some(path) = from else { continue }; // unnamed client: cannot answer
        if n < 8 {
            inc(&srv.g.malformed_short);
            continue;
        }
        let id = u32::from_be_bytes(buf[..4].try_into().unwrap());
        let len = u32::from_be_bytes(buf[4..8].try_into().unwrap()) as usize;
        let Some(memfd) = fds.into_iter().next() else {
            srv.unix_answer(&path, id, BAD_REQUEST, 0);
            continue;
        };
        let shm = match Shm::map(&memfd, len) {
            Ok(s) => s,
            Err(e) => {
                let status = if matches!(e, crate::shm::MapError::Unsealed) {
                    BAD_REQUEST
                } else {
                    TOO_LARGE
                };
                srv.unix_answer(&path, id, status, 0);
                continue;
            }
        };
        drop(memfd);
        let reply = ReplyTo::Unix { path, shm };
        match srv.lookup(id) {
            Some(l) => {
                inc(&l.stats.calls);
                if let Err(job) = srv.sched.push(
                    Job {
                        lambda: l,
                        kind: JobKind::ShmRequest,
                        reply,
                    },
                    false,
                ) {
                    inc(&job.lambda.stats.overloaded);
                    srv.reply_simple(&job.reply, id, OVERLOADED, b"", &mut scratch);
                }
            }
            None => {
                inc(&srv.g.unknown);
                srv.reply_simple(&reply, id, UNKNOWN, b"", &mut scratch);
            }
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
