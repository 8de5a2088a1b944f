//! The load generator's command line.

use std::net::{SocketAddr, ToSocketAddrs};
use std::process::exit;
use std::time::Duration;

use crate::wire::{ID_LEN, MAX_DGRAM};

/// How replies are matched to requests (see the module docs).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Match {
    Auto,
    Tag,
    Fifo,
}

pub struct Args {
    pub addr: SocketAddr,
    pub ids: Vec<crate::wire::LambdaId>,
    pub payload: Vec<u8>,
    pub outstanding: usize,
    pub duration: f64,
    pub warmup: f64,
    pub json: bool,
    pub rate: f64,
    pub timeout: Duration,
    pub matching: Match,
    pub max_samples: usize,
    /// How the receive loop waits for replies (src/poll.rs): spin, then block.
    pub poll: crate::poll::Policy,
}

/// Print `msg` and the usage to stderr; exit 2.
pub fn usage(msg: &str) -> ! {
    eprintln!("nearfaas-fastpath-load: {msg}");
    eprintln!(
        "usage: nearfaas-fastpath-load --addr HOST:PORT [--ids 1,2,3] [--payload-bytes N | --payload TEXT] \
         [--outstanding K] [--duration S] [--warmup S] [--rate R] [--timeout-ms T] [--match auto|tag|fifo] [--poll adaptive|spin|block] [--json]"
    );
    exit(2)
}

/// The flags' values before they are checked together.
struct Raw {
    addr: Option<SocketAddr>,
    ids: Vec<crate::wire::LambdaId>,
    payload_bytes: Option<usize>,
    payload_text: Option<String>,
    outstanding: usize,
    duration: f64,
    warmup: f64,
    json: bool,
    rate: f64,
    timeout_ms: u64,
    matching: Match,
    max_samples: usize,
    poll: crate::poll::Mode,
}

/// The command line (`std::env::args`); exits 2 with the usage on a bad flag.
pub fn parse_args() -> Args {
    let mut r = Raw {
        addr: None,
        ids: vec![1u64],
        payload_bytes: None,
        payload_text: None,
        outstanding: 1,
        duration: 5.0,
        warmup: 1.0,
        json: false,
        rate: 0.0,
        timeout_ms: 200,
        matching: Match::Auto,
        max_samples: 20_000_000,
        poll: crate::poll::Mode::Adaptive,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let flag = argv[i].as_str();
        if flag == "--json" {
            r.json = true;
            i += 1;
            continue;
        }
        if flag == "-h" || flag == "--help" {
            usage("help");
        }
        let value = argv
            .get(i + 1)
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        set_flag(&mut r, flag, value);
        i += 2;
    }
    finish(r)
}

fn set_flag(r: &mut Raw, flag: &str, value: &str) {
    let num = |v: &str| -> f64 {
        v.parse::<f64>()
            .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {v}")))
    };
    match flag {
        "--addr" => {
            r.addr = Some(
                value
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .unwrap_or_else(|| usage(&format!("--addr: cannot resolve {value}"))),
            )
        }
        "--ids" => r.ids = parse_ids(value),
        "--payload-bytes" => r.payload_bytes = Some(num(value) as usize),
        "--payload" => r.payload_text = Some(value.to_string()),
        "--outstanding" => r.outstanding = (num(value) as usize).max(1),
        "--duration" => r.duration = num(value),
        "--warmup" => r.warmup = num(value),
        "--rate" => r.rate = num(value),
        "--timeout-ms" => r.timeout_ms = num(value) as u64,
        "--max-samples" => r.max_samples = num(value) as usize,
        "--poll" => {
            r.poll = crate::poll::Mode::parse(value)
                .unwrap_or_else(|| usage("--poll: adaptive, spin or block"))
        }
        "--match" => {
            r.matching = match value {
                "auto" => Match::Auto,
                "tag" => Match::Tag,
                "fifo" => Match::Fifo,
                _ => usage("--match: auto, tag or fifo"),
            }
        }
        _ => usage(&format!("unknown flag {flag}")),
    }
}

fn parse_ids(value: &str) -> Vec<crate::wire::LambdaId> {
    let ids: Vec<crate::wire::LambdaId> = value
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .unwrap_or_else(|_| usage(&format!("--ids: not a u64 lambda id: {s}")))
        })
        .collect();
    if ids.is_empty() {
        usage("--ids: empty");
    }
    ids
}

fn finish(r: Raw) -> Args {
    let letters = |n: usize| (0..n).map(|k| b'a' + (k % 26) as u8).collect();
    let payload = match (r.payload_text, r.payload_bytes) {
        (Some(_), Some(_)) => usage("give --payload or --payload-bytes, not both"),
        (Some(t), None) => t.into_bytes(),
        (None, Some(n)) => letters(n),
        (None, None) => letters(16),
    };
    if payload.len() + ID_LEN > MAX_DGRAM {
        usage("payload larger than a datagram");
    }
    Args {
        addr: r.addr.unwrap_or_else(|| usage("--addr is required")),
        ids: r.ids,
        payload,
        outstanding: r.outstanding,
        duration: r.duration,
        warmup: r.warmup,
        json: r.json,
        rate: r.rate,
        timeout: Duration::from_millis(r.timeout_ms.max(1)),
        matching: r.matching,
        max_samples: r.max_samples,
        poll: crate::poll::Policy {
            mode: r.poll,
            ..Default::default()
        },
    }
}
