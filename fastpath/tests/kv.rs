//! External calls: the kv lambda (wasm and native) against a real memcached; workers do not
//! wait for external replies.

mod common;
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Memcached(Child, u16);
impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A memcached on a free port. Picking the port and handing it over races with whatever takes
/// ports meanwhile (and a connect poll can even self-connect on an ephemeral port), so a
/// memcached that exits is started again on another port, and it counts as up only when it
/// answers `version` as memcached does.
fn memcached() -> Memcached {
    for _ in 0..5 {
        if let Some(mc) = try_memcached() {
            return mc;
        }
    }
    panic!("memcached did not start on any of 5 ports (apt-get install memcached)");
}

fn try_memcached() -> Option<Memcached> {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new("memcached");
    cmd.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-U",
        "0",
        "-t",
        "1",
    ]);
    if unsafe { libc::geteuid() } == 0 {
        cmd.args(["-u", "root"]);
    }
    let child = cmd
        .stdout(Stdio::null())
        .spawn()
        .expect("memcached (apt-get install memcached)");
    let mut mc = Memcached(child, port);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if mc.0.try_wait().ok().flatten().is_some() {
            return None; // it could not listen there: another port
        }
        if answers_version(port) {
            return Some(mc);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn answers_version(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 64];
    s.write_all(b"version\r\n").is_ok()
        && matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"VERSION "))
}

#[test]
fn kv_wasm_and_native_against_memcached() {
    let mc = memcached();
    let ext = format!("127.0.0.1:{}", mc.1);
    let fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(20, "kv", json!({"external": ext}));
    fp.deploy_native(21, "kv", json!({"external": ext}));
    let c = fp.client();
    for id in [20u64, 21] {
        let k = format!("key{id}");
        assert_eq!(
            c.call(id, format!("GET {k}").as_bytes()),
            (OK, b"NOT_FOUND".to_vec())
        );
        assert_eq!(
            c.call(id, format!("SET {k} hello world {id}").as_bytes()),
            (OK, b"STORED".to_vec())
        );
        assert_eq!(
            c.call(id, format!("GET {k}").as_bytes()),
            (OK, format!("VALUE hello world {id}").into_bytes())
        );
        assert_eq!(c.call(id, b"DEL x").0, BAD_REQUEST);
    }
    // The two implementations see the same store.
    assert_eq!(
        c.call(20, b"GET key21"),
        (OK, b"VALUE hello world 21".to_vec())
    );
    assert_eq!(c.call(21, b"SET shared \r\n"), (OK, b"STORED".to_vec()));
    assert_eq!(c.call(20, b"GET shared"), (OK, b"VALUE ".to_vec()));

    // Pipelined: many outstanding requests on the one memcached connection, answered in order.
    for i in 0..200 {
        c.send(20 + (i % 2), format!("SET p{i} v{i}").as_bytes());
    }
    let mut got = 0;
    while got < 200 {
        let (_, st, p) = c.recv().expect("pipelined SET reply");
        assert_eq!((st, p.as_slice()), (OK, &b"STORED"[..]));
        got += 1;
    }
    for i in 0..200 {
        c.send(20 + (i % 2), format!("GET p{i}").as_bytes());
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let (_, st, p) = c.recv().expect("pipelined GET reply");
        assert_eq!(st, OK);
        seen.insert(String::from_utf8(p).unwrap());
    }
    for i in 0..200 {
        assert!(seen.contains(&format!("VALUE v{i}")), "missing v{i}");
    }
    let l = fp.lambda_stats(20);
    assert_eq!(l["external_errors"], 0, "{l}");

    // memcached goes away: EXTERNAL_ERROR, no crash; it comes back: served again.
    drop(mc);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.call(20, b"GET key20").0, EXTERNAL_ERROR);
    assert_eq!(c.call(21, b"GET key20").0, EXTERNAL_ERROR);
    assert_eq!(c.call(20, b"").0, BAD_REQUEST);
}

#[test]
fn worker_does_not_wait_for_external_replies() {
    // A slow "memcached": answers each request 400 ms late; a second one never answers.
    let slow = TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_addr = slow.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for s in slow.incoming() {
            let mut s = s.unwrap();
            std::thread::spawn(move || {
                let mut b = [0u8; 1024];
                while let Ok(n) = s.read(&mut b) {
                    if n == 0 {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(400));
                    let _ = s.write_all(b"END\r\n");
                }
            });
        }
    });
    let mute = TcpListener::bind("127.0.0.1:0").unwrap();
    let mute_addr = mute.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut keep = Vec::new();
        for s in mute.incoming() {
            keep.push(s);
        }
    });
    let fp = Fp::start(&["--workers", "1"]);
    fp.deploy_wasm(20, "kv", json!({"external": slow_addr}));
    fp.deploy_wasm(22, "kv", json!({"external": mute_addr}));
    fp.deploy_wasm(7, "web", json!({}));
    let kvc = fp.client();
    let t0 = Instant::now();
    kvc.send(20, b"GET a");
    std::thread::sleep(Duration::from_millis(50));
    // One worker, an external call outstanding: the worker still serves the web lambda at once.
    let c = fp.client();
    for _ in 0..50 {
        assert_eq!(c.call(7, b"x").0, OK);
    }
    assert!(
        t0.elapsed() < Duration::from_millis(350),
        "web calls waited for the external call"
    );
    assert_eq!(kvc.recv().unwrap(), (20, OK, b"NOT_FOUND".to_vec()));
    assert!(t0.elapsed() >= Duration::from_millis(400));
    // An external that never answers: EXTERNAL_ERROR after the external timeout.
    kvc.sock
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let t1 = Instant::now();
    kvc.send(22, b"GET b");
    let (id, st, _) = kvc.recv().expect("EXTERNAL_ERROR");
    assert_eq!((id, st), (22, EXTERNAL_ERROR));
    assert!(t1.elapsed() < Duration::from_secs(6));
    assert_eq!(fp.lambda_stats(22)["external_errors"], 1);
}
