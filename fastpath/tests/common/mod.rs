//! Shared helpers of the integration tests: start `nearfaas-fastpath`, talk to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

// The wire format's status codes and helpers: the crate's own (src/wire.rs), not a copy.
// (Each test binary uses some of them.)
#[allow(unused_imports)]
pub use nearfaas_fastpath::wire::{
    self, BAD_REQUEST, EXTERNAL_ERROR, HOST_ERROR, HOST_OK, OK, OVERLOADED, TIMEOUT, TOO_LARGE,
    TRAP, UNKNOWN,
};

/// fastpath/lambdas/build, built once per test binary with `make -C fastpath/lambdas`.
pub fn lambdas() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("lambdas");
            let st = Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(&dir)
                .status()
                .expect("run make");
            assert!(st.success(), "make -C {} failed", dir.display());
            dir.join("build")
        })
        .clone()
}

pub fn wasm(name: &str) -> String {
    lambdas()
        .join(format!("{name}.wasm"))
        .to_string_lossy()
        .into_owned()
}

/// A TCP connection to 127.0.0.1:`port` from source address 127.0.0.`last` (all of 127/8 is
/// loopback: another peer IP, as any local process may bind).
pub fn connect_port_from(port: u16, last: u8) -> TcpStream {
    use std::os::fd::FromRawFd;
    let addr = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, bound and connected with valid sockaddr_in structs; the fd is
    // handed to the TcpStream, which owns it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let src = addr([127, 0, 0, last], 0);
        assert_eq!(
            libc::bind(fd, &src as *const _ as *const libc::sockaddr, len),
            0,
            "bind"
        );
        let dst = addr([127, 0, 0, 1], port);
        assert_eq!(
            libc::connect(fd, &dst as *const _ as *const libc::sockaddr, len),
            0,
            "connect"
        );
        TcpStream::from_raw_fd(fd)
    }
}

