//! nearfaas-fastpath-load: a UDP load generator for the fast path's wire format
//! (request: lambda_id u32 BE + payload; reply: lambda_id u32 BE, status u8, payload).
//!
//! Closed loop (default): K requests outstanding on one connected socket; each reply sends the
//! next request of its slot. Open loop (`--rate R`): requests are sent on a schedule of R per
//! second whatever the replies do (at most K outstanding; a request whose slot is still busy is
//! counted as `skipped`).
//!
//! Matching replies to requests: the reply echoes only the lambda ID, so with `--match tag`
//! (the default `auto` picks it when it works) an 8-byte sequence number is written at the start
//! of the payload, and found again in the reply at the offset a probe request discovered (web
//! lambdas echo the payload after their prefix). With `--match fifo` (lambdas that do not echo,
//! like kv or spin) each reply completes the oldest outstanding request of its ID: exact with one
//! outstanding, approximate with more (replies may overtake).
//!
//!   nearfaas-fastpath-load --addr 127.0.0.1:9000 --ids 1,2,3 --payload-bytes 16 --outstanding 32 \
//!       --duration 5 --warmup 1 --json
//!
//! Uses only std and libc (and the crate's wire format, src/wire.rs). `--stream` measures stream
//! functions instead (src/load/stream.rs); `--stream-floor ADDR` serves the TCP floor they are
//! compared with (src/load/floor.rs).

mod args;
pub mod batch;
pub mod floor;
mod gen;
mod stats;
pub mod stream;

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::unix::io::AsRawFd;
use std::process::exit;
use std::time::{Duration, Instant};

pub use args::{parse_args, usage, Args, Match};
pub use gen::{probe, Gen, TAG_LEN};
pub use stats::{jnum, pct, report, Setup, Stats};

/// How often outstanding requests are checked for timeouts.
const EXPIRE_EVERY: Duration = Duration::from_millis(2);

/// The run's clock: warmup from `start`, measured from `measure_from` until `end`.
struct Window {
    start: Instant,
    measure_from: Instant,
    end: Instant,
}

/// Run the load generator as the command line says and print its report.
pub fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--stream-floor") {
        return floor::main(&argv); // the bare-TCP server stream latencies are read beside
    }
    if argv.iter().any(|a| a == "--stream") {
        return stream::main(&argv); // stream functions: one TCP connection per request
    }
    let args = parse_args();
    let sock = connect(&args);
    let (tag, offsets) = pick_matching(&sock, &args);
    let mut payload = args.payload.clone();
    if tag && payload.len() < TAG_LEN {
        payload.resize(TAG_LEN, b'a');
    }
    let k = args.outstanding;
    let mut g = Gen::new(sock, &args.ids, &payload, offsets, tag, k, args.timeout);
    let expect = ((args.duration.max(0.0) + 1.0) * 300_000.0) as usize;
    let mut stats = Stats::new(args.ids.len(), args.max_samples, expect);
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup.max(0.0));
    let w = Window {
        start,
        measure_from,
        end: measure_from + Duration::from_secs_f64(args.duration.max(0.0)),
    };
    if args.rate > 0.0 {
        open_loop(&mut g, &mut stats, &w, k, args.rate);
    } else {
        closed_loop(&mut g, &mut stats, &w, k, args.poll);
    }
    let setup = Setup {
        ids: &args.ids,
        json: args.json,
        outstanding: k,
        rate: args.rate,
        tag,
        payload_bytes: g.payload_len(),
        elapsed: w.end.duration_since(w.measure_from).as_secs_f64(),
    };
    report(stats, &setup);
}

/// A UDP socket connected to `--addr`, with 4 MiB buffers.
fn connect(args: &Args) -> UdpSocket {
    let sock = UdpSocket::bind(if args.addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .unwrap_or_else(|e| usage(&format!("bind: {e}")));
    sock.connect(args.addr)
        .unwrap_or_else(|e| usage(&format!("connect {}: {e}", args.addr)));
    set_bufsize(&sock, 4 << 20);
    sock
}

fn set_bufsize(sock: &UdpSocket, bytes: i32) {
    let fd = sock.as_raw_fd();
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &bytes as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
        }
    }
}

