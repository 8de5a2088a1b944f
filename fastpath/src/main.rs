//! nearfaas-fastpath: the fast path executor (a software λ-NIC). The wire format, status codes,
//! control protocol, lambda ABI and shared-memory protocol are in docs/fastpath.md.
//!
//! Threads:
//! * `udp`: one socket; parses `id` and matches it in a dense table (`Vec` of 65,536 slots, each
//!   an `RwLock<Option<Arc<Lambda>>>`); a hit is queued on that lambda's queue (bounded by
//!   `--queue-depth`, else OVERLOADED), a miss goes to the host (`--host`) or is answered UNKNOWN.
//! * `tcp` + a reader and a writer thread per connection (the writer puts replies back in
//!   request order); `unix`: Unix datagrams carrying a memfd (SCM_RIGHTS).
//! * `worker-N` (`--workers`, optionally `--pin`ned): run to completion; they pick the next job by
//!   deficit round-robin across lambdas with waiting jobs (quantum = weight) or from one FIFO
//!   (`--sched fifo`). Each worker keeps one wasm instance per lambda version, so global state
//!   persists; a trap or timeout drops it (rebuilt on the next call).
//! * `epoch`: advances the wasmtime epoch once per millisecond (lambda timeouts).
//! * `host`: answers from the gateway's host port (token-matched, expired after 5 s).
//! * external I/O: per external address a writer thread (one persistent TCP connection) and a
//!   reader thread that frames memcached replies and queues `nf_resume` continuations, so workers
//!   never wait on an external call.
//! * `control`: JSON lines (deploy / remove / stats / ping), each connection authenticated first
//!   by challenge-response over the `--control-key-file` key (src/auth.rs). A deploy compiles and
//!   validates the new module first, then swaps the slot's `Arc`; queued and running calls
//!   finish on the old one.
//!
//! Limits (docs/fastpath.md, "Security"): TCP connections are capped (`--max-connections`; each
//! holds a reader and a writer thread), a frame over `--max-frame` closes its connection, and a
//! frame's buffer grows only as its bytes arrive.

mod auth;
mod control;
mod lambda;
mod sched;
mod server;
mod shm;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};

const USAGE: &str =
    "usage: nearfaas-fastpath --control-key-file PATH [--udp ADDR] [--tcp ADDR] [--control ADDR]
  [--unix PATH] [--workers N] [--host ADDR] [--ready-file PATH] [--queue-depth N]
  [--sched drr|fifo] [--pin] [--max-connections N] [--max-frame BYTES]
--control-key-file: a file (mode 0600) holding the control port's key as hex, e.g. 64 hex digits
defaults: --udp 127.0.0.1:0 --control 127.0.0.1:0 --workers <cores> --queue-depth 1024 --sched drr
  --max-connections 256 --max-frame 2097152";

struct Args {
    udp: String,
    tcp: Option<String>,
    control: String,
    unix: Option<String>,
    workers: usize,
    host: Option<SocketAddr>,
    ready_file: Option<String>,
    queue_depth: usize,
    mode: sched::Mode,
    pin: bool,
    control_key_file: Option<String>,
    max_conns: usize,
    max_frame: usize,
}

fn die(msg: &str) -> ! {
    eprintln!("nearfaas-fastpath: {msg}\n{USAGE}");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut a = Args {
        udp: "127.0.0.1:0".into(),
        tcp: None,
        control: "127.0.0.1:0".into(),
        unix: None,
        workers: cores,
        host: None,
        ready_file: None,
        queue_depth: 1024,
        mode: sched::Mode::Drr,
        pin: false,
        control_key_file: None,
        max_conns: 256,
        max_frame: 2 << 20,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--udp" => a.udp = val(),
            "--tcp" => a.tcp = Some(val()),
            "--control" => a.control = val(),
            "--unix" => a.unix = Some(val()),
            "--workers" => {
                a.workers = val()
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .unwrap_or_else(|| die("--workers: use an integer >= 1"))
            }
            "--host" => {
                let v = val();
                a.host = Some(
                    v.to_socket_addrs()
                        .ok()
                        .and_then(|mut x| x.next())
                        .unwrap_or_else(|| {
                            die(&format!("--host: {v:?} is not a host:port address"))
                        }),
                )
            }
            "--ready-file" => a.ready_file = Some(val()),
            "--queue-depth" => {
                a.queue_depth = val()
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .unwrap_or_else(|| die("--queue-depth: use an integer >= 1"))
            }
            "--sched" => {
                a.mode = match val().as_str() {
                    "drr" | "wfq" => sched::Mode::Drr,
                    "fifo" => sched::Mode::Fifo,
                    other => die(&format!("--sched: {other:?}; use drr or fifo")),
                }
            }
            "--pin" => a.pin = true,
            "--control-key-file" => a.control_key_file = Some(val()),
            "--max-connections" => {
                a.max_conns = val()
                    .parse()
                    .ok()
                    .filter(|&n| n >= 1)
                    .unwrap_or_else(|| die("--max-connections: use an integer >= 1"))
            }
            "--max-frame" => {
                a.max_frame = val()
                    .parse()
                    .ok()
                    .filter(|&n| (8..=(64 << 20)).contains(&n))
                    .unwrap_or_else(|| die("--max-frame: use a byte count from 8 to 67108864"))
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other => die(&format!("unknown argument {other:?}")),
        }
    }
    a
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .expect("spawn thread");
}

