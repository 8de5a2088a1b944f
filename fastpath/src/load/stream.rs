//! `nearfaas-fastpath-load --stream`: latency of stream-function requests (docs/fastpath.md,
//! "Stream functions"), one TCP connection per request, closed loop with one request at a time.
//! A request's latency runs from `connect()` to the last byte of its reply (the TCP handshake,
//! the header and payload, the function, the reply), not the close, as the FPGA Top-K paper
//! measures it. With `--keep-alive` every request goes on one kept-alive connection
//! (`STREAM_KEEP_ALIVE`) and its latency runs from the first byte sent to the reply's last.
//!
//!   nearfaas-fastpath-load --stream --addr 127.0.0.1:9300 --id 5 --payload-bytes 4096 \
//!       [--text] [--item 4|8] [--keep-alive] [--duration S] [--warmup S] [--timeout-ms T] [--json]
//!
//! `--batch N [--batches R]` issues N requests at once instead (src/load/batch.rs).
//!
//! The payload is random u32 elements (little-endian), or with `--text` decimal numbers
//! separated by spaces (for a chain starting with `parse`), of exactly `--payload-bytes` bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::exit;
use std::time::{Duration, Instant};

use super::stats::{jnum, pct};
use crate::wire::{encode_stream_head, status_name, OK, STREAM_KEEP_ALIVE, STREAM_REPLY_HEAD};

pub struct Args {
    pub addr: SocketAddr,
    pub id: crate::wire::LambdaId,
    bytes: usize,
    text: bool,
    pub item: usize,
    keep_alive: bool,
    /// Requests issued at once (`--batch`; 0: one at a time, timed per request).
    pub batch: usize,
    /// Timed batches (`--batches`).
    pub batches: usize,
    duration: f64,
    warmup: f64,
    pub timeout: Duration,
    pub json: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("nearfaas-fastpath-load --stream: {msg}");
    eprintln!(
        "usage: nearfaas-fastpath-load --stream --addr HOST:PORT [--id N] [--payload-bytes N] [--text] \
         [--item 4|8] [--keep-alive] [--batch N [--batches R]] [--duration S] [--warmup S] [--timeout-ms T] [--json]"
    );
    exit(2)
}

fn parse(argv: &[String]) -> Args {
    let mut a = Args {
        addr: "127.0.0.1:0".parse().unwrap(),
        id: 1,
        bytes: 64,
        text: false,
        item: 4,
        keep_alive: false,
        batch: 0,
        batches: 10,
        duration: 3.0,
        warmup: 0.5,
        timeout: Duration::from_secs(2),
        json: false,
    };
    let mut have_addr = false;
    let mut i = 0;
    while i < argv.len() {
        let flag = argv[i].as_str();
        match flag {
            "--stream" | "--text" | "--json" | "--keep-alive" => {
                a.text |= flag == "--text";
                a.keep_alive |= flag == "--keep-alive";
                a.json |= flag == "--json";
                i += 1;
                continue;
            }
            "-h" | "--help" => usage("help"),
            _ => {}
        }
        let v = argv
            .get(i + 1)
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let num = |v: &str| -> f64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {v}")))
        };
        match flag {
            "--addr" => {
                a.addr = v
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut x| x.next())
                    .unwrap_or_else(|| usage(&format!("--addr: cannot resolve {v}")));
                have_addr = true;
            }
            "--id" => {
                a.id = v
                    .parse()
                    .unwrap_or_else(|_| usage(&format!("--id: not a u64 stream id: {v}")))
            }
            "--payload-bytes" => a.bytes = num(v) as usize,
            "--item" => a.item = num(v) as usize,
            "--batch" => a.batch = num(v) as usize,
            "--batches" => a.batches = (num(v) as usize).max(1),
            "--duration" => a.duration = num(v),
            "--warmup" => a.warmup = num(v),
            "--timeout-ms" => a.timeout = Duration::from_millis((num(v) as u64).max(1)),
            _ => usage(&format!("unknown flag {flag}")),
        }
        i += 2;
    }
    if !have_addr {
        usage("--addr is required");
    }
    if a.batch > 0 && a.keep_alive {
        usage("--batch opens a connection per request; it does not go with --keep-alive");
    }
    if a.item != 4 && a.item != 8 {
        usage("--item: 4 (topk) or 8 (frequent)");
    }
    a
}