/// Tag or fifo matching (`--match auto` probes whether every ID's replies echo the tag), and
/// where each ID's replies carry the tag.
fn pick_matching(sock: &UdpSocket, args: &Args) -> (bool, Vec<Option<usize>>) {
    if args.matching == Match::Fifo {
        return (false, vec![None; args.ids.len()]);
    }
    let offsets = probe(sock, &args.ids, &args.payload);
    let all = offsets.iter().all(|o| o.is_some());
    if args.matching == Match::Tag && !all {
        eprintln!("nearfaas-fastpath-load: --match tag: the replies of some IDs do not echo the payload ({offsets:?})");
        exit(1);
    }
    (all, offsets)
}

/// Closed loop: K outstanding; each reply sends the next request of its slot, and the receive
/// timeout lets lost datagrams be recovered.
fn closed_loop(g: &mut Gen, stats: &mut Stats, w: &Window, k: usize, poll: crate::poll::Policy) {
    let _ = g.sock.set_read_timeout(Some(Duration::from_millis(5)));
    for s in 0..k {
        g.send_next(s, w.start >= w.measure_from, stats);
    }
    let mut freed: Vec<usize> = Vec::with_capacity(k);
    let mut last_expire = w.start;
    let mut poller = crate::poll::Poller::new(poll);
    let fd = g.sock.as_raw_fd();
    loop {
        // a reply is usually a few µs away: spin on a non-blocking receive before sleeping in
        // one (src/poll.rs), so the reply does not wait for this thread's wake-up
        poller.idle(Instant::now());
        let (spun, waited) =
            crate::poll::spin_for(poller.budget(), || recv_nowait(fd, &mut g.rbuf));
        let r = match spun {
            Some(n) => Ok(n),
            None => g.sock.recv(&mut g.rbuf),
        };
        poller.arrived(Instant::now(), waited, spun.is_some());
        let now = Instant::now();
        if now >= w.end {
            break;
        }
        let measuring = now >= w.measure_from;
        match r {
            Ok(n) => {
                if let Some(s) = g.on_reply(n, now, stats, true) {
                    g.send_next(s, measuring, stats);
                }
            }
            Err(e)
                if e.kind() == ErrorKind::WouldBlock
                    || e.kind() == ErrorKind::TimedOut
                    || e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                // ECONNREFUSED: nobody listens (yet); pause a little, the timeouts resend
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if now.duration_since(last_expire) >= EXPIRE_EVERY {
            last_expire = now;
            freed.clear();
            g.expire(now, stats, true, &mut freed);
            for &s in &freed {
                g.send_next(s, measuring, stats);
            }
        }
    }
}

/// Open loop: a schedule of `rate` requests per second whatever the replies do (at most K
/// outstanding; a request whose slot is still busy is counted as skipped); replies are read in
/// between.
fn open_loop(g: &mut Gen, stats: &mut Stats, w: &Window, k: usize, rate: f64) {
    g.sock.set_nonblocking(true).unwrap();
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut next = w.start;
    let mut free_slots: Vec<usize> = (0..k).rev().collect();
    let mut freed: Vec<usize> = Vec::with_capacity(k);
    let mut last_expire = w.start;
    loop {
        let now = Instant::now();
        if now >= w.end {
            break;
        }
        while next <= now {
            send_scheduled(g, stats, next >= w.measure_from, k, &mut free_slots);
            next += interval;
        }
        while let Ok(n) = g.sock.recv(&mut g.rbuf) {
            let t = Instant::now();
            if let Some(s) = g.on_reply(n, t, stats, true) {
                if g.tag {
                    free_slots.push(s);
                }
            }
        }
        if now.duration_since(last_expire) >= EXPIRE_EVERY {
            last_expire = now;
            freed.clear();
            g.expire(now, stats, true, &mut freed);
            if g.tag {
                free_slots.extend_from_slice(&freed);
            }
        }
        std::hint::spin_loop();
    }
}

/// One request of the open loop's schedule: sent in a free slot, or counted as skipped.
fn send_scheduled(
    g: &mut Gen,
    stats: &mut Stats,
    measuring: bool,
    k: usize,
    free_slots: &mut Vec<usize>,
) {
    if g.tag {
        match free_slots.pop() {
            Some(s) => g.send_next(s, measuring, stats),
            None => {
                if measuring {
                    stats.skipped += 1
                }
            }
        }
    } else if g.fifo_total < k {
        g.send_next(0, measuring, stats);
    } else if measuring {
        stats.skipped += 1;
    }
}

/// One datagram already waiting, without blocking.
fn recv_nowait(fd: i32, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: buf is valid for its length; the kernel writes at most that.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    (n >= 0).then_some(n as usize)
}
