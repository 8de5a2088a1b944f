//! Hardening (docs/fastpath.md, "Security"): the control port's challenge-response, the key
//! file's checks, bounded TCP frames and per-connection memory, and the connection cap.

mod common;
use common::*;
use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the peer has closed `s` (EOF or reset) within `within`.
fn closed(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // e.g. the refusal line before the close
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false, // timed out: still open
        }
    }
}

fn global(fp: &Fp, key: &str) -> u64 {
    fp.stats()["global"][key].as_u64().unwrap()
}

#[test]
fn control_ops_without_the_challenge_answer_are_refused() {
    let fp = Fp::start(&["--workers", "1"]);
    // An op sent straight away (the old protocol): refused, not run, and the connection closed.
    let (mut r, mut w, _) = control_conn(&fp, None);
    let deploy = json!({"op": "deploy", "id": 3, "name": "web", "kind": "native", "native": "web"});
    w.write_all(format!("{deploy}\n").as_bytes()).unwrap();
    let reply = read_json(&mut r).expect("a refusal line");
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().starts_with("auth:"),
        "{reply}"
    );
    assert!(
        closed(&mut w, Duration::from_secs(5)),
        "connection left open"
    );
    assert!(read_json(&mut r).is_none());
    // Not deployed: a call to 3 is UNKNOWN, and the failure is counted.
    assert_eq!(fp.client().call(3, b"x").0, UNKNOWN);
    assert_eq!(fp.stats()["lambdas"].as_array().unwrap().len(), 0);
    assert_eq!(global(&fp, "auth_failures"), 1);
    // A client that answers nothing at all is dropped after the auth timeout (5 s).
    let (_r, mut silent, _) = control_conn(&fp, None);
    assert!(
        closed(&mut silent, Duration::from_secs(8)),
        "a silent client kept its connection"
    );
    assert_eq!(global(&fp, "auth_failures"), 2);
}

#[test]
fn a_wrong_or_replayed_hmac_is_refused() {
    let fp = Fp::start(&["--workers", "1"]);
    // The wrong key.
    let (mut r, mut w, reply) = control_conn(&fp, Some(b"not-the-key-but-16-bytes-long"));
    let reply = reply.unwrap();
    assert_eq!(reply["ok"], false, "{reply}");
    assert!(closed(&mut w, Duration::from_secs(5)));
    assert!(read_json(&mut r).is_none());
    // The right key over an old nonce (a recorded answer replayed): refused.
    let (mut r2, mut w2, _) = control_conn(&fp, None);
    let stale = hmac_hex(&unhex(KEY_HEX), &[0u8; 32]);
    w2.write_all(format!("{}\n", json!({"op": "auth", "hmac": stale})).as_bytes())
        .unwrap();
    assert_eq!(read_json(&mut r2).unwrap()["ok"], false);
    assert!(closed(&mut w2, Duration::from_secs(5)));
    // Garbage instead of hex.
    let (mut r3, mut w3, _) = control_conn(&fp, None);
    w3.write_all(b"{\"op\": \"auth\", \"hmac\": \"zz\"}\n")
        .unwrap();
    assert_eq!(read_json(&mut r3).unwrap()["ok"], false);
    // The right answer works, and every refusal was counted.
    assert_eq!(fp.ctl(json!({"op": "ping"}))["ok"], true);
    assert_eq!(global(&fp, "auth_failures"), 3);
}

