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
//! Uses only std and libc.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::io::AsRawFd;
use std::process::exit;
use std::time::{Duration, Instant};

const PROBE_TAG: u64 = 0x5a17_c0de_9e3b_0001;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Match {
    Auto,
    Tag,
    Fifo,
}

struct Args {
    addr: SocketAddr,
    ids: Vec<u32>,
    payload: Vec<u8>,
    outstanding: usize,
    duration: f64,
    warmup: f64,
    json: bool,
    rate: f64,
    timeout: Duration,
    matching: Match,
    max_samples: usize,
}

fn usage(msg: &str) -> ! {
    eprintln!("nearfaas-fastpath-load: {msg}");
    eprintln!(
        "usage: nearfaas-fastpath-load --addr HOST:PORT [--ids 1,2,3] [--payload-bytes N | --payload TEXT] \
         [--outstanding K] [--duration S] [--warmup S] [--rate R] [--timeout-ms T] [--match auto|tag|fifo] [--json]"
    );
    exit(2)
}

fn parse_args() -> Args {
    let mut addr = None;
    let mut ids = vec![1u32];
    let mut payload_bytes: Option<usize> = None;
    let mut payload_text: Option<String> = None;
    let mut outstanding = 1usize;
    let mut duration = 5.0;
    let mut warmup = 1.0;
    let mut json = false;
    let mut rate = 0.0;
    let mut timeout_ms = 200u64;
    let mut matching = Match::Auto;
    let mut max_samples = 20_000_000usize;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let flag = argv[i].as_str();
        if flag == "--json" {
            json = true;
            i += 1;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            usage("help");
        }
        let value = argv
            .get(i + 1)
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
            .clone();
        let num = |v: &str| -> f64 {
            v.parse::<f64>()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {v}")))
        };
        match flag {
            "--addr" => {
                addr = Some(
                    value
                        .to_socket_addrs()
                        .ok()
                        .and_then(|mut a| a.next())
                        .unwrap_or_else(|| usage(&format!("--addr: cannot resolve {value}"))),
                )
            }
            "--ids" => {
                ids = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.trim()
                            .parse::<u32>()
                            .unwrap_or_else(|_| usage(&format!("--ids: not a u32: {s}")))
                    })
                    .collect();
                if ids.is_empty() {
                    usage("--ids: empty");
                }
            }
            "--payload-bytes" => payload_bytes = Some(num(&value) as usize),
            "--payload" => payload_text = Some(value),
            "--outstanding" => outstanding = (num(&value) as usize).max(1),
            "--duration" => duration = num(&value),
            "--warmup" => warmup = num(&value),
            "--rate" => rate = num(&value),
            "--timeout-ms" => timeout_ms = num(&value) as u64,
            "--max-samples" => max_samples = num(&value) as usize,
            "--match" => {
                matching = match value.as_str() {
                    "auto" => Match::Auto,
                    "tag" => Match::Tag,
                    "fifo" => Match::Fifo,
                    _ => usage("--match: auto, tag or fifo"),
                }
            }
            _ => usage(&format!("unknown flag {flag}")),
        }
        i += 2;
    }
    let payload = match (payload_text, payload_bytes) {
        (Some(_), Some(_)) => usage("give --payload or --payload-bytes, not both"),
        (Some(t), None) => t.into_bytes(),
        (None, Some(n)) => (0..n).map(|k| b'a' + (k % 26) as u8).collect(),
        (None, None) => (0..16).map(|k| b'a' + (k % 26) as u8).collect(),
    };
    if payload.len() + 4 > 65_507 {
        usage("payload larger than a datagram");
    }
    Args {
        addr: addr.unwrap_or_else(|| usage("--addr is required")),
        ids,
        payload,
        outstanding,
        duration,
        warmup,
        json,
        rate,
        timeout: Duration::from_millis(timeout_ms.max(1)),
        matching,
        max_samples,
    }
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

