//! Match stage, wasm + native lambdas, isolation, malformed input, TCP framing, control errors.

mod common;
use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

#[test]
fn match_web_wasm_and_native_and_unknown() {
    let fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(7, "web", json!({}));
    fp.deploy_native(8, "web", json!({}));
    let c = fp.client();
    assert_eq!(
        c.call(7, b"hi"),
        (OK, b"Hello from nearfaas fastpath v1: hi".to_vec())
    );
    assert_eq!(
        c.call(8, b"yo"),
        (OK, b"Hello from nearfaas fastpath v1: yo".to_vec())
    );
    assert_eq!(
        c.call(7, b""),
        (OK, b"Hello from nearfaas fastpath v1: ".to_vec())
    );
    // No lambda and no --host: UNKNOWN.
    assert_eq!(c.call(4242, b"x"), (UNKNOWN, vec![]));
    let s = fp.stats();
    assert_eq!(s["global"]["unknown"], 1);
    let w = fp.lambda_stats(7);
    assert_eq!(w["ok"], 2);
    assert_eq!(w["calls"], 2);
    // 64-bit ids (the gateway draws them at random, issue 39): one that shares the low 32 or
    // 16 bits of a deployed id, or differs in one high bit, is another id, and UNKNOWN.
    let big: u64 = 0xC3A5_9E1D_0000_10F2;
    fp.deploy_native(big, "web", json!({}));
    assert_eq!(
        c.call(big, b"w"),
        (OK, b"Hello from nearfaas fastpath v1: w".to_vec())
    );
    for other in [big & 0xFFFF_FFFF, big ^ (1 << 63), big + 1, u64::MAX, 0] {
        assert_eq!(c.call(other, b"x"), (UNKNOWN, vec![]), "id {other:#x}");
    }
    assert_eq!(fp.stats()["global"]["unknown"], 6);
    // remove -> UNKNOWN
    assert_eq!(fp.ctl(json!({"op": "remove", "id": 7}))["ok"], true);
    assert_eq!(c.call(7, b"hi").0, UNKNOWN);
    assert_eq!(fp.stop(), Some(0), "SIGTERM exits 0");
}

#[test]
fn counter_state_persists_per_instance() {
    let fp = Fp::start(&["--workers", "1", "--pin", "--queue-depth", "8"]);
    fp.deploy_wasm(9, "counter", json!({}));
    let c = fp.client();
    for i in 1..=20 {
        assert_eq!(c.call(9, b""), (OK, i.to_string().into_bytes()));
    }
}

#[test]
fn isolation_trap_timeout_and_memory() {
    let fp = Fp::start(&["--workers", "1"]);
    fp.deploy_wasm(11, "oob", json!({}));
    fp.deploy_wasm(12, "spin", json!({"timeout_ms": 30}));
    fp.deploy_wasm(13, "secret", json!({}));
    fp.deploy_wasm(14, "snoop", json!({}));
    fp.deploy_wasm(7, "web", json!({}));
    let c = fp.client();
    for mode in [&b"r"[..], b"w", b"u", b"d", b""] {
        let (st, msg) = c.call(11, mode);
        assert_eq!(
            st,
            TRAP,
            "mode {:?}: {}",
            mode,
            String::from_utf8_lossy(&msg)
        );
        // The instance is rebuilt and the server keeps serving.
        assert_eq!(c.call(11, b"o"), (OK, b"ok".to_vec()));
        assert_eq!(c.call(7, b"a").0, OK);
    }
    // spin -> TIMEOUT close to its 30 ms budget
    for _ in 0..3 {
        let t = Instant::now();
        let (st, _) = c.call(12, b"");
        let el = t.elapsed();
        assert_eq!(st, TIMEOUT);
        assert!(
            el >= Duration::from_millis(25) && el < Duration::from_millis(150),
            "timeout took {el:?}"
        );
        assert_eq!(c.call(7, b"b").0, OK);
    }
    let l = fp.lambda_stats(12);
    assert_eq!(l["timeouts"], 3);
    assert_eq!(fp.lambda_stats(11)["traps"], 5);

    // secret/snoop: snoop reads the secret's address in its own memory and sees no secret.
    let secret = b"TOP-SECRET-0123456789";
    assert_eq!(c.call(13, secret), (OK, b"ok".to_vec()));
    // secret's buffer address: the same module layout puts `secret` after nf_buf; scan snoop's
    // whole data area instead of relying on one address.
    let mut found = false;
    let mut addr = 0u32;
    while addr < 64 * 1024 {
        let (st, bytes) = c.call(14, addr.to_string().as_bytes());
        assert_eq!(st, OK, "snoop at {addr}");
        if bytes.windows(4).any(|w| w == b"TOP-" || w == b"SECR") {
            found = true;
        }
        addr += 16;
    }
    assert!(!found, "snoop saw the secret");
    // Out of its own memory: TRAP, not someone else's bytes.
    assert_eq!(c.call(14, b"4294967280").0, TRAP);
}

