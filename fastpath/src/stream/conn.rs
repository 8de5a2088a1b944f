//! One stream connection's state machine, driven by the event loop (`serve`).
//!
//! Per connection: `Header` (16 bytes) → `Body` (the pipeline eats each chunk as it is read) →
//! `Reply` (written as the socket takes it) → closed; or, when the reply came before the client
//! finished sending (UNKNOWN, BAD_REQUEST mid-stream), `Drain`: the write side is shut
//! (FIN after the reply) and input is read and dropped until EOF or the idle timeout, so the
//! close does not reset the connection under the client's unread reply.
//!
//! **Kept-alive connections.** A header whose payload_len has `STREAM_KEEP_ALIVE` set asks for the
//! connection to stay open after its reply: when the payload had a declared length, was read
//! to its end and the reply is written, the connection goes back to `Header` for the next
//! request instead of closing. That takes the TCP handshake and the accept out of each request
//! (the FPGA paper opens a connection per request; clients that send many small requests to
//! one function should not have to). Worked example: `id, len 256 | KEEP` + 256 bytes → reply;
//! `id, len 64 | KEEP` + 64 bytes on the same socket → reply; the client closes → the executor
//! closes. Bytes that arrive behind a request's payload in the same read (a pipelining client)
//! are kept, at most one read's worth, and start the next header once the reply is written;
//! while a reply waits for the socket the connection is not read, so a client that sends and
//! never reads cannot make the executor buffer its requests.
//!
//! Known caveats:
//! * A reply that ends a request early (UNKNOWN, BAD_REQUEST for a length that is not a
//!   multiple of the element, a refusal mid-payload) closes even a kept-alive connection: the
//!   unread rest of the payload would be taken for the next header.
//! * `payload_len = STREAM_UNTIL_EOF` ends with the client's half-close, so such a request is
//!   always the connection's last.
//! * A kept-alive connection idle between requests for the idle time is closed without a
//!   TIMEOUT reply (there is no request to answer; a reply there would be read as the answer
//!   to a request the client sends just then).

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::offload::{Done, Job, BATCH};
use super::sock::Sock;
use super::spec::{refusal_status, reply_status, Pipeline, Reduce, Refusal};
use super::{StreamFn, Streams};
use crate::lambda::inc;
use crate::wire::{BAD_REQUEST, STREAM_HEAD, STREAM_KEEP_ALIVE, STREAM_UNTIL_EOF, UNKNOWN};

/// Bytes read from a socket at once (one chunk fed through the pipeline).
pub const CHUNK: usize = 64 << 10;
/// Bytes read from one connection per turn before the loop moves on to the next (at most; a
/// chain's `turn_bytes` makes it smaller for costly chains).
const BUDGET: usize = 4 * CHUNK;
/// The first read of a connection: the header and, for requests up to ~16 KiB, the payload.
const HEADER_READ: usize = 16 << 10;

pub(super) enum Phase {
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
    /// The body of a request to a chain ending in a `wasm` stage: read here, run by the
    /// offload pool (`offload`), never on the loop.
    Wasm(Box<WasmBody>),
    Reply {
        out: Vec<u8>,
        at: usize,
    },
    Drain,
}

/// A wasm request's body as the loop holds it: what is read and not yet handed to the pool.
pub(super) struct WasmBody {
    pub f: Arc<StreamFn>,
    /// `None` before the first job (which instantiates the module) and while a job holds it.
    pub pipe: Option<Pipeline>,
    /// Payload bytes still expected (`STREAM_UNTIL_EOF`: until the client half-closes).
    left: u64,
    /// Read, not yet handed over (at most `offload::BATCH`).
    pub inbox: Vec<u8>,
    /// A job is out: its cancel flag (set when the request ends another way).
    pub out: Option<Arc<AtomicBool>>,
    /// The payload is complete: the next job finishes.
    pub ended: bool,
    /// Whether a job has been handed over for this request yet.
    pub started: bool,
}

impl Drop for WasmBody {
    fn drop(&mut self) {
        if let Some(cancel) = &self.out {
            cancel.store(true, Ordering::Relaxed);
        }
    }
}

impl WasmBody {
    /// Whether the loop should hand a job to the pool now: none is out, and there is a first
    /// job to make, bytes to feed or an end to finish.
    pub fn due(&self) -> bool {
        self.out.is_none() && (!self.started || !self.inbox.is_empty() || self.ended)
    }
}

fn header() -> Phase {
    Phase::Header {
        buf: [0; STREAM_HEAD],
        got: 0,
    }
}