struct Stats {
    lat_ns: Vec<u64>,
    per_id_lat: Vec<Vec<u64>>,
    statuses: [u64; 256],
    timeouts: u64,
    malformed: u64,
    stale: u64,
    skipped: u64,
    sent: u64,
    max_samples: usize,
    dropped_samples: u64,
}

impl Stats {
    fn new(n_ids: usize, max_samples: usize, expect: usize) -> Stats {
        let cap = expect.min(max_samples);
        Stats {
            lat_ns: Vec::with_capacity(cap),
            per_id_lat: (0..n_ids)
                .map(|_| Vec::with_capacity(cap / n_ids + 16))
                .collect(),
            statuses: [0; 256],
            timeouts: 0,
            malformed: 0,
            stale: 0,
            skipped: 0,
            sent: 0,
            max_samples,
            dropped_samples: 0,
        }
    }

    #[inline]
    fn record(&mut self, id_index: usize, status: u8, ns: u64) {
        self.statuses[status as usize] += 1;
        if status <= 1 {
            if self.lat_ns.len() < self.max_samples {
                self.lat_ns.push(ns);
                self.per_id_lat[id_index].push(ns);
            } else {
                self.dropped_samples += 1;
            }
        }
    }
}

fn pct(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((q / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)] as f64 / 1000.0
}

fn jnum(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".to_string()
    }
}

struct Slot {
    seq: u64,
    sent: Instant,
    busy: bool,
    measured: bool,
}

struct Gen {
    sock: UdpSocket,
    ids: Vec<u32>,
    offsets: Vec<Option<usize>>, // per id index: where the tag sits in the reply payload (tag mode)
    tag: bool,
    buf: Vec<u8>,  // the request being built: id + payload
    rbuf: Vec<u8>, // receive buffer
    rr: usize,     // round-robin position over ids
    k: usize,
    slots: Vec<Slot>,                     // tag mode
    fifo: Vec<VecDeque<(Instant, bool)>>, // fifo mode: per id index, outstanding send times (measured?)
    fifo_total: usize,
    timeout: Duration,
}

