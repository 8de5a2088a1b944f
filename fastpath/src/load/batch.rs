//! `nearfaas-fastpath-load --stream --batch N`: the FPGA paper's concurrency measurement with a
//! native client. N requests are issued at once (N non-blocking connects, each sending its
//! request as soon as its socket is writable), and the batch's latency runs from the first
//! connect to the last reply's last byte; the per-request time is that latency divided by N, as
//! the paper divides it. `--batches R` batches are timed after one untimed batch; the report
//! gives their median and mean. One thread and one epoll set (mio) serve all N connections, so
//! the client's own cost per request stays small next to the server's.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use super::stats::jnum;
use super::stream::Args;
use crate::wire::{OK, STREAM_REPLY_HEAD};

struct Req {
    sock: TcpStream,
    sent: usize,
    got: Vec<u8>,
    done: bool,
}

/// One batch of `n` requests: the per-request time (batch latency / n), or an error.
fn batch(a: &Args, req: &[u8], n: usize) -> Result<Duration, String> {
    let mut poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let t0 = Instant::now();
    let mut reqs = Vec::with_capacity(n);
    for i in 0..n {
        let mut sock = TcpStream::connect(a.addr).map_err(|e| format!("connect: {e}"))?;
        poll.registry()
            .register(&mut sock, Token(i), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("register: {e}"))?;
        reqs.push(Req {
            sock,
            sent: 0,
            got: Vec::with_capacity(STREAM_REPLY_HEAD + 16 * a.item),
            done: false,
        });
    }
    let mut left = n;
    let mut events = Events::with_capacity(n.max(16));
    let mut chunk = [0u8; 16 << 10];
    while left > 0 {
        let wait = a
            .timeout
            .checked_sub(t0.elapsed())
            .ok_or("batch timed out")?;
        poll.poll(&mut events, Some(wait))
            .map_err(|e| format!("poll: {e}"))?;
        for ev in events.iter() {
            let r = &mut reqs[ev.token().0];
            if r.done {
                continue;
            }
            while r.sent < req.len() {
                match r.sock.write(&req[r.sent..]) {
                    Ok(k) => r.sent += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::NotConnected => break, // connect in flight
                    Err(e) => return Err(format!("send: {e}")),
                }
            }
            loop {
                match r.sock.read(&mut chunk) {
                    Ok(0) => return Err(format!("closed after {} reply bytes", r.got.len())),
                    Ok(k) => r.got.extend_from_slice(&chunk[..k]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::NotConnected => break,
                    Err(e) => return Err(format!("receive: {e}")),
                }
                if complete(&r.got, a.item) {
                    break;
                }
            }
            if complete(&r.got, a.item) {
                if r.got[0] != OK {
                    return Err(format!("status {} in a batch", r.got[0]));
                }
                r.done = true;
                left -= 1;
            }
        }
    }
    Ok(t0.elapsed() / n as u32)
}

fn complete(got: &[u8], item: usize) -> bool {
    got.len() >= STREAM_REPLY_HEAD && {
        let count = u32::from_le_bytes(got[1..5].try_into().unwrap()) as usize;
        got.len() >= STREAM_REPLY_HEAD + count * item
    }
}

/// Run `--batches` timed batches of `--batch` requests and print the report.
pub fn main(a: &Args, req: &[u8]) {
    let n = a.batch;
    let mut per: Vec<f64> = Vec::with_capacity(a.batches);
    let mut errors = 0u64;
    let mut last_error = String::new();
    for i in 0..=a.batches {
        match batch(a, req, n) {
            Ok(d) if i > 0 => per.push(d.as_nanos() as f64 / 1000.0),
            Ok(_) => {} // the untimed first batch
            Err(e) => {
                errors += 1;
                last_error = e;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    let mut sorted = per.clone();
    sorted.sort_by(|x, y| x.total_cmp(y));
    let median = match sorted.len() {
        0 => f64::NAN,
        k if k % 2 == 1 => sorted[k / 2],
        k => (sorted[k / 2 - 1] + sorted[k / 2]) / 2.0,
    };
    let mean = per.iter().sum::<f64>() / per.len().max(1) as f64;
    if a.json {
        println!(
            "{{\"mode\": \"stream-batch\", \"id\": {}, \"payload_bytes\": {}, \"n\": {n}, \"batches\": {}, \
             \"errors\": {errors}, \"per_request_us\": {}, \"per_request_mean_us\": {}}}",
            a.id,
            req.len() - 12,
            per.len(),
            jnum(median),
            jnum(if per.is_empty() { f64::NAN } else { mean }),
        );
    } else {
        println!(
            "stream id {} payload {} B, batches of {n}: per-request time {median:.1} us (median of {}), mean {mean:.1} us; {errors} errors",
            a.id,
            req.len() - 12,
            per.len(),
        );
    }
    if errors > 0 {
        eprintln!(
            "nearfaas-fastpath-load --stream --batch: {errors} failed batches; last: {last_error}"
        );
    }
}
