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
//! thread, not a change of design.
//!
//! Per connection: `Header` (12 bytes) → `Body` (the pipeline eats each chunk as it is read) →
//! `Reply` (written as the socket takes it) → closed; or, when the reply came before the client
//! finished sending (UNKNOWN, BAD_REQUEST mid-stream), `Drain`: the write side is shut
//! (FIN after the reply) and input is read and dropped until EOF or the idle timeout, so the
//! close does not reset the connection under the client's unread reply.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use super::spec::{refusal_status, reply_status, Pipeline, Refusal};
use super::{StreamFn, Streams};
use crate::lambda::inc;
use crate::server::Server;
use crate::wire::{BAD_REQUEST, OVERLOADED, STREAM_HEAD, STREAM_UNTIL_EOF, TIMEOUT, UNKNOWN};

/// Bytes read from a socket at once (one chunk fed through the pipeline).
pub const CHUNK: usize = 64 << 10;
/// Bytes read from one connection per turn before the loop moves on to the next (at most; a
/// chain's `turn_bytes` makes it smaller for costly chains).
const BUDGET: usize = 4 * CHUNK;
/// The first read of a connection: the header and, for requests up to ~16 KiB, the payload.
const HEADER_READ: usize = 16 << 10;
/// How often accepting is retried after it failed for lack of descriptors or memory.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);
const LISTENER: Token = Token(usize::MAX);

pub struct Config {
    /// A connection with no byte for this long is answered TIMEOUT and closed.
    pub idle: Duration,
    /// Most connections open at once; more are closed at accept.
    pub max_conns: usize,
}

enum Phase {
    Header {
        buf: [u8; STREAM_HEAD],
        got: usize,
    },
    Body {
        f: Arc<StreamFn>,
        pipe: Pipeline,
        /// Payload bytes still expected (`STREAM_UNTIL_EOF`: until the client half-closes).
        left: u64,
    },
    Reply {
        out: Vec<u8>,
        at: usize,
    },
    Drain,
}

struct Conn {
    sock: TcpStream,
    gen: u32,
    phase: Phase,
    /// The client half-closed (read returned 0).
    eof: bool,
    /// When the idle timer fires (moved on by every byte read or written; fixed in `Drain`).
    deadline: Instant,
    /// Registered for writable events too.
    writing: bool,
    /// Already in the loop's `again` queue.
    queued: bool,
}

/// What handling a connection asks the loop to do with it.
#[derive(PartialEq)]
enum Next {
    Keep,
    /// Not done reading (budget spent): come back after the others.
    Again,
    Close,
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
}

fn token_of(idx: usize, gen: u32) -> usize {
    idx | ((gen as usize) << 32)
}

/// Serve stream connections on `listener` forever (the `stream` thread).
pub fn stream_loop(srv: Arc<Server>, listener: std::net::TcpListener, cfg: Config) {
    raise_nofile(cfg.max_conns as u64 + 512);
    listener
        .set_nonblocking(true)
        .expect("stream listener nonblocking");
    let mut listener = TcpListener::from_std(listener);
    let poll = Poll::new().expect("epoll");
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .expect("register the stream listener");
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
                Err(e) => match e.raw_os_error() {
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                        return false
                    }
                    _ => {} // e.g. ECONNABORTED: that connection is gone; take the next
                },
            }
        }
    }

    fn add(&mut self, mut sock: TcpStream) {
        let g = &self.streams.g;
        if g.conns.load(Ordering::Relaxed) >= self.cfg.max_conns {
            inc(&g.refused);
            // Best effort: 5 bytes into a new socket's empty send buffer, then close.
            let _ = sock.write_all(&reply_status(OVERLOADED));
            let _ = sock.shutdown(Shutdown::Write);
            return;
        }
        let _ = sock.set_nodelay(true);
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
            return;
        }
        g.conns.fetch_add(1, Ordering::Relaxed);
        inc(&g.accepted);
        let deadline = self.now + self.cfg.idle;
        self.conns[idx] = Some(Conn {
            sock,
            gen,
            phase: Phase::Header {
                buf: [0; STREAM_HEAD],
                got: 0,
            },
            eof: false,
            deadline,
            writing: false,
            queued: false,
        });
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
            self.streams.g.conns.fetch_sub(1, Ordering::Relaxed);
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
        self.put(tok, c, next);
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
            self.streams.g.conns.fetch_sub(1, Ordering::Relaxed);
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
            let timed_out = match &c.phase {
                Phase::Header { .. } => true,
                Phase::Body { f, .. } => {
                    inc(&f.stats.timeouts);
                    true
                }
                Phase::Reply { .. } | Phase::Drain => false,
            };
            if timed_out {
                inc(&streams.g.timeouts);
                // Best effort: 5 bytes into an idle socket's empty send buffer.
                let _ = c.sock.write_all(&reply_status(TIMEOUT));
                let _ = c.sock.shutdown(Shutdown::Write);
            }
            self.close(tok);
        }
    }
}

