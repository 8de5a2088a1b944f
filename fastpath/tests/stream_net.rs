//! Stream functions over the network (docs/fastpath.md, "Stream functions"): one pipeline ==
//! separate hops, bounded memory on a 64 MiB stream, the connection cap, 10,000 connections
//! opened and dropped, one ID space with lambdas, and fairness beside a costly stream.

mod common;
mod stream_common;
use common::*;
use nearfaas_fastpath::stream::ops::{topk_reference, Dtype, Filter};
use nearfaas_fastpath::wire::{encode_stream_head, STREAM_UNTIL_EOF};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};
use stream_common::*;

#[test]
fn chain_equals_separate_hops_over_the_network() {
    let fp = start(&[]);
    deploy_stream(&fp, 10, chain_json(100, 5000, 16, "insertion"));
    deploy_stream(
        &fp,
        11,
        json!({"chain": [{"fn": "topk", "k": 16, "variant": "heap"}]}),
    );
    deploy_stream(
        &fp,
        12,
        json!({"chain": [{"fn": "filter", "min": 100, "max": 5000},
                                            {"fn": "topk", "k": 16}]}),
    );
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for n in [0, 3, 16, 2000, 40_000] {
        let (text, nums) = text_numbers(&mut rng, n);
        let mut kept = nums.clone();
        Filter::U32 {
            min: 100,
            max: 5000,
        }
        .apply(&mut kept);
        let want = le(&topk_reference(Dtype::U32, &kept, 16));
        // One pipeline: text in, Top-K out.
        assert_eq!(
            call(&fp, 10, &text, None, false),
            (OK, want.clone()),
            "n {n}"
        );
        // Separate hops: parsed and filtered here, Top-K there; and filter + Top-K there.
        assert_eq!(call(&fp, 11, &le(&kept), None, false), (OK, want.clone()));
        assert_eq!(
            call(&fp, 12, &le(&nums), Some(STREAM_UNTIL_EOF), true),
            (OK, want)
        );
    }
}

#[test]
fn a_64_mib_stream_in_1_kib_writes_keeps_memory_bounded() {
    let fp = start(&[]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 16, "dtype": "u32"}]}),
    );
    let pid = fp.child.id();
    // Warm the path (first allocations of the loop's buffers) before the baseline.
    assert_eq!(call(&fp, 1, &le(&[1, 2, 3]), None, false).0, OK);
    let before = rss_kib(pid);
    let total: u64 = 64 << 20;
    let mut s = connect(&fp);
    s.write_all(&encode_stream_head(1, total)).unwrap();
    let mut rng = Rng(42);
    let mut piece = [0u8; 1024];
    let mut max_rss = before;
    let mut biggest = 0u32;
    for i in 0..(total / 1024) {
        for c in piece.chunks_exact_mut(4) {
            let v = (rng.next() >> 40) as u32;
            biggest = biggest.max(v);
            c.copy_from_slice(&v.to_le_bytes());
        }
        s.write_all(&piece).unwrap();
        if i % 4096 == 0 {
            max_rss = max_rss.max(rss_kib(pid));
        }
    }
    let (st, body) = read_reply(&mut s, 4);
    max_rss = max_rss.max(rss_kib(pid));
    assert_eq!(st, OK);
    let top = u32s(&body);
    assert_eq!((top.len(), top[0]), (16, biggest));
    let grew = max_rss.saturating_sub(before);
    eprintln!("64 MiB stream: RSS {before} KiB -> max {max_rss} KiB (+{grew} KiB)");
    assert!(grew < 4 * 1024, "RSS grew by {grew} KiB streaming 64 MiB");
    let f = &fp.stats()["streams"][0];
    assert_eq!(f["bytes"], total + 12); // and the warm-up's 3 elements
    assert_eq!(f["elements"], total / 4 + 3);
}

#[test]
fn ten_thousand_connections_opened_and_dropped_leave_it_serving() {
    let fp = start(&["--stream-max-connections", "64"]);
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 2}]}));
    let addr = ("127.0.0.1", fp.port("stream"));
    for i in 0..10_000u32 {
        let mut s = TcpStream::connect(addr).unwrap();
        match i % 4 {
            0 => {} // connect, close
            1 => {
                let _ = s.write_all(&[1, 0]);
            } // half a header
            2 => {
                // header, part of the payload
                let _ = s.write_all(&encode_stream_head(1, 1 << 30));
                let _ = s.write_all(&[7u8; 100]);
            }
            _ => {
                // reset instead of FIN
                let _ = s.write_all(&encode_stream_head(1, 400));
                let l = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                unsafe {
                    use std::os::fd::AsRawFd;
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&l as *const libc::linger).cast(),
                        std::mem::size_of::<libc::linger>() as u32,
                    );
                }
            }
        }
    }
    // A burst of connections held open past the cap at once, then dropped.
    let held: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    drop(held);
    wait_for_no_connections(&fp);
    let g = fp.stats()["global"].clone();
    // Every connection was accepted, or refused at the cap (64) when the loop was behind.
    let (acc, refused) = (
        g["stream_accepted"].as_u64().unwrap(),
        g["stream_refused"].as_u64().unwrap(),
    );
    assert_eq!(acc + refused, 10_200, "{g}");
    assert!(refused >= 100 && acc >= 9_000, "{g}");
    assert_eq!(
        call(&fp, 1, &le(&[3, 8, 1]), None, false),
        (OK, le(&[8, 3]))
    );
    assert_eq!(call(&fp, 1, &le(&[5]), None, false), (OK, le(&[5])));
}