/// The request's bytes: header, then `bytes` of payload.
fn request(a: &Args) -> Vec<u8> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut p = Vec::with_capacity(a.bytes);
    if a.text {
        while p.len() < a.bytes {
            let s = format!("{} ", next() % 1_000_000);
            p.extend_from_slice(s.as_bytes());
        }
        p.truncate(a.bytes);
    } else {
        while p.len() + 4 <= a.bytes {
            p.extend_from_slice(&(next() as u32).to_le_bytes());
        }
    }
    let len = if a.keep_alive {
        p.len() as u64 | STREAM_KEEP_ALIVE
    } else {
        p.len() as u64
    };
    let mut r = encode_stream_head(a.id, len).to_vec();
    r.extend_from_slice(&p);
    r
}

fn connect(a: &Args) -> Result<TcpStream, String> {
    let s = TcpStream::connect_timeout(&a.addr, a.timeout).map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(a.timeout));
    Ok(s)
}

/// One request: (status, time from connect — or, on a kept-alive connection `kept`, from the
/// first byte sent — to the reply's last byte), or an error (which drops `kept`).
fn one(
    a: &Args,
    req: &[u8],
    buf: &mut Vec<u8>,
    kept: &mut Option<TcpStream>,
) -> Result<(u8, Duration), String> {
    let mut t0 = Instant::now();
    let mut s = match kept.take() {
        Some(s) => s,
        None => {
            let s = connect(a)?;
            if a.keep_alive {
                t0 = Instant::now(); // a kept-alive request's time starts at its first byte
            }
            s
        }
    };
    s.write_all(req).map_err(|e| format!("send: {e}"))?;
    buf.clear();
    let mut want = STREAM_REPLY_HEAD;
    let mut chunk = [0u8; 16 << 10];
    while buf.len() < want {
        let n = s.read(&mut chunk).map_err(|e| format!("receive: {e}"))?;
        if n == 0 {
            return Err(format!("closed after {} reply bytes", buf.len()));
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() >= STREAM_REPLY_HEAD {
            let count = u32::from_le_bytes(buf[1..5].try_into().unwrap()) as usize;
            want = STREAM_REPLY_HEAD + count * a.item;
        }
    }
    let dt = t0.elapsed();
    if a.keep_alive && buf[0] == OK {
        *kept = Some(s);
    }
    Ok((buf[0], dt))
}

pub fn main(argv: &[String]) {
    let a = parse(argv);
    let req = request(&a);
    if a.batch > 0 {
        return super::batch::main(&a, &req);
    }
    let mut buf = Vec::new();
    let mut kept = None;
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(a.warmup.max(0.0));
    let end = measure_from + Duration::from_secs_f64(a.duration.max(0.0));
    let mut lat: Vec<u64> = Vec::new();
    let mut statuses = [0u64; 256];
    let mut errors = 0u64;
    let mut last_error = String::new();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let measuring = now >= measure_from;
        match one(&a, &req, &mut buf, &mut kept) {
            Ok((st, dt)) if measuring => {
                statuses[st as usize] += 1;
                if st == OK {
                    lat.push(dt.as_nanos() as u64);
                }
            }
            Ok(_) => {}
            Err(e) => {
                errors += 1;
                last_error = e;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    lat.sort_unstable();
    let secs = a.duration.max(1e-9);
    let by_status: Vec<String> = statuses
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(s, n)| format!("\"{}\": {n}", status_name(s as u8)))
        .collect();
    let mean = if lat.is_empty() {
        f64::NAN
    } else {
        lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1000.0
    };
    if a.json {
        println!(
            "{{\"mode\": \"stream\", \"id\": {}, \"payload_bytes\": {}, \"text\": {}, \"keep_alive\": {}, \"ok\": {}, \"statuses\": {{{}}}, \
             \"errors\": {errors}, \"p50_us\": {}, \"p90_us\": {}, \"p99_us\": {}, \"mean_us\": {}, \"req_per_s\": {}}}",
            a.id,
            req.len() - 12,
            a.text,
            a.keep_alive,
            lat.len(),
            by_status.join(", "),
            jnum(pct(&lat, 50.0)),
            jnum(pct(&lat, 90.0)),
            jnum(pct(&lat, 99.0)),
            jnum(mean),
            jnum(lat.len() as f64 / secs),
        );
    } else {
        println!(
            "stream id {} payload {} B{}{}: {} OK, p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, {:.0} req/s; statuses {{{}}}, {errors} errors",
            a.id,
            req.len() - 12,
            if a.text { " (text)" } else { "" },
            if a.keep_alive { ", kept alive" } else { "" },
            lat.len(),
            pct(&lat, 50.0),
            pct(&lat, 90.0),
            pct(&lat, 99.0),
            lat.len() as f64 / secs,
            by_status.join(", "),
        );
    }
    if errors > 0 {
        eprintln!("nearfaas-fastpath-load --stream: {errors} failed requests; last: {last_error}");
    }
}