/// Threads of the executor's process now (/proc/<pid>/task).
fn threads(fp: &Fp) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", fp.child.id()))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn malformed_packets_are_counted_and_never_crash() {
    let mut fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(7, "web", json!({}));
    fp.deploy_wasm(9, "counter", json!({})); // 4 KiB buffer
    fp.deploy_wasm(11, "oob", json!({}));
    fp.deploy_wasm(14, "snoop", json!({}));
    fp.deploy_native(20, "kv", json!({})); // no external address
    fp.deploy_wasm(21, "kv", json!({}));
    fp.deploy_native(22, "gray", json!({}));
    let c = fp.client();
    // short datagrams: dropped, counted
    for n in 0..4 {
        c.sock.send_to(&vec![1u8; n], &c.to).unwrap();
    }
    // oversized for the lambda's buffer: TOO_LARGE
    assert_eq!(c.call(9, &vec![b'x'; 5000]).0, TOO_LARGE);
    assert_eq!(fp.lambda_stats(9)["too_large"], 1);
    // unknown id
    assert_eq!(c.call(999, b"?").0, UNKNOWN);
    // BAD_REQUEST: negative return
    assert_eq!(c.call(14, b"not a number").0, BAD_REQUEST);
    assert_eq!(c.call(22, b"abc").0, BAD_REQUEST);
    // external call without an external address
    assert_eq!(c.call(20, b"GET k").0, EXTERNAL_ERROR);
    assert_eq!(c.call(21, b"GET k").0, EXTERNAL_ERROR);
    let t = Instant::now();
    while fp.stats()["global"]["malformed_short"] != 4 {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "malformed_short not counted: {}",
            fp.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    // Fuzz: random datagrams, ids mostly among the deployed ones; nothing crashes. A panic ends
    // only its own thread (the process lives on), so count the executor's threads too.
    let threads_before = threads(&fp);
    let ids = [7u64, 9, 11, 14, 20, 21, 22, 5, 65535, u64::MAX];
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let fuzz = Client::new(&fp.udp_addr());
    for i in 0..3000 {
        let len = (rng.next() % 1500) as usize;
        let mut d: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if len >= wire::ID_LEN && !rng.next().is_multiple_of(4) {
            let id = ids[(rng.next() % ids.len() as u64) as usize];
            d[..wire::ID_LEN].copy_from_slice(&id.to_be_bytes());
        }
        fuzz.sock.send_to(&d, &fuzz.to).unwrap();
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Still running, with every thread it had (receivers, workers, control), ...
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        fp.child.try_wait().unwrap(),
        None,
        "the executor exited during the fuzz"
    );
    assert_eq!(
        threads(&fp),
        threads_before,
        "the executor lost a thread during the fuzz (a panic?)"
    );
    // ... and still answering (both the data path and the control port).
    assert_eq!(
        c.call(7, b"alive"),
        (OK, b"Hello from nearfaas fastpath v1: alive".to_vec())
    );
    assert_eq!(fp.ctl(json!({"op": "ping"}))["ok"], true);
    let code = fp.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn tcp_framing_replies_in_order() {
    let fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(7, "web", json!({}));
    fp.deploy_native(8, "web", json!({}));
    fp.deploy_wasm(9, "counter", json!({}));
    let mut t = TcpClient::connect(&fp);
    let n = 300;
    for i in 0..n {
        let id = [7u64, 8, 9, 4242][i % 4];
        t.send(id, format!("m{i}").as_bytes());
    }
    for i in 0..n {
        let id = [7u64, 8, 9, 4242][i % 4];
        let (rid, st, p) = t.recv();
        assert_eq!(rid, id, "reply {i} out of order");
        match id {
            7 | 8 => {
                assert_eq!(st, OK);
                assert_eq!(
                    p,
                    format!("Hello from nearfaas fastpath v1: m{i}").into_bytes()
                );
            }
            9 => assert_eq!(st, OK),
            _ => assert_eq!(st, UNKNOWN),
        }
    }
}

/// Each request is refused (`ok: false`) with an error that starts with the field at fault.
fn assert_rejected_naming(fp: &Fp, cases: &[(serde_json::Value, &str)]) {
    for (req, field) in cases {
        let r = fp.ctl(req.clone());
        assert_eq!(r["ok"], false, "{req} was accepted: {r}");
        let e = r["error"].as_str().unwrap();
        assert!(
            e.starts_with(field),
            "{req}: error {e:?} does not name {field}"
        );
    }
    // Refusing them cost the executor nothing: it still answers.
    assert_eq!(fp.ctl(json!({"op": "ping"}))["ok"], true);
}

#[test]
fn deploy_rejects_bad_id_weight_and_timeout_naming_the_field() {
    let fp = Fp::start(&["--workers", "1"]);
    assert_rejected_naming(
        &fp,
        &[
            (
                json!({"op": "deploy", "id": "7", "kind": "native", "native": "web"}),
                "id",
            ),
            (
                json!({"op": "deploy", "id": -1, "kind": "native", "native": "web"}),
                "id",
            ),
            (
                json!({"op": "deploy", "kind": "native", "native": "web"}),
                "id",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "weight": 0}),
                "weight",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "weight": 1.5}),
                "weight",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "weight": "2"}),
                "weight",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "timeout_ms": 0}),
                "timeout_ms",
            ),
        ],
    );
}

