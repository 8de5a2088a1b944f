//! Kept-alive stream connections (`STREAM_KEEP_ALIVE` in the payload_len; src/stream/conn.rs):
//! many requests on one connection, pipelined requests, the cases that must still close (an
//! early reply, until-EOF), the quiet close of an idle kept-alive connection, and a client that
//! pipelines without reading.

mod common;
mod stream_common;
use common::*;
use nearfaas_fastpath::wire::{encode_stream_head, STREAM_KEEP_ALIVE, STREAM_UNTIL_EOF};
use serde_json::json;
use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};
use stream_common::*;

const KEEP: u64 = STREAM_KEEP_ALIVE;

/// A listener with a 400 ms idle timeout and topk u32 K=3 as function 1.
fn start_topk() -> Fp {
    let fp = start(&["--stream-idle-ms", "400"]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 3, "dtype": "u32"}]}),
    );
    fp
}

fn topk3(v: &[u32]) -> Vec<u8> {
    let mut s = v.to_vec();
    s.sort_unstable_by(|a, b| b.cmp(a));
    s.truncate(3);
    le(&s)
}

/// A kept-alive request (`KEEP` or-ed into its payload_len).
fn request(id: u64, v: &[u32]) -> Vec<u8> {
    let p = le(v);
    let mut r = encode_stream_head(id, p.len() as u64 | KEEP).to_vec();
    r.extend_from_slice(&p);
    r
}

/// Whether the server closed the connection (EOF with no more bytes) within the read timeout.
fn closed(s: &mut std::net::TcpStream) -> bool {
    let mut b = [0u8; 16];
    matches!(s.read(&mut b), Ok(0))
}

#[test]
fn one_connection_serves_many_requests() {
    let fp = start_topk();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut s = connect(&fp);
    for i in 0..50usize {
        let v: Vec<u32> = (0..i).map(|_| rng.next() as u32).collect();
        s.write_all(&request(1, &v)).unwrap();
        assert_eq!(read_one_reply(&mut s, 4), (OK, topk3(&v)), "request {i}");
    }
    // The last request may drop the flag: answered, then closed.
    s.write_all(&request(1, &[4, 2])).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (OK, le(&[4, 2])));
    assert!(closed(&mut s));
    let st = fp.stats();
    assert_eq!(st["global"]["stream_accepted"], 1, "{st}");
    assert_eq!(st["global"]["stream_reused"], 50, "{st}");
    assert_eq!(stream_stats(&st, 1)["ok"], 51);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let fp = start_topk();
    let mut s = connect(&fp);
    // Twenty requests in one write: several arrive in one read, behind each other's payloads.
    let sets: Vec<Vec<u32>> = (0..20u32)
        .map(|i| (0..i % 7).map(|j| i * 100 + j).collect())
        .collect();
    let all: Vec<u8> = sets.iter().flat_map(|v| request(1, v)).collect();
    s.write_all(&all).unwrap();
    for (i, v) in sets.iter().enumerate() {
        assert_eq!(read_one_reply(&mut s, 4), (OK, topk3(v)), "request {i}");
    }
    s.shutdown(Shutdown::Write).unwrap();
    assert!(
        closed(&mut s),
        "half-close between requests ends the connection"
    );
}

#[test]
fn early_replies_and_until_eof_still_close() {
    let fp = start_topk();
    // A length that is not a multiple of 4, and an unknown id: the payload behind them cannot
    // be told from a next header, so the reply is the last.
    for (head, want) in [
        (encode_stream_head(1, 6 | KEEP), BAD_REQUEST),
        (encode_stream_head(9, 8 | KEEP), UNKNOWN),
    ] {
        let mut s = connect(&fp);
        s.write_all(&head).unwrap();
        s.write_all(&[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(read_one_reply(&mut s, 4), (want, vec![]));
        assert!(closed(&mut s));
    }
    // Until-EOF ends with the client's half-close: answered, then closed.
    let mut s = connect(&fp);
    s.write_all(&encode_stream_head(1, STREAM_UNTIL_EOF))
        .unwrap();
    s.write_all(&le(&[3, 1, 2, 9])).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s, 4), (OK, le(&[9, 3, 2])));
    // A good request after a kept-alive one that went wrong mid-way is not read.
    let mut s = connect(&fp);
    s.write_all(&request(1, &[5])).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (OK, le(&[5])));
    s.write_all(&encode_stream_head(1, 7 | KEEP)).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (BAD_REQUEST, vec![]));
    let _ = s.write_all(&request(1, &[6]));
    assert!(closed(&mut s));
}

#[test]
fn idle_kept_alive_connection_closes_quietly() {
    let fp = start_topk();
    let mut s = connect(&fp);
    s.write_all(&request(1, &[8, 1])).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (OK, le(&[8, 1])));
    let t = Instant::now();
    // No TIMEOUT reply between requests: the next bytes are the close.
    assert!(closed(&mut s));
    let dt = t.elapsed();
    assert!(
        dt >= Duration::from_millis(350) && dt < Duration::from_secs(3),
        "{dt:?}"
    );
    // Mid-request it is still a TIMEOUT.
    let mut s = connect(&fp);
    s.write_all(&request(1, &[8])).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (OK, le(&[8])));
    s.write_all(&encode_stream_head(1, 400 | KEEP)).unwrap();
    assert_eq!(read_one_reply(&mut s, 4), (TIMEOUT, vec![]));
    // The TIMEOUT reply goes out before the connection is closed and uncounted.
    let t = Instant::now();
    let mut st = fp.stats();
    while st["global"]["stream_conns"] != 0 && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
        st = fp.stats();
    }
    assert_eq!(st["global"]["stream_timeouts"], 1, "{st}");
    assert_eq!(st["global"]["stream_conns"], 0, "{st}");
}

#[test]
fn a_client_that_never_reads_does_not_hold_up_others() {
    // A long idle time: the greedy connection must still be open when the others are served.
    let fp = start(&["--stream-idle-ms", "20000"]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 3, "dtype": "u32"}]}),
    );
    // 4 MiB of small pipelined requests and no reads: the executor stops reading that
    // connection once its replies fill the socket, and serves the next client meanwhile.
    let mut greedy = connect(&fp);
    greedy
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let one = request(1, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let burst: Vec<u8> = one.iter().copied().cycle().take(one.len() * 4096).collect();
    let mut sent = 0usize;
    for _ in 0..100 {
        match greedy.write(&burst[sent % burst.len()..]) {
            Ok(n) => sent += n,
            Err(_) => break, // the socket is full: the executor has stopped reading it
        }
    }
    for i in 0..20u32 {
        assert_eq!(call(&fp, 1, &le(&[i, 7]), None, false).0, OK);
    }
    let st = fp.stats();
    assert_eq!(st["global"]["stream_conns"], 1, "{st}");
    // It has stopped being read: its count of answered requests stands still.
    let reused = st["global"]["stream_reused"].clone();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(fp.stats()["global"]["stream_reused"], reused);
    drop(greedy);
    wait_for_no_connections(&fp); // once it is gone the executor forgets it
}
