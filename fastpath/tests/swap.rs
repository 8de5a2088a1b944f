//! Hot swap under load: v1 -> v2 with zero failed requests.

mod common;
use common::*;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn hot_swap_under_load_loses_nothing() {
    let fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(7, "web", json!({"version": 1}));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for k in 0..3 {
        let (to, stop) = (fp.udp_addr(), stop.clone());
        clients.push(std::thread::spawn(move || {
            let c = Client::new(&to);
            let (mut v1, mut v2, mut i) = (0u64, 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let p = format!("c{k}-{i}");
                let (st, r) = c.call(7, p.as_bytes());
                assert_eq!(
                    st,
                    OK,
                    "request {i} of client {k} failed during the swap: {}",
                    String::from_utf8_lossy(&r)
                );
                if r == format!("Hello from nearfaas fastpath v1: {p}").into_bytes() {
                    assert_eq!(v2, 0, "v1 reply after a v2 reply");
                    v1 += 1;
                } else {
                    assert_eq!(
                        r,
                        format!("Hello from nearfaas fastpath v2: {p}").into_bytes()
                    );
                    v2 += 1;
                }
                i += 1;
            }
            (v1, v2)
        }));
    }
    std::thread::sleep(Duration::from_millis(500));
    let r = fp.ctl(
        json!({"op": "deploy", "id": 7, "name": "web", "kind": "wasm",
                          "path": wasm("web_v2"), "version": 2}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["swapped"], true);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (mut v1, mut v2) = (0, 0);
    for c in clients {
        let (a, b) = c.join().unwrap();
        v1 += a;
        v2 += b;
    }
    eprintln!("replies: v1 {v1}, v2 {v2}");
    assert!(v1 > 100 && v2 > 100, "v1 {v1} v2 {v2}");
    let l = fp.lambda_stats(7);
    assert_eq!(l["version"], 2);
    assert_eq!(l["ok"], l["calls"], "{l}");
    assert_eq!(l["traps"], 0);
    assert_eq!(l["overloaded"], 0);
}

#[test]
fn swap_wasm_to_native_and_back() {
    let fp = Fp::start(&["--workers", "1"]);
    fp.deploy_wasm(9, "counter", json!({}));
    let c = fp.client();
    assert_eq!(c.call(9, b"").1, b"1");
    assert_eq!(c.call(9, b"").1, b"2");
    fp.deploy_native(9, "web", json!({}));
    assert_eq!(c.call(9, b"n").1, b"Hello from nearfaas fastpath v1: n");
    // A new version of counter starts from a fresh instance.
    let r = fp.deploy_wasm(9, "counter", json!({}));
    assert_eq!(r["version"], 3, "versions count up when not given: {r}");
    assert_eq!(c.call(9, b"").1, b"1");
}
