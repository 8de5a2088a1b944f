//! The stream listener's protocol (docs/fastpath.md, "Stream functions"): replies of topk,
//! frequent and parse → filter → topk chains, explicit lengths and until-EOF; protocol errors
//! (unknown id, partial element, truncated, parse errors, a header cut short); the idle
//! timeout; the counters; remove; and deploy errors that name the field.

mod common;
mod stream_common;
use common::*;
use nearfaas_fastpath::wire::{encode_stream_head, STREAM_UNTIL_EOF};
use serde_json::json;
use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};
use stream_common::*;

/// A listener with a 400 ms idle timeout and four functions: 1 topk u32 K=4, 2 topk f32 K=3
/// (heap), 3 frequent K=3, 4 parse → filter 10..=99 → topk K=2.
fn start_with_four() -> Fp {
    let fp = start(&["--stream-idle-ms", "400"]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 4, "dtype": "u32"}]}),
    );
    deploy_stream(
        &fp,
        2,
        json!({"chain": [{"fn": "topk", "k": 3, "dtype": "f32", "variant": "heap"}]}),
    );
    deploy_stream(&fp, 3, json!({"chain": [{"fn": "frequent", "k": 3}]}));
    let r = deploy_stream(&fp, 4, chain_json(10, 99, 2, "insertion"));
    assert_eq!(r["stream_addr"], fp.ready["stream_addr"]);
    fp
}

fn data() -> Vec<u8> {
    le(&[5, 1, 9, 9, 0, 7, 3])
}

#[test]
fn stream_requests_get_replies() {
    let fp = start_with_four();
    let data = data();
    // Explicit length, and until EOF.
    let want = le(&[9, 9, 7, 5]);
    assert_eq!(call(&fp, 1, &data, None, false), (OK, want.clone()));
    assert_eq!(
        call(&fp, 1, &data, Some(STREAM_UNTIL_EOF), true),
        (OK, want)
    );
    assert_eq!(call(&fp, 1, b"", None, false), (OK, vec![]));
    let f: Vec<u32> = [1.5f32, f32::NAN, -2.0, 8.25]
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(
        call(&fp, 2, &le(&f), None, false),
        (OK, le(&[f[3], f[0], f[2]]))
    );
    // frequent: (value, count) pairs.
    let (st, body) = {
        let mut s = connect(&fp);
        let d = le(&[4, 1, 4, 6, 4, 6]);
        s.write_all(&encode_stream_head(3, d.len() as u64)).unwrap();
        s.write_all(&d).unwrap();
        read_reply(&mut s, 8)
    };
    assert_eq!((st, u32s(&body)), (OK, vec![4, 3, 6, 2, 1, 1]));
    assert_eq!(
        call(&fp, 4, b"5 50,500\n60 61 7", None, false),
        (OK, le(&[61, 60]))
    );
    assert_eq!(stream_stats(&fp.stats(), 1)["ok"], 3);
}

#[test]
fn protocol_errors_are_answered_and_counted() {
    let fp = start_with_four();
    let data = data();
    // Errors: unknown id, a length not a multiple of 4, truncated, a parse error.
    assert_eq!(call(&fp, 99, &data, None, false), (UNKNOWN, vec![]));
    assert_eq!(call(&fp, 1, &data[..6], None, false), (BAD_REQUEST, vec![]));
    assert_eq!(
        call(&fp, 1, &data[..6], Some(STREAM_UNTIL_EOF), true),
        (BAD_REQUEST, vec![])
    );
    assert_eq!(
        call(&fp, 1, &data[..8], Some(40), true),
        (BAD_REQUEST, vec![])
    );
    assert_eq!(call(&fp, 4, b"1 2 x3", None, false), (BAD_REQUEST, vec![]));
    assert_eq!(
        call(&fp, 4, b"99999999999", None, false),
        (BAD_REQUEST, vec![])
    );
    // A header cut short, then EOF.
    let mut s = connect(&fp);
    s.write_all(&[1, 0, 0]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s, 4), (BAD_REQUEST, vec![]));
    // An unknown id answered while the client is still sending a long payload: the reply
    // arrives (FIN, not a reset) and the connection ends.
    let mut s = connect(&fp);
    s.write_all(&encode_stream_head(77, 1 << 20)).unwrap();
    let _ = s.write_all(&vec![0u8; 256 << 10]);
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s, 4), (UNKNOWN, vec![]));
    let st = fp.stats();
    let one = stream_stats(&st, 1);
    assert_eq!(one["bad_request"], 3, "{one}");
    assert_eq!(st["global"]["stream_unknown"], 2, "{st}");
}

#[test]
fn idle_clients_get_timeout() {
    let fp = start_with_four();
    let data = data();
    // A client that never half-closes (until-EOF), one that stops short of payload_len, and
    // one that sends nothing: TIMEOUT after the idle time, then closed.
    for (head, body) in [
        (Some(STREAM_UNTIL_EOF), &data[..]),
        (Some(100), &data[..]),
        (None, &[][..]),
    ] {
        let mut s = connect(&fp);
        let t = Instant::now();
        if let Some(len) = head {
            s.write_all(&encode_stream_head(1, len)).unwrap();
            s.write_all(body).unwrap();
        }
        assert_eq!(read_reply(&mut s, 4), (TIMEOUT, vec![]));
        let dt = t.elapsed();
        assert!(
            dt >= Duration::from_millis(350) && dt < Duration::from_secs(3),
            "{dt:?}"
        );
    }
    let st = fp.stats();
    let one = stream_stats(&st, 1);
    assert_eq!(one["timeouts"], 2, "{one}");
    assert_eq!(st["global"]["stream_timeouts"], 3, "{st}");
}

#[test]
fn remove_and_deploy_errors_name_the_field() {
    let fp = start_with_four();
    let data = data();
    assert_eq!(call(&fp, 1, &data, None, false), (OK, le(&[9, 9, 7, 5])));
    let r = fp.ctl(json!({"op": "remove", "id": 1}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(call(&fp, 1, &data, None, false), (UNKNOWN, vec![]));
    // Deploy errors name the field (a wasm stage without its module names `path`).
    for (req, field) in [
        (json!({"op": "deploy", "id": 5, "kind": "stream"}), "stream"),
        (
            json!({"op": "deploy", "id": 5, "kind": "stream", "path": "/x.wasm",
                "stream": {"chain": [{"fn": "topk", "k": 1}]}}),
            "path",
        ),
        (
            json!({"op": "deploy", "id": 5, "kind": "stream",
                "stream": {"chain": [{"fn": "wasm"}]}}),
            "stream.chain[0].path",
        ),
        (
            json!({"op": "deploy", "id": 5, "kind": "native", "native": "web",
                "stream": {"chain": []}}),
            "stream",
        ),
    ] {
        let r = fp.ctl(req.clone());
        assert_eq!(r["ok"], false, "{req}");
        assert!(r["error"].as_str().unwrap().starts_with(field), "{r}");
    }
}
