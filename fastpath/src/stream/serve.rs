//! The stream listener: one thread running an epoll event loop (mio), serving every stream
//! connection.
//!
//! Why one event loop rather than a thread per connection (the TCP lambda path) or a pool: a
//! stream request is a connection that may stay open for a long payload or for a slow client,
//! so the count of open connections, not the CPU, is what has to scale. With epoll a connection
//! costs its socket, a small state struct and its function's state (K registers or counters);
//! the read buffer and the decoded-element buffer are the loop's, shared by all. Thousands of
//! open, idle or half-dead connections therefore cost kilobytes each and no threads, and idle
//! timeouts are a timer heap instead of blocked reads. The stages are O(K) per element and run
//! inline on the loop (no hand-off, no copy), a connection at a time, at most `BUDGET` bytes per
//! turn so one fast sender cannot starve the others. One loop thread suits the 2-core machines
//! this runs on (the lambda workers keep the other core); more loops would be a listener per
//! thread, not a change of design. A `wasm` stage is the deployer's code, not ours: it never
//! runs on the loop but on the offload pool (`offload`), and the loop hears of each finished job
//! through a waker.
//!
//! The per-connection state machine (and kept-alive connections) is in `conn`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Shutdown};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixListener};
use mio::{Events, Interest, Poll, Token};

use super::conn::{self, drive, Conn, Next, Phase, CHUNK};
use super::offload::{threads, Offload};
use super::sock::{Sock, GATEWAY_PEER};
use super::spec::reply_status;
use super::Streams;
use crate::lambda::inc;
use crate::server::Server;
use crate::wire::{OVERLOADED, TIMEOUT};

/// How often accepting is retried after it failed for lack of descriptors or memory.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
const LISTENER: Token = Token(usize::MAX);
/// The gateway's private unix listener (`--stream-unix`).
const UNIX_LISTENER: Token = Token(usize::MAX - 2);
/// The offload pool finished a job (`offload`).
const WAKER: Token = Token(usize::MAX - 1);

pub struct Config {
    /// A connection with no byte for this long is answered TIMEOUT and closed (closed quietly
    /// when it is a kept-alive connection between requests).
    pub idle: Duration,
    /// Most connections open at once; more are closed at accept. One peer IP may hold at most
    /// half of them (`per_peer`), as on the TCP lambda port, so one client opening idle
    /// connections cannot shut everyone else (the gateway included) out.
    pub max_conns: usize,
}

impl Config {
    /// Connections one peer IP may hold at once.
    pub fn per_peer(&self) -> usize {
        (self.max_conns / 2).max(1)
    }
}

struct Loop<'a> {
    streams: &'a Streams,
    poll: Poll,
    cfg: Config,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    next_gen: u32,
    timers: BinaryHeap<Reverse<(Instant, usize)>>,
    again: VecDeque<usize>,
    buf: Vec<u8>,
    scratch: Vec<u32>,
    now: Instant,
    offload: Offload,
    /// Connections open now per peer IP (at most `cfg.per_peer()` each).
    peers: HashMap<IpAddr, usize>,
}

fn token_of(idx: usize, gen: u32) -> usize {
    idx | ((gen as usize) << 32)
}