pub fn tmpdir(tag: &str) -> PathBuf {
    static N: Mutex<u32> = Mutex::new(0);
    let n = {
        let mut g = N.lock().unwrap();
        *g += 1;
        *g
    };
    let d = std::env::temp_dir().join(format!("nf-fastpath-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The control key every test executor gets (hex, written to a mode-0600 file).
pub const KEY_HEX: &str = "6e656172666161732d746573742d6b65792d6e6f742d7365637265742d2d2d21";

/// Write `hex` to `dir/control.key` with mode 0600; returns its path.
pub fn key_file(dir: &std::path::Path, hex: &str) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join("control.key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&p)
        .unwrap();
    f.write_all(hex.as_bytes()).unwrap();
    p
}

/// HMAC-SHA256(key, nonce) in hex: the answer to a control challenge.
pub fn hmac_hex(key: &[u8], nonce: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(nonce);
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Read one JSON line.
pub fn read_json(r: &mut BufReader<TcpStream>) -> Option<Value> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => serde_json::from_str(&line).ok(),
    }
}

/// Open a control connection and answer its challenge with `key` (None: answer nothing).
/// Returns the connection and the executor's reply to the answer.
pub fn control_conn(
    fp: &Fp,
    key: Option<&[u8]>,
) -> (BufReader<TcpStream>, TcpStream, Option<Value>) {
    let s = TcpStream::connect(("127.0.0.1", fp.port("control"))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let challenge = read_json(&mut r).expect("a challenge line");
    let nonce = unhex(challenge["challenge"].as_str().expect("challenge is hex"));
    let reply = key.map(|k| {
        let mut line =
            serde_json::to_vec(&json!({"op": "auth", "hmac": hmac_hex(k, &nonce)})).unwrap();
        line.push(b'\n');
        w.write_all(&line).unwrap();
        read_json(&mut r).expect("an answer to auth")
    });
    (r, w, reply)
}

/// The RSS of a process in KiB (VmRSS in /proc/<pid>/status).
pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

pub struct Fp {
    pub child: Child,
    pub ready: Value,
    pub dir: PathBuf,
    ctl: Mutex<Option<(BufReader<TcpStream>, TcpStream)>>,
}

impl Fp {
    /// Start the executor with `extra` arguments (plus --ready-file, --unix and --tcp).
    pub fn start(extra: &[&str]) -> Fp {
        let dir = tmpdir("srv");
        let ready = dir.join("ready.json");
        let unix = dir.join("fp.sock");
        let key = key_file(&dir, KEY_HEX);
        let child = Command::new(env!("CARGO_BIN_EXE_nearfaas-fastpath"))
            .args([
                "--udp",
                "127.0.0.1:0",
                "--tcp",
                "127.0.0.1:0",
                "--control",
                "127.0.0.1:0",
            ])
            .arg("--unix")
            .arg(&unix)
            .arg("--ready-file")
            .arg(&ready)
            .arg("--control-key-file")
            .arg(&key)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn nearfaas-fastpath");
        let t = Instant::now();
        let ready: Value = loop {
            if let Ok(s) = std::fs::read_to_string(&ready) {
                break serde_json::from_str(&s).expect("ready file is JSON");
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no ready file");
            std::thread::sleep(Duration::from_millis(10));
        };
        Fp {
            child,
            ready,
            dir,
            ctl: Mutex::new(None),
        }
    }

    pub fn port(&self, k: &str) -> u16 {
        self.ready[k].as_u64().unwrap() as u16
    }

    pub fn udp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.port("udp"))
    }

    pub fn unix_path(&self) -> PathBuf {
        PathBuf::from(self.ready["unix"].as_str().unwrap())
    }

    /// One control request; returns the reply object.
    pub fn ctl(&self, req: Value) -> Value {
        let mut g = self.ctl.lock().unwrap();
        if g.is_none() {
            let (r, w, reply) = control_conn(self, Some(&unhex(KEY_HEX)));
            assert_eq!(reply.unwrap()["ok"], true, "control authentication");
            *g = Some((r, w));
        }
        let (r, w) = g.as_mut().unwrap();
        let mut line = serde_json::to_vec(&req).unwrap();
        line.push(b'\n');
        w.write_all(&line).unwrap();
        let mut resp = String::new();
        r.read_line(&mut resp).unwrap();
        serde_json::from_str(&resp).unwrap()
    }

    pub fn deploy_wasm(&self, id: u64, name: &str, extra: Value) -> Value {
        let mut req =
            json!({"op": "deploy", "id": id, "name": name, "kind": "wasm", "path": wasm(name)});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = self.ctl(req);
        assert_eq!(r["ok"], true, "deploy {name}: {r}");
        r
    }

    pub fn deploy_native(&self, id: u64, native: &str, extra: Value) -> Value {
        let mut req =
            json!({"op": "deploy", "id": id, "name": native, "kind": "native", "native": native});
        for (k, v) in extra.as_object().unwrap() {
            req[k] = v.clone();
        }
        let r = self.ctl(req);
        assert_eq!(r["ok"], true, "deploy native {native}: {r}");
        r
    }

    pub fn stats(&self) -> Value {
        let r = self.ctl(json!({"op": "stats"}));
        assert_eq!(r["ok"], true);
        r
    }

    pub fn lambda_stats(&self, id: u64) -> Value {
        let s = self.stats();
        s["lambdas"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .cloned()
            .expect("lambda in stats")
    }

    pub fn client(&self) -> Client {
        Client::new(&self.udp_addr())
    }

    /// SIGTERM; returns the exit status code.
    pub fn stop(mut self) -> Option<i32> {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let st = self.child.wait().unwrap();
        st.code()
    }
}

impl Drop for Fp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Client {
    pub sock: UdpSocket,
    pub to: String,
}

impl Client {
    pub fn new(to: &str) -> Client {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        Client {
            sock,
            to: to.to_string(),
        }
    }

    pub fn send(&self, id: u64, payload: &[u8]) {
        self.sock
            .send_to(&wire::encode_request(id, payload), &self.to)
            .unwrap();
    }

    /// Next reply: (id, status, payload).
    pub fn recv(&self) -> Option<(u64, u8, Vec<u8>)> {
        let mut buf = vec![0u8; 70000];
        let n = self.sock.recv(&mut buf).ok()?;
        let (id, status, payload) =
            wire::decode_reply(&buf[..n]).unwrap_or_else(|| panic!("reply of {n} bytes"));
        Some((id, status, payload.to_vec()))
    }

    /// Request/reply; panics when no reply comes within the read timeout.
    pub fn call(&self, id: u64, payload: &[u8]) -> (u8, Vec<u8>) {
        self.send(id, payload);
        let (rid, st, p) = self
            .recv()
            .unwrap_or_else(|| panic!("no reply for lambda {id}"));
        assert_eq!(rid, id);
        (st, p)
    }
}

/// A TCP client of the framed protocol.
pub struct TcpClient {
    pub s: TcpStream,
}

impl TcpClient {
    pub fn connect(fp: &Fp) -> TcpClient {
        let s = TcpStream::connect(("127.0.0.1", fp.port("tcp"))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        TcpClient { s }
    }
    pub fn send(&mut self, id: u64, payload: &[u8]) {
        let d = wire::frame(&wire::encode_request(id, payload));
        self.s.write_all(&d).unwrap();
    }
    pub fn recv(&mut self) -> (u64, u8, Vec<u8>) {
        let mut l = [0u8; wire::FRAME_LEN];
        self.s.read_exact(&mut l).unwrap();
        let mut b = vec![0u8; u32::from_be_bytes(l) as usize];
        self.s.read_exact(&mut b).unwrap();
        let (id, status, payload) =
            wire::decode_reply(&b).unwrap_or_else(|| panic!("reply frame of {} bytes", b.len()));
        (id, status, payload.to_vec())
    }
}

/// A tiny xorshift PRNG (no dependency).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Stream function `id`'s entry in the executor's `stats` reply.
pub fn stream_stats(st: &serde_json::Value, id: u64) -> serde_json::Value {
    st["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap()
        .clone()
}