fn run_bare(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nearfaas-fastpath"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn no_key_file_no_start() {
    // Fail closed: without the flag, with a file others can read, or with junk in it.
    let (code, err) = run_bare(&["--workers", "1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--control-key-file is required"), "{err}");
    let dir = tmpdir("keys");
    let p = key_file(&dir, KEY_HEX);
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let (code, err) = run_bare(&["--control-key-file", p.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("chmod 600"), "{err}");
    let p = key_file(&tmpdir("keys"), "not hex at all");
    let (code, err) = run_bare(&["--control-key-file", p.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("hex"), "{err}");
    let (code, err) = run_bare(&["--control-key-file", "/nonexistent/key"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/key"), "{err}");
}

fn tcp(fp: &Fp) -> TcpStream {
    TcpStream::connect(("127.0.0.1", fp.port("tcp"))).unwrap()
}

#[test]
fn declared_frames_cost_nothing_until_their_bytes_arrive() {
    // The frame limit raised to 16 MiB so that these frames are legal: the old executor
    // allocated (and zeroed) the declared length at once, 1.6 GiB for 100 connections.
    let fp = Fp::start(&[
        "--workers",
        "1",
        "--max-frame",
        "16777216",
        "--max-connections-per-peer",
        "256",
    ]);
    fp.deploy_native(7, "web", json!({}));
    let pid = fp.child.id();
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(pid);
    let mut conns = Vec::new();
    for _ in 0..100 {
        let mut s = tcp(&fp);
        let mut d = (16u32 << 20).to_be_bytes().to_vec();
        d.extend_from_slice(&7u64.to_be_bytes()); // the id, then nothing more
        s.write_all(&d).unwrap();
        conns.push(s);
    }
    // Every connection is open and its reader waits in the frame: the executor still answers.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    while fp.stats()["global"]["tcp_conns"] != 100 {
        assert!(t.elapsed() < Duration::from_secs(10), "{}", fp.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let after = rss_kib(pid);
    eprintln!(
        "RSS before {before} KiB, after 100 x 16 MiB-declaring connections {after} KiB (+{} KiB)",
        after.saturating_sub(before)
    );
    assert!(
        after.saturating_sub(before) < 64 * 1024,
        "RSS grew by {} KiB for 100 idle connections",
        after - before
    );
    assert_eq!(fp.client().call(7, b"x").0, OK);
    // A frame that does arrive is still served (the buffer grows as its bytes come).
    let mut t2 = TcpClient::connect(&fp);
    t2.send(7, &vec![b'y'; 60_000]);
    let (id, st, _) = t2.recv();
    assert_eq!((id, st), (7, OK));
    drop(conns);
}

#[test]
fn a_frame_over_the_limit_closes_the_connection() {
    let fp = Fp::start(&["--workers", "1", "--max-frame", "65536"]);
    fp.deploy_native(7, "web", json!({}));
    let mut s = tcp(&fp);
    s.write_all(&(16u32 << 20).to_be_bytes()).unwrap();
    assert!(
        closed(&mut s, Duration::from_secs(5)),
        "16 MiB frame accepted"
    );
    let mut s = tcp(&fp);
    s.write_all(&65_537u32.to_be_bytes()).unwrap();
    assert!(
        closed(&mut s, Duration::from_secs(5)),
        "frame one byte over accepted"
    );
    assert_eq!(global(&fp, "frames_too_large"), 2);
    // Exactly at the limit: served.
    let mut t = TcpClient::connect(&fp);
    t.send(7, &vec![b'z'; 65_536 - wire::ID_LEN]);
    assert_eq!(t.recv().1, OK);
    t.send(7, b"small");
    assert_eq!(t.recv().1, OK);
}

#[test]
fn connections_over_the_cap_are_closed_at_once() {
    let fp = Fp::start(&["--workers", "1", "--max-connections", "4"]);
    fp.deploy_native(7, "web", json!({}));
    let mut open: Vec<TcpClient> = (0..4).map(|_| TcpClient::connect(&fp)).collect();
    for t in open.iter_mut() {
        t.send(7, b"hi");
        assert_eq!(t.recv().1, OK);
    }
    let mut fifth = tcp(&fp);
    assert!(
        closed(&mut fifth, Duration::from_secs(5)),
        "a 5th connection stayed open"
    );
    assert_eq!(global(&fp, "conns_refused"), 1);
    // The four are unaffected; closing one makes room for another.
    open[0].send(7, b"still");
    assert_eq!(open[0].recv().1, OK);
    drop(open.pop());
    let t = Instant::now();
    while fp.stats()["global"]["tcp_conns"] != 3 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut again = TcpClient::connect(&fp);
    again.send(7, b"again");
    assert_eq!(again.recv().1, OK);
}

fn threads(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("Threads:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[test]
fn closed_connections_give_their_threads_back() {
    let fp = Fp::start(&["--workers", "1"]);
    fp.deploy_native(7, "web", json!({}));
    let pid = fp.child.id();
    let base = threads(pid);
    let mut conns: Vec<TcpClient> = (0..40).map(|_| TcpClient::connect(&fp)).collect();
    for t in conns.iter_mut() {
        t.send(7, b"hi");
        assert_eq!(t.recv().1, OK);
    }
    // A reader and a writer per connection.
    assert!(threads(pid) >= base + 80, "{} threads", threads(pid));
    drop(conns);
    let t = Instant::now();
    while threads(pid) > base {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{} threads left after closing every connection (started with {base})",
            threads(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fp.stats()["global"]["tcp_conns"], 0);
}

#[test]
fn idle_connections_are_closed_and_do_not_hold_the_pool() {
    // Issue 39: 256 idle connections used to fill the pool for good, so every new call failed.
    let fp = Fp::start(&[
        "--workers",
        "1",
        "--max-connections",
        "6",
        "--max-connections-per-peer",
        "6",
        "--tcp-idle-ms",
        "300",
    ]);
    fp.deploy_native(7, "web", json!({}));
    // A connection in use (a call every 100 ms, under the idle timeout) is not closed.
    let mut busy = TcpClient::connect(&fp);
    let mut idle: Vec<TcpStream> = (0..5).map(|_| tcp(&fp)).collect();
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(900) {
        busy.send(7, b"hi");
        assert_eq!(busy.recv().1, OK);
        std::thread::sleep(Duration::from_millis(100));
    }
    for s in idle.iter_mut() {
        assert!(
            closed(s, Duration::from_secs(5)),
            "an idle connection stayed open"
        );
    }
    assert_eq!(global(&fp, "conns_idle_closed"), 5);
    busy.send(7, b"still");
    assert_eq!(busy.recv().1, OK);
    // The pool has room again: a new client is served.
    let mut next = TcpClient::connect(&fp);
    next.send(7, b"new");
    assert_eq!(next.recv().1, OK);
}

#[test]
fn one_peer_cannot_take_the_whole_pool() {
    let fp = Fp::start(&[
        "--workers",
        "1",
        "--max-connections",
        "8",
        "--max-connections-per-peer",
        "3",
    ]);
    fp.deploy_native(7, "web", json!({}));
    let mut open: Vec<TcpClient> = (0..3).map(|_| TcpClient::connect(&fp)).collect();
    for t in open.iter_mut() {
        t.send(7, b"hi");
        assert_eq!(t.recv().1, OK);
    }
    let mut fourth = tcp(&fp);
    assert!(
        closed(&mut fourth, Duration::from_secs(5)),
        "a 4th connection from one peer stayed open"
    );
    assert_eq!(global(&fp, "conns_refused_peer"), 1);
    assert_eq!(global(&fp, "conns_refused"), 0); // the pool itself had room
    drop(open.pop());
    let t = Instant::now();
    while fp.stats()["global"]["tcp_conns"] != 2 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut again = TcpClient::connect(&fp);
    again.send(7, b"again");
    assert_eq!(again.recv().1, OK);
}

#[test]
fn more_lambdas_than_instance_slots_all_get_served() {
    // Red team round 5 (issue 39): one tenant's 530 lambdas, each called once, held all 512
    // instance slots, and any other lambda that needed an instance answered TRAP until they
    // were removed. An idle instance is evicted for the lambda that needs one now.
    let fp = Fp::start(&["--workers", "1"]);
    let n = nearfaas_fastpath::lambda::DEFAULT_SLOTS as u64 + 8;
    for id in 1..=n {
        fp.deploy_wasm(id, "web", json!({}));
    }
    let c = fp.client();
    for round in 0..2 {
        for id in 1..=n {
            let (status, _) = c.call(id, b"hi");
            assert_eq!(status, OK, "lambda {id} of {n}, round {round}");
        }
    }
}

#[test]
fn suspended_calls_of_one_group_leave_the_other_groups_slots() {
    // Red team round 6 (issue 39, R3): a suspended sliced call keeps its instance, so one
    // datagram to each of 530 spinning lambdas held every slot and every other tenant's lambda
    // answered OVERLOADED for as long as the sender went on. A group (namespace) holds at most
    // half a pool's slots now (src/quota.rs). 480 MiB: 10 slots an engine, 8 free, share 5.
    let fp = Fp::start(&["--workers", "1", "--pool-memory", "503316480"]);
    let spinners: Vec<u64> = (1..=12).collect();
    for &id in &spinners {
        fp.deploy_wasm(id, "spin", json!({"group": "tenant-b", "timeout_ms": 2000}));
    }
    fp.deploy_wasm(100, "web", json!({"group": "tenant-a"}));
    let attacker = fp.client();
    for &id in &spinners {
        attacker.send(id, b"x");
    }
    // Every spinner's call has been taken up: it runs (in flight, holding an instance,
    // suspended between slices) or was answered OVERLOADED (the event, not a sleep).
    let t = std::time::Instant::now();
    let overloaded = |fp: &Fp| -> u64 {
        spinners
            .iter()
            .map(|&id| fp.lambda_stats(id)["overloaded"].as_u64().unwrap())
            .sum()
    };
    loop {
        let s = fp.stats();
        let in_flight = s["slice"]["in_flight"].as_u64().unwrap();
        if in_flight + overloaded(&fp) == spinners.len() as u64 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{s}");
        std::thread::yield_now();
    }
    // The other group's lambda gets an instance while the spinners run.
    let (status, _) = fp.client().call(100, b"hi");
    assert_eq!(
        status, OK,
        "another group's lambda, with tenant-b's spinners suspended"
    );
    assert_eq!(fp.lambda_stats(100)["group"], "tenant-a");
    assert_eq!(
        overloaded(&fp),
        7,
        "tenant-b holds its share (5 instances), no more"
    );
}

#[test]
fn the_gateways_unix_socket_is_served_when_every_tcp_slot_is_held() {
    // Red team round 7: on loopback one client is many peer IPs (127.0.0.2, .3, ... are any
    // process's to bind), so per-IP shares left the gateway no connection on the TCP port and
    // its fast-path calls answered 502. The gateway's framed calls have a socket of their own.
    use std::os::unix::fs::PermissionsExt;
    let path = tmpdir("gw").join("tcp.sock");
    let fp = Fp::start(&[
        "--max-connections",
        "4",
        "--max-connections-per-peer",
        "2",
        "--tcp-idle-ms",
        "60000",
        "--tcp-unix",
        path.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    fp.deploy_native(7, "web", json!({}));
    let held: Vec<TcpStream> = [2, 2, 3, 3]
        .iter()
        .map(|&a| connect_port_from(fp.port("tcp"), a))
        .collect();
    let t = Instant::now();
    while fp.stats()["global"]["tcp_conns"] != 4 {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", fp.stats());
        std::thread::yield_now();
    }
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for _ in 0..3 {
        s.write_all(&wire::frame(&wire::encode_request(
            7,
            b"GET / HTTP/1.0\r\n\r\n",
        )))
        .unwrap();
        let mut l = [0u8; wire::FRAME_LEN];
        s.read_exact(&mut l).unwrap();
        let mut b = vec![0u8; u32::from_be_bytes(l) as usize];
        s.read_exact(&mut b).unwrap();
        let (id, status, _) = wire::decode_reply(&b).unwrap();
        assert_eq!((id, status), (7, OK));
    }
    drop(held);
}

#[test]
fn the_gateways_control_socket_answers_while_the_tcp_control_port_is_held() {
    // Red team round 7 (F2): 16 connections to the TCP control port from loopback addresses,
    // re-opened as the executor dropped them, stopped every deploy and removal. The gateway's
    // control connections come in on a unix socket of its own (`--control-unix`), with the same
    // challenge-response.
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let path = tmpdir("gw").join("control.sock");
    let fp = Fp::start(&["--control-unix", path.to_str().unwrap()]);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let held: Vec<TcpStream> = (0..16)
        .map(|i| connect_port_from(fp.port("control"), 2 + (i % 3) as u8))
        .collect();
    // Every TCP control slot is taken: one more is closed without a challenge.
    let extra = TcpStream::connect(("127.0.0.1", fp.port("control"))).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut line = String::new();
    assert_eq!(
        std::io::BufReader::new(extra)
            .read_line(&mut line)
            .unwrap_or(0),
        0,
        "{line}"
    );
    // The gateway's socket: authenticate, then deploy and remove.
    let s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut next = || {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        serde_json::from_str::<serde_json::Value>(&l).unwrap()
    };
    let challenge = next();
    let nonce = unhex(challenge["challenge"].as_str().unwrap());
    let mut send = |v: serde_json::Value| {
        let mut b = serde_json::to_vec(&v).unwrap();
        b.push(b'\n');
        w.write_all(&b).unwrap();
    };
    send(json!({"op": "auth", "hmac": hmac_hex(&unhex(KEY_HEX), &nonce)}));
    assert_eq!(next()["ok"], true);
    send(json!({"op": "deploy", "id": 9, "kind": "native", "native": "web"}));
    assert_eq!(next()["ok"], true);
    send(json!({"op": "remove", "id": 9}));
    assert_eq!(next()["ok"], true);
    drop(held);
}