fn main() {
    let args = parse_args();
    // Fail closed: without a key the control port (which can swap any lambda's code) would be
    // open to every local user.
    let key = match &args.control_key_file {
        None => die(
            "--control-key-file is required: the control port accepts only clients that \
             prove they hold its key (write 64 hex digits to a mode-0600 file)",
        ),
        Some(p) => {
            Arc::new(auth::load_key(p).unwrap_or_else(|e| die(&format!("--control-key-file: {e}"))))
        }
    };
    // SIGTERM/SIGINT are taken synchronously by the main thread (blocked in every thread).
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGTERM);
    sigs.add(Signal::SIGINT);
    sigs.thread_block().expect("block signals");

    let udp =
        UdpSocket::bind(&args.udp).unwrap_or_else(|e| die(&format!("--udp {}: {e}", args.udp)));
    let tcp = args
        .tcp
        .as_ref()
        .map(|t| TcpListener::bind(t).unwrap_or_else(|e| die(&format!("--tcp {t}: {e}"))));
    let control = TcpListener::bind(&args.control)
        .unwrap_or_else(|e| die(&format!("--control {}: {e}", args.control)));
    let unix = args.unix.as_ref().map(|p| {
        let _ = std::fs::remove_file(p);
        UnixDatagram::bind(p).unwrap_or_else(|e| die(&format!("--unix {p}: {e}")))
    });
    let engine =
        lambda::make_engine(false).unwrap_or_else(|e| die(&format!("wasmtime engine: {e:#}")));
    let cfg = server::Config {
        workers: args.workers,
        pin: args.pin,
        mode: args.mode,
        queue_depth: args.queue_depth,
        host: args.host,
        max_frame: args.max_frame,
        max_conns: args.max_conns,
    };
    let srv = Arc::new(
        server::Server::new(engine.clone(), udp, unix, &cfg)
            .unwrap_or_else(|e| die(&format!("setup: {e}"))),
    );
    server::SrvRef::set(srv.clone());

    let stop = Arc::new(AtomicBool::new(false));
    {
        let (srv, s) = (srv.clone(), stop.clone());
        spawn("epoch", move || server::ticker(srv, s));
    }
    for i in 0..cfg.workers {
        let s = srv.clone();
        let pin = cfg.pin;
        spawn(&format!("worker-{i}"), move || {
            server::worker_loop(s, i, pin)
        });
    }
    {
        let s = srv.clone();
        spawn("udp", move || server::udp_loop(s));
    }
    let tcp_port = tcp.as_ref().map(|l| l.local_addr().unwrap());
    if let Some(l) = tcp {
        let s = srv.clone();
        spawn("tcp", move || server::tcp_accept_loop(s, l));
    }
    if srv.unix.is_some() {
        let s = srv.clone();
        spawn("unix", move || server::unix_loop(s));
    }
    if srv.host.is_some() {
        let s = srv.clone();
        spawn("host", move || server::host_loop(s));
    }
    let control_addr = control.local_addr().unwrap();
    {
        let s = srv.clone();
        spawn("control", move || control::control_loop(s, control, key));
    }

    let udp_addr = srv.udp.local_addr().unwrap();
    let ready = serde_json::json!({
        "udp": udp_addr.port(),
        "tcp": tcp_port.map(|l| l.port()),
        "control": control_addr.port(),
        "udp_addr": udp_addr.to_string(),
        "tcp_addr": tcp_port.map(|l| l.to_string()),
        "control_addr": control_addr.to_string(),
        "unix": args.unix,
        "pid": std::process::id(),
        "workers": cfg.workers,
        "sched": format!("{:?}", cfg.mode).to_lowercase(),
    });
    match &args.ready_file {
        Some(p) => {
            let tmp = format!("{p}.tmp.{}", std::process::id());
            if let Err(e) =
                std::fs::write(&tmp, ready.to_string()).and_then(|_| std::fs::rename(&tmp, p))
            {
                die(&format!("--ready-file {p}: {e}"));
            }
        }
        None => println!("{ready}"),
    }

    let sig = sigs.wait();
    eprintln!("nearfaas-fastpath: {:?}, shutting down", sig);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    srv.sched.shutdown();
    if let Some(p) = &args.unix {
        let _ = std::fs::remove_file(p);
    }
    std::process::exit(0);
}