/// Serve stream connections on `listener` forever (the `stream` thread).
pub fn stream_loop(
    srv: Arc<Server>,
    listener: std::net::TcpListener,
    unix: Option<std::os::unix::net::UnixListener>,
    cfg: Config,
) {
    raise_nofile(cfg.max_conns as u64 + 512);
    listener
        .set_nonblocking(true)
        .expect("stream listener nonblocking");
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new().expect("epoll");
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .expect("register the stream listener");
    let mut unix = unix.map(|u| {
        u.set_nonblocking(true).expect("unix listener nonblocking");
        let mut u = UnixListener::from_std(u);
        poll.registry()
            .register(&mut u, UNIX_LISTENER, Interest::READABLE)
            .expect("register the gateway's stream listener");
        u
    });
    let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER).expect("the stream loop's waker"));
    let offload = Offload::start(
        threads(),
        Arc::new(move || {
            let _ = waker.wake();
        }),
    );
    let mut l = Loop {
        streams: &srv.streams,
        poll,
        cfg,
        conns: Vec::new(),
        free: Vec::new(),
        next_gen: 0,
        timers: BinaryHeap::new(),
        again: VecDeque::new(),
        buf: vec![0u8; CHUNK],
        scratch: Vec::with_capacity(CHUNK),
        now: Instant::now(),
        offload,
        peers: HashMap::new(),
    };
    let mut events = Events::with_capacity(1024);
    let mut accept_paused = false;
    loop {
        l.now = Instant::now();
        let timeout = if !l.again.is_empty() {
            Some(Duration::ZERO)
        } else {
            let t = l
                .timers
                .peek()
                .map(|Reverse((d, _))| d.saturating_duration_since(l.now));
            match (t, accept_paused) {
                (Some(t), true) => Some(t.min(ACCEPT_RETRY)),
                (None, true) => Some(ACCEPT_RETRY),
                (t, false) => t,
            }
        };
        if let Err(e) = l.poll.poll(&mut events, timeout) {
            if e.kind() != ErrorKind::Interrupted {
                eprintln!("nearfaas-fastpath: stream poll: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        l.now = Instant::now();
        if accept_paused {
            accept_paused = !l.accept(&listener);
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_paused = !l.accept(&listener);
            } else if ev.token() == UNIX_LISTENER {
                if let Some(u) = unix.as_mut() {
                    l.accept_unix(u);
                }
            } else if ev.token() == WAKER {
                l.completed();
            } else {
                l.ready(ev.token().0);
            }
        }
        // Connections that had more to read than one turn's budget.
        for _ in 0..l.again.len() {
            let Some(t) = l.again.pop_front() else { break };
            if let Some(Some(c)) = l.conns.get_mut(t & 0xffff_ffff) {
                c.queued = false;
            }
            l.ready(t);
        }
        l.expire();
    }
}

impl Loop<'_> {
    /// Accept every pending connection; false when accepting must be retried later (out of
    /// descriptors or memory: the pending connections stay in the backlog).
    fn accept(&mut self, listener: &TcpListener) -> bool {
        loop {
            match listener.accept() {
                Ok((sock, _)) => self.add(sock),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let out_of = [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM];
                    if e.raw_os_error().is_some_and(|n| out_of.contains(&n)) {
                        return false;
                    }
                    // Otherwise (e.g. ECONNABORTED) that connection is gone: take the next.
                }
            }
        }
    }

    /// The gateway's connections, on its private socket: neither a peer's share nor the TCP
    /// cap applies (only the gateway can open it; it bounds itself).
    fn accept_unix(&mut self, listener: &UnixListener) {
        loop {
            match listener.accept() {
                Ok((sock, _)) => self.register(Sock::Unix(sock), GATEWAY_PEER),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return, // WouldBlock, or out of descriptors: the rest wait in the backlog
            }
        }
    }

    fn add(&mut self, mut sock: TcpStream) {
        let g = &self.streams.g;
        let Some(peer) = sock.peer_addr().ok().map(|a| a.ip()) else {
            inc(&g.accepted); // accepted, and already gone (reset): nothing to serve
            return;
        };
        let held = self.peers.get(&peer).copied().unwrap_or(0);
        if g.conns.load(Ordering::Relaxed) >= self.cfg.max_conns || held >= self.cfg.per_peer() {
            inc(&g.refused);
            // Best effort: 5 bytes into a new socket's empty send buffer, then close.
            let _ = sock.write_all(&reply_status(OVERLOADED));
            let _ = sock.shutdown(Shutdown::Write);
            return;
        }
        let _ = sock.set_nodelay(true);
        *self.peers.entry(peer).or_insert(0) += 1;
        self.register(Sock::Tcp(sock), peer);
    }

    fn register(&mut self, mut sock: Sock, peer: IpAddr) {
        let g = &self.streams.g;
        let idx = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.next_gen = self.next_gen.wrapping_add(1);
        let gen = self.next_gen;
        let tok = token_of(idx, gen);
        if self
            .poll
            .registry()
            .register(&mut sock, Token(tok), Interest::READABLE)
            .is_err()
        {
            self.free.push(idx);
            self.unpeer(peer);
            return;
        }
        g.conns.fetch_add(1, Ordering::Relaxed);
        inc(&g.accepted);
        let deadline = self.now + self.cfg.idle;
        self.conns[idx] = Some(Conn::new(sock, gen, peer, deadline));
        self.timers.push(Reverse((deadline, tok)));
        // The request usually arrives with the handshake: read it now rather than after
        // another epoll round (WouldBlock when it has not).
        self.ready(tok);
    }

    fn get(&mut self, tok: usize) -> Option<&mut Conn> {
        let (idx, gen) = (tok & 0xffff_ffff, (tok >> 32) as u32);
        self.conns.get_mut(idx)?.as_mut().filter(|c| c.gen == gen)
    }

    fn close(&mut self, tok: usize) {
        let idx = tok & 0xffff_ffff;
        if let Some(mut c) = self.conns[idx].take() {
            let _ = self.poll.registry().deregister(&mut c.sock);
            self.free.push(idx);
            self.release(&c);
        }
    }

    /// A connection closed: it no longer counts, in all or against its peer.
    fn release(&mut self, c: &Conn) {
        self.streams.g.conns.fetch_sub(1, Ordering::Relaxed);
        self.unpeer(c.peer);
    }

    fn unpeer(&mut self, peer: IpAddr) {
        if let Some(n) = self.peers.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.peers.remove(&peer);
            }
        }
    }

    /// The connection is readable or writable (or was queued to go on reading).
    fn ready(&mut self, tok: usize) {
        let Some(mut c) = self.take(tok) else { return };
        let streams = self.streams;
        let now = self.now;
        let idle = self.cfg.idle;
        // A bug in a stage must cost its connection, never the loop serving all the others.
        let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drive(streams, &mut c, &mut self.buf, &mut self.scratch, now, idle)
        }))
        .unwrap_or(Next::Close);
        if next != Next::Close {
            if let Some(job) = conn::job(&mut c, tok) {
                self.offload.submit(job);
            }
        }
        self.put(tok, c, next);
    }

    /// Jobs the offload pool finished: give each its connection back (one that closed since
    /// drops it) and drive that connection on (read the next batch, or write the reply).
    fn completed(&mut self) {
        while let Ok(d) = self.offload.done.try_recv() {
            let tok = d.tok;
            if self.get(tok).is_some_and(|c| conn::done(c, d)) {
                self.ready(tok);
            }
        }
    }

    /// Take the connection out of its slot while it is driven (the slot stays reserved).
    fn take(&mut self, tok: usize) -> Option<Conn> {
        self.get(tok)?;
        self.conns[tok & 0xffff_ffff].take()
    }

    fn put(&mut self, tok: usize, mut c: Conn, next: Next) {
        let idx = tok & 0xffff_ffff;
        if next == Next::Close {
            let _ = self.poll.registry().deregister(&mut c.sock);
            self.free.push(idx);
            self.release(&c);
            return;
        }
        let want_write = matches!(c.phase, Phase::Reply { .. });
        if want_write != c.writing {
            let interest = if want_write {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            if self
                .poll
                .registry()
                .reregister(&mut c.sock, Token(tok), interest)
                .is_ok()
            {
                c.writing = want_write;
            }
        }
        if next == Next::Again && !c.queued {
            c.queued = true;
            self.again.push_back(tok);
        }
        self.conns[idx] = Some(c);
    }

    /// Fire the idle timers that are due: TIMEOUT to a connection still sending (or silent
    /// before its header), a plain close to one not reading its reply or draining.
    fn expire(&mut self) {
        while let Some(&Reverse((at, tok))) = self.timers.peek() {
            if at > self.now {
                return;
            }
            self.timers.pop();
            let now = self.now;
            let streams = self.streams;
            let Some(c) = self.get(tok) else { continue }; // closed since
            if c.deadline > now {
                let d = c.deadline;
                self.timers.push(Reverse((d, tok)));
                continue;
            }
            if c.owes_timeout() {
                inc(&streams.g.timeouts);
                // Best effort: 5 bytes into an idle socket's empty send buffer.
                let _ = c.sock.write_all(&reply_status(TIMEOUT));
                let _ = c.sock.shutdown(Shutdown::Write);
            }
            self.close(tok);
        }
    }
}

/// Let the process open at least `want` descriptors when the hard limit allows (the stream
/// listener holds one per connection).
fn raise_nofile(want: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}