#[test]
fn deploy_rejects_bad_kind_code_and_external_naming_the_field() {
    let fp = Fp::start(&["--workers", "1"]);
    assert_rejected_naming(
        &fp,
        &[
            (json!({"op": "deploy", "id": 1, "kind": "elf"}), "kind"),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "nope"}),
                "native",
            ),
            (json!({"op": "deploy", "id": 1, "kind": "wasm"}), "path"),
            (
                json!({"op": "deploy", "id": 1, "kind": "wasm", "path": "/nonexistent.wasm"}),
                "path",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "wasm", "path": "/etc/hostname"}),
                "path",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "kv", "external": "nohost"}),
                "external",
            ),
        ],
    );
}

#[test]
fn deploy_rejects_bad_fuel_and_unknown_fields_naming_the_field() {
    let fp = Fp::start(&["--workers", "1"]);
    assert_rejected_naming(
        &fp,
        &[
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "fuel": 100}),
                "fuel",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "wasm", "path": wasm("web"), "fuel": -5}),
                "fuel",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "wasm", "path": wasm("web"), "fuel": "lots"}),
                "fuel",
            ),
            (
                json!({"op": "deploy", "id": 1, "kind": "native", "native": "web", "weigth": 2}),
                "weigth",
            ),
        ],
    );
}

#[test]
fn control_rejects_bad_ops_and_removing_a_missing_lambda_naming_the_field() {
    let fp = Fp::start(&["--workers", "1"]);
    assert_rejected_naming(
        &fp,
        &[
            (json!({"op": "remove", "id": 3}), "id"),
            (json!({"op": "launch"}), "op"),
            (json!({"id": 3}), "op"),
        ],
    );
}