impl Gen {
    fn id_index(&self, id: u32) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }

    #[inline]
    fn send_raw(&mut self, id_index: usize, seq: Option<u64>) -> bool {
        let id = self.ids[id_index];
        self.buf[0..4].copy_from_slice(&id.to_be_bytes());
        if let Some(s) = seq {
            self.buf[4..12].copy_from_slice(&s.to_le_bytes());
        }
        loop {
            match self.sock.send(&self.buf) {
                Ok(_) => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // ECONNREFUSED (an ICMP port unreachable from an earlier datagram) or a full buffer
                Err(_) => return false,
            }
        }
    }

    /// Sends the next request (round robin over the IDs) in slot `s` (tag mode) or appends it to
    /// the FIFO of its ID.
    #[inline]
    fn send_next(&mut self, s: usize, measured: bool, stats: &mut Stats) {
        let idx = self.rr % self.ids.len();
        self.rr = self.rr.wrapping_add(1);
        if self.tag {
            let seq = self.slots[s].seq + self.k as u64;
            let now = Instant::now();
            self.slots[s] = Slot {
                seq,
                sent: now,
                busy: true,
                measured,
            };
            self.send_raw(idx, Some(seq));
        } else {
            let now = Instant::now();
            self.fifo[idx].push_back((now, measured));
            self.fifo_total += 1;
            self.send_raw(idx, None);
        }
        stats.sent += 1;
    }

    /// Handles one received datagram; returns the slot freed (tag mode: its index; fifo: 0), if any.
    #[inline]
    fn on_reply(
        &mut self,
        n: usize,
        now: Instant,
        stats: &mut Stats,
        recording: bool,
    ) -> Option<usize> {
        if n < 5 {
            stats.malformed += 1;
            return None;
        }
        let id = u32::from_be_bytes([self.rbuf[0], self.rbuf[1], self.rbuf[2], self.rbuf[3]]);
        let status = self.rbuf[4];
        let idx = match self.id_index(id) {
            Some(i) => i,
            None => {
                stats.malformed += 1;
                return None;
            }
        };
        if self.tag {
            let seq = match self.offsets[idx] {
                Some(off) if n >= 5 + off + 8 => {
                    let p = 5 + off;
                    u64::from_le_bytes(self.rbuf[p..p + 8].try_into().unwrap())
                }
                _ => {
                    // a reply without the echo (an error status): cannot be matched; its request
                    // will time out and be resent.
                    if recording {
                        stats.statuses[status as usize] += 1;
                    }
                    return None;
                }
            };
            let s = (seq % self.k as u64) as usize;
            let slot = &mut self.slots[s];
            if !slot.busy || slot.seq != seq {
                stats.stale += 1;
                return None;
            }
            slot.busy = false;
            if slot.measured && recording {
                stats.record(idx, status, now.duration_since(slot.sent).as_nanos() as u64);
            }
            Some(s)
        } else {
            match self.fifo[idx].pop_front() {
                Some((sent, measured)) => {
                    self.fifo_total -= 1;
                    if measured && recording {
                        stats.record(idx, status, now.duration_since(sent).as_nanos() as u64);
                    }
                    Some(0)
                }
                None => {
                    stats.stale += 1;
                    None
                }
            }
        }
    }

    /// Requests older than the timeout: counted (when measured) and forgotten; returns how many
    /// slots were freed.
    fn expire(&mut self, now: Instant, stats: &mut Stats, recording: bool, freed: &mut Vec<usize>) {
        if self.tag {
            for (s, slot) in self.slots.iter_mut().enumerate() {
                if slot.busy && now.duration_since(slot.sent) > self.timeout {
                    slot.busy = false;
                    if slot.measured && recording {
                        stats.timeouts += 1;
                    }
                    freed.push(s);
                }
            }
        } else {
            for q in self.fifo.iter_mut() {
                while let Some(&(sent, measured)) = q.front() {
                    if now.duration_since(sent) > self.timeout {
                        q.pop_front();
                        self.fifo_total -= 1;
                        if measured && recording {
                            stats.timeouts += 1;
                        }
                        freed.push(0);
                    } else {
                        break;
                    }
                }
            }
        }
    }
}

