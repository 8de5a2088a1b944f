//! Helpers shared by the stream-function tests (tests/stream_*.rs): random text of numbers, a
//! parse → filter → topk chain, and the stream listener's client side.
#![allow(dead_code)]

use super::common::*;
use nearfaas_fastpath::wire::{decode_stream_reply_head, encode_stream_head};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Random text of numbers with random separators; (the text, the numbers).
pub fn text_numbers(rng: &mut Rng, n: usize) -> (Vec<u8>, Vec<u32>) {
    let seps: [&[u8]; 6] = [b" ", b",", b"\n", b", ", b"\t\t", b" ,\r\n"];
    let mut text = Vec::new();
    let mut nums = Vec::new();
    for i in 0..n {
        let v = match rng.next() % 3 {
            0 => (rng.next() % 1000) as u32,
            1 => rng.next() as u32,
            _ => (rng.next() % 200) as u32,
        };
        if i > 0 || rng.next() % 2 == 0 {
            text.extend_from_slice(seps[(rng.next() % 6) as usize]);
        }
        if rng.next() % 7 == 0 {
            text.extend_from_slice(b"00"); // leading zeros
        }
        text.extend_from_slice(v.to_string().as_bytes());
        nums.push(v);
    }
    if rng.next() % 2 == 0 {
        text.push(b'\n');
    }
    (text, nums)
}

pub fn chain_json(min: u32, max: u32, k: usize, variant: &str) -> Value {
    json!({"chain": [{"fn": "parse"}, {"fn": "filter", "min": min, "max": max},
                     {"fn": "topk", "k": k, "dtype": "u32", "variant": variant}]})
}

pub fn start(extra: &[&str]) -> Fp {
    let mut args = vec!["--workers", "1", "--stream", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let fp = Fp::start(&args);
    assert!(fp.ready["stream_addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert_eq!(
        fp.ready["stream"].as_u64().unwrap(),
        fp.port("stream") as u64
    );
    fp
}

pub fn deploy_stream(fp: &Fp, id: u64, stream: Value) -> Value {
    let r = fp.ctl(json!({"op": "deploy", "id": id, "kind": "stream", "stream": stream}));
    assert_eq!(r["ok"], true, "{r}");
    r
}

/// A connection to the stream port from source address 127.0.0.`last`.
pub fn connect_from(fp: &Fp, last: u8) -> TcpStream {
    let s = connect_port_from(fp.port("stream"), last);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

pub fn connect(fp: &Fp) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", fp.port("stream"))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read a reply to EOF: (status, the bytes after the head); checks count against the length.
pub fn read_reply(s: &mut TcpStream, item: usize) -> (u8, Vec<u8>) {
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("reply");
    let (st, count) = decode_stream_reply_head(&all).unwrap_or_else(|| panic!("reply {all:?}"));
    assert_eq!(all.len(), 5 + count as usize * item, "reply length");
    (st, all[5..].to_vec())
}

/// Read exactly one reply (a kept-alive connection stays open after it): (status, elements).
pub fn read_one_reply(s: &mut TcpStream, item: usize) -> (u8, Vec<u8>) {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).expect("reply head");
    let (st, count) = decode_stream_reply_head(&head).unwrap();
    let mut body = vec![0u8; count as usize * item];
    s.read_exact(&mut body).expect("reply elements");
    (st, body)
}

/// One request: header (payload_len = `len`, or the payload's length), the payload in pieces
/// of `piece` bytes, then half-close when `close`.
pub fn call(fp: &Fp, id: u64, payload: &[u8], len: Option<u64>, close: bool) -> (u8, Vec<u8>) {
    let mut s = connect(fp);
    s.write_all(&encode_stream_head(id, len.unwrap_or(payload.len() as u64)))
        .unwrap();
    let _ = s.write_all(payload); // the reply may come (and the server stop reading) first
    if close {
        let _ = s.shutdown(Shutdown::Write);
    }
    read_reply(&mut s, 4)
}

/// Wait (at most 5 s) until the listener holds no connection: the ones a test dropped are gone.
pub fn wait_for_no_connections(fp: &Fp) {
    let t = Instant::now();
    while fp.stats()["global"]["stream_conns"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connections not released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn le(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