pub(super) struct Conn {
    pub sock: Sock,
    pub gen: u32,
    /// The client's IP (its connections count against its share).
    pub peer: IpAddr,
    pub phase: Phase,
    /// The client half-closed (read returned 0).
    eof: bool,
    /// The request being served asked to keep the connection open after its reply (and
    /// nothing since has made that impossible).
    keep: bool,
    /// Requests answered on this connection so far.
    served: u64,
    /// The current request's payload was read to its declared end (its reply is not early).
    read_whole: bool,
    /// Bytes read behind the current request's payload: the start of the next request.
    pending: Vec<u8>,
    /// When the idle timer fires (moved on by every byte read or written; fixed in `Drain`).
    pub deadline: Instant,
    /// Registered for writable events too.
    pub writing: bool,
    /// Already in the loop's `again` queue.
    pub queued: bool,
}

/// What handling a connection asks the loop to do with it.
#[derive(PartialEq)]
pub(super) enum Next {
    Keep,
    /// Not done reading (budget spent): come back after the others.
    Again,
    Close,
}

impl Conn {
    pub fn new(sock: Sock, gen: u32, peer: IpAddr, deadline: Instant) -> Conn {
        Conn {
            sock,
            gen,
            peer,
            phase: header(),
            eof: false,
            keep: false,
            served: 0,
            read_whole: false,
            pending: Vec::new(),
            deadline,
            writing: false,
            queued: false,
        }
    }

    /// Whether to read the socket now: not after EOF, and not while a kept-alive request's
    /// reply waits to be written (see the module comment).
    fn wants_input(&self) -> bool {
        let reply_waits = self.keep && matches!(self.phase, Phase::Reply { .. });
        // A wasm request is not read while its pool job runs, once its batch is full, or after
        // its payload: the client's bytes wait in the socket (back-pressure).
        let wasm_waits = match &self.phase {
            Phase::Wasm(w) => w.out.is_some() || w.ended || w.inbox.len() >= BATCH,
            _ => false,
        };
        !(self.eof || reply_waits || wasm_waits)
    }

    /// The idle timer fired: whether the client is owed a TIMEOUT reply (it is mid-request)
    /// rather than a plain close (it is not reading its reply, is draining, or is a kept-alive
    /// connection waiting between requests).
    pub fn owes_timeout(&self) -> bool {
        match &self.phase {
            Phase::Header { got: 0, .. } => self.served == 0,
            Phase::Header { .. } => true,
            Phase::Body { f, .. } => {
                inc(&f.stats.timeouts);
                true
            }
            Phase::Wasm(w) => {
                inc(&w.f.stats.timeouts);
                true
            }
            Phase::Reply { .. } | Phase::Drain => false,
        }
    }
}

/// Read what the connection has (up to the budget), run it through its state machine, write
/// the reply as far as the socket takes it.
pub(super) fn drive(
    streams: &Streams,
    c: &mut Conn,
    buf: &mut [u8],
    scratch: &mut Vec<u32>,
    now: Instant,
    idle: Duration,
) -> Next {
    let mut read = 0usize;
    let mut more = false;
    while c.wants_input() {
        // How much this turn may read, and in what pieces: a costly chain (e.g. a K = 4096
        // insertion network) gets small turns so the connections beside it are not held up.
        let (turn, piece) = match &c.phase {
            Phase::Body { f, .. } => {
                let t = f.chain.turn_bytes();
                (t, t.min(CHUNK))
            }
            Phase::Header { .. } => (BUDGET, HEADER_READ),
            Phase::Wasm(w) => (BATCH, (BATCH - w.inbox.len()).min(CHUNK)),
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
        c.served += 1;
        if c.keep && !c.eof {
            return c.next_request(streams, scratch, now, idle);
        }
        if c.eof || c.read_whole {
            // Nothing of the request is left unread, so closing sends a FIN behind the reply
            // (an unread byte would make it a reset): no need to wait for the client's FIN.
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
                    if c.served > 0 {
                        inc(&streams.g.reused);
                    }
                    (c.phase, c.keep) = start(streams, &h);
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
                    c.keep = false; // the rest of the payload is not read
                    c.phase = reply(out);
                } else if complete {
                    finish(c, scratch);
                }
            }
            Phase::Wasm(w) => {
                let take = w.left.min(bytes.len() as u64) as usize;
                w.inbox.extend_from_slice(&bytes[..take]);
                w.f.stats.bytes.fetch_add(take as u64, Ordering::Relaxed);
                if w.left != STREAM_UNTIL_EOF {
                    w.left -= take as u64;
                    w.ended = w.left == 0;
                }
                bytes = &bytes[take..];
                if !bytes.is_empty() && c.keep {
                    // A pipelining client's next request: kept for when the reply is written.
                    c.pending.extend_from_slice(bytes);
                }
                return;
            }
            Phase::Reply { .. } if c.keep => {
                // A pipelining client's next request: kept for when the reply is written.
                c.pending.extend_from_slice(bytes);
                return;
            }
            Phase::Reply { .. } | Phase::Drain => return, // input after the answer: dropped
        }
    }
}