/// Sends one tagged probe to each ID and looks for the tag in the reply: its offset, or None.
fn probe(sock: &UdpSocket, ids: &[u32], payload: &[u8]) -> Vec<Option<usize>> {
    let mut out = Vec::new();
    let mut rbuf = vec![0u8; 65_536 + 64];
    let _ = sock.set_read_timeout(Some(Duration::from_millis(300)));
    for (k, &id) in ids.iter().enumerate() {
        let tag = PROBE_TAG + k as u64;
        let mut req = Vec::with_capacity(4 + payload.len().max(8));
        req.extend_from_slice(&id.to_be_bytes());
        req.extend_from_slice(payload);
        while req.len() < 12 {
            req.push(b'a');
        }
        req[4..12].copy_from_slice(&tag.to_le_bytes());
        let mut found = None;
        'tries: for _ in 0..3 {
            if sock.send(&req).is_err() {
                continue;
            }
            let deadline = Instant::now() + Duration::from_millis(300);
            while Instant::now() < deadline {
                match sock.recv(&mut rbuf) {
                    Ok(n) if n >= 5 => {
                        let rid = u32::from_be_bytes([rbuf[0], rbuf[1], rbuf[2], rbuf[3]]);
                        if rid != id {
                            continue;
                        }
                        let body = &rbuf[5..n];
                        let t = tag.to_le_bytes();
                        found = body.windows(8).position(|w| w == t);
                        break 'tries;
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        out.push(found);
    }
    // drain late replies
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    while sock.recv(&mut rbuf).is_ok() {}
    out
}

fn main() {
    let args = parse_args();
    let sock = UdpSocket::bind(if args.addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .unwrap_or_else(|e| usage(&format!("bind: {e}")));
    sock.connect(args.addr)
        .unwrap_or_else(|e| usage(&format!("connect {}: {e}", args.addr)));
    set_bufsize(&sock, 4 << 20);

    let mut matching = args.matching;
    let mut offsets = vec![None; args.ids.len()];
    if matching != Match::Fifo {
        offsets = probe(&sock, &args.ids, &args.payload);
        let all = offsets.iter().all(|o| o.is_some());
        if matching == Match::Tag && !all {
            eprintln!("nearfaas-fastpath-load: --match tag: the replies of some IDs do not echo the payload ({offsets:?})");
            exit(1);
        }
        matching = if all { Match::Tag } else { Match::Fifo };
    }
    let tag = matching == Match::Tag;
    let mut payload = args.payload.clone();
    if tag && payload.len() < 8 {
        payload.resize(8, b'a');
    }
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&[0, 0, 0, 0]);
    buf.extend_from_slice(&payload);

    let k = args.outstanding;
    let expect = ((args.duration.max(0.0) + 1.0) * 300_000.0) as usize;
    let mut stats = Stats::new(args.ids.len(), args.max_samples, expect);
    let mut g = Gen {
        sock,
        ids: args.ids.clone(),
        offsets,
        tag,
        buf,
        rbuf: vec![0u8; 65_536 + 64],
        rr: 0,
        k,
        // slot s carries sequence numbers s, s+K, s+2K, ... (seq % K == s); the first send adds K
        slots: (0..k)
            .map(|s| Slot {
                seq: s as u64,
                sent: Instant::now(),
                busy: false,
                measured: false,
            })
            .collect(),
        fifo: (0..args.ids.len())
            .map(|_| VecDeque::with_capacity(k))
            .collect(),
        fifo_total: 0,
        timeout: args.timeout,
    };

    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup.max(0.0));
    let end = measure_from + Duration::from_secs_f64(args.duration.max(0.0));
    let mut freed: Vec<usize> = Vec::with_capacity(k);
    let mut last_expire = start;
    let open_loop = args.rate > 0.0;

    if !open_loop {
        // Closed loop: K outstanding; the receive timeout lets lost datagrams be recovered.
        let _ = g.sock.set_read_timeout(Some(Duration::from_millis(5)));
        for s in 0..k {
            g.send_next(s, start >= measure_from, &mut stats);
        }
        loop {
            let r = g.sock.recv(&mut g.rbuf);
            let now = Instant::now();
            if now >= end {
                break;
            }
            let measuring = now >= measure_from;
            match r {
                Ok(n) => {
                    if let Some(s) = g.on_reply(n, now, &mut stats, true) {
                        g.send_next(s, measuring, &mut stats);
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
            if now.duration_since(last_expire) >= Duration::from_millis(2) {
                last_expire = now;
                freed.clear();
                g.expire(now, &mut stats, true, &mut freed);
                for i in 0..freed.len() {
                    let s = freed[i];
                    g.send_next(s, measuring, &mut stats);
                }
            }
        }
    } else {
        // Open loop: a schedule of R requests per second; replies are read in between.
        g.sock.set_nonblocking(true).unwrap();
        let interval = Duration::from_secs_f64(1.0 / args.rate);
        let mut next = start;
        let mut free_slots: Vec<usize> = (0..k).rev().collect();
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            while next <= now {
                let measuring = next >= measure_from;
                if tag {
                    match free_slots.pop() {
                        Some(s) => g.send_next(s, measuring, &mut stats),
                        None => {
                            if measuring {
                                stats.skipped += 1
                            }
                        }
                    }
                } else if g.fifo_total < k {
                    g.send_next(0, measuring, &mut stats);
                } else if measuring {
                    stats.skipped += 1;
                }
                next += interval;
            }
            loop {
                match g.sock.recv(&mut g.rbuf) {
                    Ok(n) => {
                        let t = Instant::now();
                        if let Some(s) = g.on_reply(n, t, &mut stats, true) {
                            if tag {
                                free_slots.push(s);
                            }
                        }
                    }
                    Err(_) => break,
                }
            }
            if now.duration_since(last_expire) >= Duration::from_millis(2) {
                last_expire = now;
                freed.clear();
                g.expire(now, &mut stats, true, &mut freed);
                if tag {
                    free_slots.extend_from_slice(&freed);
                }
            }
            std::hint::spin_loop();
        }
    }
    let elapsed = end.duration_since(measure_from).as_secs_f64();

    // ---- report ------------------------------------------------------------------------------
    let mut all = std::mem::take(&mut stats.lat_ns);
    all.sort_unstable();
    let n = all.len() as u64;
    let mean = if n > 0 {
        all.iter().map(|&x| x as f64).sum::<f64>() / n as f64 / 1000.0
    } else {
        f64::NAN
    };
    let not_ok: u64 = stats
        .statuses
        .iter()
        .enumerate()
        .filter(|(s, _)| *s > 1)
        .map(|(_, c)| *c)
        .sum();
    let errors = stats.timeouts + stats.malformed + not_ok;
    let completed: u64 = stats.statuses.iter().sum();
    let rps = n as f64 / elapsed;
    let mut statuses = Vec::new();
    for (s, &c) in stats.statuses.iter().enumerate() {
        if c > 0 {
            statuses.push(format!("\"{s}\": {c}"));
        }
    }
    let mut per_id = Vec::new();
    for (i, v) in stats.per_id_lat.iter_mut().enumerate() {
        v.sort_unstable();
        per_id.push(format!(
            "\"{}\": {{\"count\": {}, \"p50_us\": {}, \"p99_us\": {}}}",
            args.ids[i],
            v.len(),
            jnum(pct(v, 50.0)),
            jnum(pct(v, 99.0))
        ));
    }
    if args.json {
        println!(
            "{{\"requests\": {n}, \"completed\": {completed}, \"errors\": {errors}, \"timeouts\": {}, \"malformed\": {}, \"stale\": {}, \
             \"skipped\": {}, \"sent\": {}, \"statuses\": {{{}}}, \"p50_us\": {}, \"p90_us\": {}, \"p99_us\": {}, \"p999_us\": {}, \
             \"mean_us\": {}, \"min_us\": {}, \"max_us\": {}, \"req_per_s\": {}, \"duration_s\": {}, \"outstanding\": {k}, \
             \"rate\": {}, \"match\": \"{}\", \"payload_bytes\": {}, \"per_id\": {{{}}}, \"dropped_samples\": {}}}",
            stats.timeouts,
            stats.malformed,
            stats.stale,
            stats.skipped,
            stats.sent,
            statuses.join(", "),
            jnum(pct(&all, 50.0)),
            jnum(pct(&all, 90.0)),
            jnum(pct(&all, 99.0)),
            jnum(pct(&all, 99.9)),
            jnum(mean),
            jnum(pct(&all, 0.0)),
            jnum(pct(&all, 100.0)),
            jnum(rps),
            jnum(elapsed),
            jnum(args.rate),
            if tag { "tag" } else { "fifo" },
            payload.len(),
            per_id.join(", "),
            stats.dropped_samples,
        );
    } else {
        println!(
            "{n} requests in {elapsed:.2} s: {rps:.0} req/s, p50 {:.1} us, p99 {:.1} us, mean {:.1} us; errors {errors} \
             (timeouts {}), match {}",
            pct(&all, 50.0),
            pct(&all, 99.0),
            mean,
            stats.timeouts,
            if tag { "tag" } else { "fifo" }
        );
    }
}