/// Read what the connection has (up to the budget), run it through its state machine, write
/// the reply as far as the socket takes it.
fn drive(
    streams: &Streams,
    c: &mut Conn,
    buf: &mut [u8],
    scratch: &mut Vec<u32>,
    now: Instant,
    idle: Duration,
) -> Next {
    let mut read = 0usize;
    let mut more = false;
    while !c.eof {
        // How much this turn may read, and in what pieces: a costly chain (e.g. a K = 4096
        // insertion network) gets small turns so the connections beside it are not held up.
        let (turn, piece) = match &c.phase {
            Phase::Body { f, .. } => {
                let t = f.chain.turn_bytes();
                (t, t.min(CHUNK))
            }
            Phase::Header { .. } => (BUDGET, HEADER_READ),
            _ => (BUDGET, CHUNK),
        };
        if read >= turn {
            more = true;
            break;
        }
        match c.sock.read(&mut buf[..piece]) {
            Ok(0) => {
                c.eof = true;
                if let Some(n) = at_eof(streams, c, scratch) {
                    return n;
                }
            }
            Ok(n) => {
                read += n;
                if !matches!(c.phase, Phase::Drain) {
                    c.deadline = now + idle;
                }
                consume(streams, c, &buf[..n], scratch);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Next::Close,
        }
        if matches!(c.phase, Phase::Reply { .. }) {
            break; // answer first; what else arrives is read (and dropped) afterwards
        }
    }
    if let Phase::Reply { out, at } = &mut c.phase {
        while *at < out.len() {
            match c.sock.write(&out[*at..]) {
                Ok(0) => return Next::Close,
                Ok(n) => {
                    *at += n;
                    c.deadline = now + idle;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        if c.eof {
            return Next::Close;
        }
        // The client may still be sending: FIN after the reply, then drop its input until it
        // closes (or the idle time passes), so closing does not reset the reply away.
        let _ = c.sock.shutdown(Shutdown::Write);
        c.phase = Phase::Drain;
        c.deadline = now + idle;
        return Next::Again;
    }
    if matches!(c.phase, Phase::Drain) && c.eof {
        return Next::Close;
    }
    if more {
        Next::Again
    } else {
        Next::Keep
    }
}

/// Feed `bytes` (just read) through the connection's phases.
fn consume(streams: &Streams, c: &mut Conn, mut bytes: &[u8], scratch: &mut Vec<u32>) {
    while !bytes.is_empty() {
        match &mut c.phase {
            Phase::Header { buf, got } => {
                let take = (STREAM_HEAD - *got).min(bytes.len());
                buf[*got..*got + take].copy_from_slice(&bytes[..take]);
                *got += take;
                bytes = &bytes[take..];
                if *got == STREAM_HEAD {
                    let h = *buf;
                    c.phase = start(streams, &h);
                    if matches!(c.phase, Phase::Body { left: 0, .. }) {
                        finish(c, scratch);
                    }
                }
            }
            Phase::Body { f, pipe, left } => {
                let take = (*left).min(bytes.len() as u64) as usize;
                let r = pipe.feed(&bytes[..take], scratch);
                f.stats.bytes.fetch_add(take as u64, Ordering::Relaxed);
                if *left != STREAM_UNTIL_EOF {
                    *left -= take as u64;
                }
                bytes = &bytes[take..];
                let refused = r.err().map(|why| {
                    count_refusal(f, &why);
                    count_elements(f, pipe);
                    reply_status(refusal_status(&why))
                });
                let complete = *left == 0;
                if let Some(out) = refused {
                    c.phase = reply(out);
                } else if complete {
                    finish(c, scratch);
                }
            }
            Phase::Reply { .. } | Phase::Drain => return, // input after the answer: dropped
        }
    }
}

/// A complete header: look the function up and start its pipeline (or answer at once).
fn start(streams: &Streams, h: &[u8; STREAM_HEAD]) -> Phase {
    let id = u32::from_le_bytes(h[..4].try_into().unwrap());
    let len = u64::from_le_bytes(h[4..].try_into().unwrap());
    let Some(f) = streams.lookup(id) else {
        inc(&streams.g.unknown);
        return reply(reply_status(UNKNOWN));
    };
    inc(&f.stats.calls);
    if len != STREAM_UNTIL_EOF && len % f.chain.elem_size() != 0 {
        inc(&f.stats.bad_request);
        return reply(reply_status(BAD_REQUEST));
    }
    let pipe = match f.chain.try_pipeline() {
        Ok(p) => p,
        Err(why) => {
            count_refusal(&f, &why);
            return reply(reply_status(refusal_status(&why)));
        }
    };
    Phase::Body { f, pipe, left: len }
}

/// The payload is complete: the reply is the last stage's state.
fn finish(c: &mut Conn, scratch: &mut Vec<u32>) {
    let Phase::Body { f, pipe, .. } = &mut c.phase else {
        return;
    };
    let out = match pipe.finish(scratch) {
        Ok(out) => {
            inc(&f.stats.ok);
            out
        }
        Err(why) => {
            count_refusal(f, &why);
            reply_status(refusal_status(&why))
        }
    };
    count_elements(f, pipe);
    c.phase = reply(out);
}

/// Count a refused request under its status.
fn count_refusal(f: &StreamFn, why: &Refusal) {
    inc(match why {
        Refusal::Parse(_) | Refusal::PartialElement | Refusal::Module => &f.stats.bad_request,
        Refusal::Trap(_) | Refusal::Timeout => &f.stats.traps,
        Refusal::Overloaded(_) => &f.stats.overloaded,
    });
}

fn count_elements(f: &StreamFn, pipe: &Pipeline) {
    f.stats.elements.fetch_add(pipe.elements, Ordering::Relaxed);
}

fn reply(out: Vec<u8>) -> Phase {
    Phase::Reply { out, at: 0 }
}

/// The client half-closed: what that means in each phase (`None`: go on to write the reply).
fn at_eof(streams: &Streams, c: &mut Conn, scratch: &mut Vec<u32>) -> Option<Next> {
    match &mut c.phase {
        Phase::Header { got: 0, .. } => Some(Next::Close), // opened and closed: nothing to answer
        Phase::Header { .. } => {
            inc(&streams.g.bad_header);
            c.phase = reply(reply_status(BAD_REQUEST));
            None
        }
        Phase::Body { left, f, pipe } => {
            if *left != STREAM_UNTIL_EOF {
                // Truncated: EOF before payload_len bytes.
                inc(&f.stats.bad_request);
                count_elements(f, pipe);
                c.phase = reply(reply_status(BAD_REQUEST));
                return None;
            }
            finish(c, scratch);
            None
        }
        Phase::Reply { .. } => None,
        Phase::Drain => Some(Next::Close),
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