/// A complete header: look the function up and start its pipeline (or answer at once), and
/// whether the connection stays open after this request.
fn start(streams: &Streams, h: &[u8; STREAM_HEAD]) -> (Phase, bool) {
    let id = crate::wire::LambdaId::from_le_bytes(h[..8].try_into().unwrap());
    let raw = u64::from_le_bytes(h[8..].try_into().unwrap());
    // STREAM_UNTIL_EOF has the keep-alive bit set too: it stays "until EOF", never kept alive.
    let (len, keep) = match raw {
        STREAM_UNTIL_EOF => (raw, false),
        _ => (raw & !STREAM_KEEP_ALIVE, raw & STREAM_KEEP_ALIVE != 0),
    };
    let Some(f) = streams.lookup(id) else {
        inc(&streams.g.unknown);
        return (reply(reply_status(UNKNOWN)), false);
    };
    inc(&f.stats.calls);
    if len != STREAM_UNTIL_EOF && len % f.chain.elem_size() != 0 {
        inc(&f.stats.bad_request);
        return (reply(reply_status(BAD_REQUEST)), false);
    }
    let keep = keep && len != STREAM_UNTIL_EOF;
    if matches!(f.chain.reduce, Reduce::Wasm(_)) {
        let body = WasmBody {
            f,
            pipe: None,
            left: len,
            inbox: Vec::new(),
            out: None,
            ended: len == 0,
            started: false,
        };
        return (Phase::Wasm(Box::new(body)), keep);
    }
    let pipe = match f.chain.try_pipeline() {
        Ok(p) => p,
        Err(why) => {
            count_refusal(&f, &why);
            return (reply(reply_status(refusal_status(&why))), false);
        }
    };
    (Phase::Body { f, pipe, left: len }, keep)
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
    c.read_whole = true;
}

/// The connection's next pool job, when one is due (a wasm request: `offload`).
pub(super) fn job(c: &mut Conn, tok: usize) -> Option<Job> {
    let Phase::Wasm(w) = &mut c.phase else {
        return None;
    };
    if !w.due() {
        return None;
    }
    let cancel = Arc::new(AtomicBool::new(false));
    w.out = Some(cancel.clone());
    w.started = true;
    Some(Job {
        tok,
        f: w.f.clone(),
        pipe: w.pipe.take(),
        bytes: std::mem::take(&mut w.inbox),
        finish: w.ended,
        cancel,
    })
}

/// A pool job of this connection came back: take its pipeline back to read on, or answer.
/// False when the result is stale (the request was answered another way meanwhile).
pub(super) fn done(c: &mut Conn, d: Done) -> bool {
    let Phase::Wasm(w) = &mut c.phase else {
        return false;
    };
    if w.out.take().is_none() {
        return false;
    }
    let f = w.f.clone();
    if let Some(p) = &d.pipe {
        if !matches!(d.result, Ok(None)) {
            count_elements(&f, p);
        }
    }
    match d.result {
        Ok(None) => w.pipe = d.pipe,
        Ok(Some(out)) => {
            inc(&f.stats.ok);
            c.phase = reply(out);
            c.read_whole = true;
        }
        Err(why) => {
            count_refusal(&f, &why);
            c.keep = false; // the rest of the payload is not read
            c.phase = reply(reply_status(refusal_status(&why)));
        }
    }
    true
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
        Phase::Wasm(w) => {
            if w.left != STREAM_UNTIL_EOF {
                inc(&w.f.stats.bad_request); // truncated (dropping w cancels a job not yet run)
                c.phase = reply(reply_status(BAD_REQUEST));
            } else {
                w.ended = true; // the pool's next job finishes
            }
            None
        }
        Phase::Reply { .. } => None,
        Phase::Drain => Some(Next::Close),
    }
}

impl Conn {
    /// The reply of a kept-alive request is written: wait for the next header, starting with
    /// what already arrived behind the payload.
    fn next_request(
        &mut self,
        streams: &Streams,
        scratch: &mut Vec<u32>,
        now: Instant,
        idle: Duration,
    ) -> Next {
        self.keep = false; // until the next header asks again
        self.read_whole = false;
        self.phase = header();
        self.deadline = now + idle;
        let early = std::mem::take(&mut self.pending);
        consume(streams, self, &early, scratch);
        // Read on: epoll is edge-triggered, so input that arrived while the reply was being
        // written is not reported again.
        Next::Again
    }
}