#[test]
fn connections_over_the_stream_cap_are_closed_at_accept() {
    // Four at most, two per peer IP: one client opening idle connections cannot shut the
    // others (the gateway among them) out (issue 39).
    let fp = start(&["--stream-max-connections", "4"]);
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 1}]}));
    let wait_for = |n: u64| {
        let t = Instant::now();
        while fp.stats()["global"]["stream_conns"] != n {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Over the cap: OVERLOADED (best effort) and closed at once.
    let refused = |mut extra: TcpStream| {
        let mut b = Vec::new();
        let r = extra.read_to_end(&mut b);
        assert!(r.is_ok() || b.is_empty(), "{r:?}");
        assert!(b.is_empty() || b == [OVERLOADED, 0, 0, 0, 0], "{b:?}");
    };
    let mut held: Vec<TcpStream> = (0..2).map(|_| connect_from(&fp, 2)).collect();
    wait_for(2);
    refused(connect_from(&fp, 2)); // its share is taken
    assert_eq!(fp.stats()["global"]["stream_refused"], 1);
    // Another peer is still served, up to its own share.
    assert_eq!(call(&fp, 1, &le(&[4, 6]), None, false), (OK, le(&[6])));
    held.extend((0..2).map(|_| connect_from(&fp, 3)));
    wait_for(4);
    refused(connect(&fp)); // the whole cap
    assert_eq!(fp.stats()["global"]["stream_refused"], 2);
    drop(held);
    wait_for(0);
    assert_eq!(call(&fp, 1, &le(&[4, 6]), None, false), (OK, le(&[6])));
}

#[test]
fn the_gateways_unix_socket_is_served_when_every_tcp_slot_is_held() {
    // Red team round 7: per-IP shares do not keep the gateway's room on loopback (any local
    // process binds 127.0.0.2, 127.0.0.3, ...): two addresses held every slot and the gateway's
    // stream calls answered OVERLOADED. The gateway has a socket of its own (`--stream-unix`).
    use std::os::unix::fs::PermissionsExt;
    let path = tmpdir("gw").join("stream.sock");
    let fp = start(&[
        "--stream-max-connections",
        "4",
        "--stream-unix",
        path.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 1}]}));
    let held: Vec<TcpStream> = [2, 2, 3, 3].iter().map(|&a| connect_from(&fp, a)).collect();
    let t = Instant::now();
    while fp.stats()["global"]["stream_conns"] != 4 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut tcp = connect(&fp); // from 127.0.0.1: the cap is full, refused at accept
    let mut b = Vec::new();
    let _ = tcp.read_to_end(&mut b);
    assert!(b.is_empty() || b == [OVERLOADED, 0, 0, 0, 0], "{b:?}");
    for _ in 0..3 {
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&encode_stream_head(1, 8)).unwrap();
        s.write_all(&le(&[4, 6])).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        assert_eq!(all, [&[OK, 1, 0, 0, 0][..], &6u32.to_le_bytes()].concat());
    }
    drop(held);
}

#[test]
fn one_id_names_one_function() {
    let fp = start(&[]);
    fp.deploy_native(7, "web", json!({}));
    let r = deploy_stream(&fp, 7, json!({"chain": [{"fn": "topk", "k": 1}]}));
    assert_eq!(r["swapped"], true, "{r}");
    assert_eq!(fp.client().call(7, b"x").0, UNKNOWN); // the lambda is gone
    assert_eq!(call(&fp, 7, &le(&[2, 9]), None, false), (OK, le(&[9])));
    let r = fp.deploy_native(7, "web", json!({}));
    assert_eq!(r["swapped"], true, "{r}");
    assert_eq!(call(&fp, 7, &le(&[2, 9]), None, false), (UNKNOWN, vec![]));
    assert_eq!(fp.client().call(7, b"x").0, OK);
}

#[test]
fn a_costly_stream_does_not_hold_up_the_others() {
    let fp = start(&[]);
    // K = 4096 insertion: 4096 steps an element; a 64 KiB read alone would be ~70M steps.
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 4096}]}));
    deploy_stream(&fp, 2, json!({"chain": [{"fn": "topk", "k": 4}]}));
    let heavy = connect(&fp);
    let mut w = heavy.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&encode_stream_head(1, STREAM_UNTIL_EOF));
        let piece = vec![0x5au8; 64 << 10];
        while w.write_all(&piece).is_ok() {}
    });
    std::thread::sleep(Duration::from_millis(200)); // the heavy stream is being consumed
    let mut lat = Vec::new();
    for i in 0..20u32 {
        let t = Instant::now();
        assert_eq!(
            call(&fp, 2, &le(&[i, 7]), None, false),
            (OK, le(&[i.max(7), i.min(7)]))
        );
        lat.push(t.elapsed());
    }
    lat.sort();
    eprintln!(
        "beside a K=4096 stream: p50 {:?}, max {:?}",
        lat[10], lat[19]
    );
    // The property is the median: a loop held by the heavy stream delays every call. The max is
    // the host's scheduling tail (558 ms seen on an overloaded 2-core CI host, p50 56 us), so it
    // only bounds a stall far beyond any one call's work.
    assert!(lat[10] < Duration::from_millis(50), "p50 {:?}", lat[10]);
    assert!(lat[19] < Duration::from_secs(3), "max {:?}", lat[19]);
    let _ = heavy.shutdown(Shutdown::Both);
    writer.join().unwrap();
}