#[test]
fn deploy_of_a_module_with_a_non_wasi_import_names_the_import() {
    let fp = Fp::start(&["--workers", "1"]);
    let dir = tmpdir("imp");
    let src = dir.join("imp.c");
    std::fs::write(
        &src,
        "__attribute__((import_module(\"env\"), import_name(\"evil\"))) int evil(int);\n\
         static char b[64];\n\
         __attribute__((export_name(\"nf_buffer\"))) int nf_buffer(void){return (int)b;}\n\
         __attribute__((export_name(\"nf_buffer_size\"))) int nf_buffer_size(void){return 64;}\n\
         __attribute__((export_name(\"nf_handle\"))) int nf_handle(int n){return evil(n);}\n",
    )
    .unwrap();
    let out = dir.join("imp.wasm");
    let st = std::process::Command::new("clang")
        .args([
            "--target=wasm32-wasi",
            "-O2",
            "-nostdlib",
            "-Wl,--no-entry",
            "-Wl,--allow-undefined",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let r = fp.ctl(json!({"op": "deploy", "id": 1, "kind": "wasm", "path": out.to_str().unwrap()}));
    assert_eq!(r["ok"], false);
    assert!(r["error"].as_str().unwrap().contains("env.evil"), "{r}");
}

#[test]
fn control_connection_survives_garbage_lines() {
    let fp = Fp::start(&["--workers", "1"]);
    {
        use std::io::{BufRead, Write};
        let (mut r, mut s, auth) = control_conn(&fp, Some(&unhex(KEY_HEX)));
        assert_eq!(auth.unwrap()["ok"], true);
        s.write_all(b"this is not json\n[1,2]\n{\"op\":\"ping\"}\n")
            .unwrap();
        for expect_ok in [false, false, true] {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["ok"], expect_ok, "{line}");
        }
    }
    assert_eq!(fp.ctl(json!({"op": "ping"}))["ok"], true);
}

#[test]
fn wasi_imports_are_stubbed() {
    // A wasi-libc style module: imports fd_write (stubbed -> ENOSYS) and proc_exit (traps).
    let fp = Fp::start(&["--workers", "1"]);
    let dir = tmpdir("wasi");
    let src = dir.join("w.c");
    std::fs::write(
        &src,
        "__attribute__((import_module(\"wasi_snapshot_preview1\"), import_name(\"fd_write\"))) int fd_write(int,int,int,int);\n\
         __attribute__((import_module(\"wasi_snapshot_preview1\"), import_name(\"proc_exit\"))) void proc_exit(int);\n\
         static char b[64];\n\
         __attribute__((export_name(\"nf_buffer\"))) int nf_buffer(void){return (int)b;}\n\
         __attribute__((export_name(\"nf_buffer_size\"))) int nf_buffer_size(void){return 64;}\n\
         __attribute__((export_name(\"nf_handle\"))) int nf_handle(int n){ if (n && b[0]=='x') proc_exit(1); b[0] = (char)fd_write(1,0,0,0); return 1; }\n",
    )
    .unwrap();
    let out = dir.join("w.wasm");
    let st = std::process::Command::new("clang")
        .args([
            "--target=wasm32-wasi",
            "-O2",
            "-nostdlib",
            "-Wl,--no-entry",
            "-Wl,--allow-undefined",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let r = fp.ctl(json!({"op": "deploy", "id": 3, "kind": "wasm", "path": out.to_str().unwrap()}));
    assert_eq!(r["ok"], true, "{r}");
    let c = fp.client();
    assert_eq!(c.call(3, b""), (OK, vec![52u8]));
    assert_eq!(c.call(3, b"x").0, TRAP);
    assert_eq!(c.call(3, b""), (OK, vec![52u8]));
}

#[test]
fn fuel_budget_interrupts_and_state_persists() {
    let fp = Fp::start(&["--workers", "1"]);
    // A generous timeout: the fuel budget is what stops the spin.
    fp.deploy_wasm(12, "spin", json!({"fuel": 2_000_000, "timeout_ms": 10_000}));
    fp.deploy_wasm(9, "counter", json!({"fuel": 100_000}));
    fp.deploy_wasm(7, "web", json!({}));
    let c = fp.client();
    let t = Instant::now();
    assert_eq!(c.call(12, b"").0, TIMEOUT);
    assert!(
        t.elapsed() < Duration::from_millis(1000),
        "fuel did not stop the spin: {:?}",
        t.elapsed()
    );
    for i in 1..=5 {
        assert_eq!(c.call(9, b""), (OK, i.to_string().into_bytes()));
    }
    assert_eq!(c.call(7, b"f").0, OK);
    assert_eq!(fp.lambda_stats(12)["timeouts"], 1);
    assert_eq!(fp.lambda_stats(12)["fuel"], 2_000_000);
}

#[test]
fn a_tcp_client_that_never_reads_is_pushed_back_not_buffered() {
    let fp = Fp::start(&["--workers", "1"]);
    fp.deploy_wasm(7, "web", json!({}));
    let t = TcpClient::connect(&fp);
    let mut w = t.s.try_clone().unwrap();
    // 20,000 requests of 8 KiB whose 8 KiB replies are never read: once the client's receive
    // buffer is full the executor's writer blocks, and its reader must stop taking requests.
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        let payload = vec![b'x'; 8192];
        let mut frame = ((payload.len() + 4) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&7u32.to_be_bytes());
        frame.extend_from_slice(&payload);
        for _ in 0..20_000 {
            if w.write_all(&frame).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let calls = fp.lambda_stats(7)["calls"].as_u64().unwrap();
    assert!(
        calls < 10_000,
        "{calls} requests taken from a client that reads nothing"
    );
    // The executor still serves everyone else.
    assert_eq!(fp.client().call(7, b"ok").0, OK);
    drop(t);
    drop(fp); // stops the executor, which closes the connection and ends the sender
    let _ = sender.join();
}
