//! The executor's command line and start-up: bind the sockets, start the threads (see the crate
//! docs), announce the addresses (`--ready-file` or stdout), serve until SIGTERM/SIGINT.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};

use crate::{auth, control, lambda, sched, server, stream};

pub const USAGE: &str =
    "usage: nearfaas-fastpath --control-key-file PATH [--udp ADDR] [--tcp ADDR] [--control ADDR]
  [--unix PATH] [--workers N] [--host ADDR] [--ready-file PATH] [--queue-depth N]
  [--sched drr|fifo] [--pin] [--max-connections N] [--max-connections-per-peer N]
  [--tcp-idle-ms MS] [--max-frame BYTES]
  [--stream ADDR] [--stream-idle-ms MS] [--stream-max-connections N]
  [--tcp-unix PATH] [--stream-unix PATH] [--control-unix PATH]
  [--poll adaptive|spin|block] [--poll-max-us US] [--poll-share FRACTION] [--slice-us US]
  [--pool-memory BYTES]
--control-key-file: a file (mode 0600) holding the control port's key as hex, e.g. 64 hex digits
defaults: --udp 127.0.0.1:0 --control 127.0.0.1:0 --workers <cores> --queue-depth 1024 --sched drr
  --max-connections 256 --max-connections-per-peer 128 --tcp-idle-ms 5000 (a TCP connection with
  nothing in flight that sends nothing for this long is closed) --max-frame 2097152; --stream (stream functions) is off unless given,
  --stream-idle-ms 2000 --stream-max-connections 1024; --poll adaptive --poll-max-us 200 --poll-share 0.1
  (idle workers spin on their socket for a budget learnt from the gaps between requests, then
  block: src/poll.rs); --slice-us 50 (wasm lambdas run in slices of this many microseconds, so
  a light lambda waits about one slice behind a heavy call under drr: src/slice.rs; 0 runs every
  call to completion); --pool-memory 1073741824 (the linear memory of all wasm instances
  together: each of the 3 engines' pools gets BYTES / 16 MiB / 3 slots; src/lambda.rs Pool);
  --tcp-unix / --stream-unix / --control-unix: unix sockets (made mode 0600) serving the TCP
  framing / the stream protocol / the control protocol for the gateway alone, outside the TCP
  ports' connection caps";

pub struct Args {
    pub udp: String,
    pub tcp: Option<String>,
    pub control: String,
    pub unix: Option<String>,
    pub workers: usize,
    pub host: Option<SocketAddr>,
    pub ready_file: Option<String>,
    pub queue_depth: usize,
    pub mode: sched::Mode,
    pub pin: bool,
    pub control_key_file: Option<String>,
    pub max_conns: usize,
    /// Most TCP connections open at once from one peer IP address.
    pub max_conns_per_peer: usize,
    /// A TCP connection with no request in flight that sends nothing for this long is closed.
    pub tcp_idle_ms: u64,
    pub max_frame: usize,
    /// The stream functions' listener (off when None).
    pub stream: Option<String>,
    pub stream_idle_ms: u64,
    pub stream_max_conns: usize,
    /// How workers wait for work (src/poll.rs).
    pub poll: crate::poll::Policy,
    /// Wasm lambdas' slice (src/slice.rs); `None` runs calls to completion.
    pub slice: Option<std::time::Duration>,
    /// The wasm instances' linear memory, all pools together (src/lambda.rs `Pool`).
    pub pool_memory: u64,
    /// The gateway's private unix sockets for the TCP framing and the stream protocol.
    pub tcp_unix: Option<String>,
    pub stream_unix: Option<String>,
    pub control_unix: Option<String>,
}

/// Print `msg` and the usage to stderr; exit 2.
pub fn die(msg: &str) -> ! {
    eprintln!("nearfaas-fastpath: {msg}\n{USAGE}");
    std::process::exit(2);
}

/// The command line (`std::env::args`); exits 2 with the usage on a bad flag.
pub fn parse_args() -> Args {
    let mut a = default_args();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{flag} needs a value")))
        };
        apply_flag(&mut a, &flag, &mut val);
    }
    a
}

/// The arguments before any flag.
fn default_args() -> Args {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    Args {
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
        max_conns_per_peer: 128,
        tcp_idle_ms: 5000,
        max_frame: 2 << 20,
        stream: None,
        stream_idle_ms: 2000,
        stream_max_conns: 1024,
        poll: crate::poll::Policy::default(),
        slice: Some(crate::slice::DEFAULT_SLICE),
        pool_memory: lambda::DEFAULT_POOL_MEMORY,
        tcp_unix: None,
        stream_unix: None,
        control_unix: None,
    }
}

/// Apply one command-line flag; `val` takes its value (exits when there is none).
fn apply_flag(a: &mut Args, flag: &str, val: &mut dyn FnMut() -> String) {
    let at_least_1 =
        |v: String| int_in(&v, 1..=usize::MAX, &format!("{flag}: use an integer >= 1"));
    match flag {
        "--udp" => a.udp = val(),
        "--tcp" => a.tcp = Some(val()),
        "--control" => a.control = val(),
        "--unix" => a.unix = Some(val()),
        "--workers" => a.workers = at_least_1(val()),
        "--host" => a.host = Some(host_addr(&val())),
        "--ready-file" => a.ready_file = Some(val()),
        "--queue-depth" => a.queue_depth = at_least_1(val()),
        "--sched" => a.mode = sched_mode(&val()),
        "--pin" => a.pin = true,
        "--control-key-file" => a.control_key_file = Some(val()),
        "--max-connections" => a.max_conns = at_least_1(val()),
        "--max-connections-per-peer" => a.max_conns_per_peer = at_least_1(val()),
        "--tcp-idle-ms" => {
            a.tcp_idle_ms = int_in(
                &val(),
                1..=3_600_000,
                "--tcp-idle-ms: use milliseconds from 1 to 3600000",
            ) as u64
        }
        "--max-frame" => {
            a.max_frame = int_in(
                &val(),
                8..=(64 << 20),
                "--max-frame: use a byte count from 8 to 67108864",
            )
        }
        "--poll" => {
            let v = val();
            a.poll.mode = crate::poll::Mode::parse(&v)
                .unwrap_or_else(|| die(&format!("--poll: {v:?}; use adaptive, spin or block")))
        }
        "--poll-max-us" => {
            a.poll.max = std::time::Duration::from_micros(int_in(
                &val(),
                1..=1_000_000,
                "--poll-max-us: use microseconds from 1 to 1000000",
            ) as u64)
        }
        "--poll-share" => {
            let v = val();
            a.poll.share = v
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && *x <= 1.0)
                .unwrap_or_else(|| {
                    die(&format!(
                        "--poll-share: {v:?}; use a fraction of a core in (0, 1]"
                    ))
                })
        }
        "--slice-us" => {
            let us = int_in(
                &val(),
                0..=1_000_000,
                "--slice-us: use microseconds from 10 to 1000000, or 0 to run calls to completion",
            );
            if us != 0 && us < 10 {
                die("--slice-us: use microseconds from 10 to 1000000, or 0 to run calls to completion");
            }
            a.slice = (us > 0).then(|| std::time::Duration::from_micros(us as u64));
        }
        "--pool-memory" => {
            let v = val();
            a.pool_memory = v.parse().unwrap_or_else(|_| {
                die(&format!(
                    "--pool-memory: {v:?}; use a byte count, e.g. 1073741824"
                ))
            })
        }
        "--stream" => a.stream = Some(val()),
        "--tcp-unix" => a.tcp_unix = Some(val()),
        "--stream-unix" => a.stream_unix = Some(val()),
        "--control-unix" => a.control_unix = Some(val()),
        "--stream-idle-ms" => {
            a.stream_idle_ms = int_in(
                &val(),
                1..=3_600_000,
                "--stream-idle-ms: use milliseconds from 1 to 3600000",
            ) as u64
        }
        "--stream-max-connections" => {
            a.stream_max_conns = int_in(
                &val(),
                1..=1_000_000,
                "--stream-max-connections: use an integer from 1 to 1000000",
            )
        }
        "-h" | "--help" => {
            println!("{USAGE}");
            std::process::exit(0)
        }
        other => die(&format!("unknown argument {other:?}")),
    }
}

/// `--host`'s value as a socket address, else exit.
fn host_addr(v: &str) -> SocketAddr {
    v.to_socket_addrs()
        .ok()
        .and_then(|mut x| x.next())
        .unwrap_or_else(|| die(&format!("--host: {v:?} is not a host:port address")))
}

/// `--sched`'s value, else exit.
fn sched_mode(v: &str) -> sched::Mode {
    match v {
        "drr" | "wfq" => sched::Mode::Drr,
        "fifo" => sched::Mode::Fifo,
        other => die(&format!("--sched: {other:?}; use drr or fifo")),
    }
}

/// `v` as an integer in `range`, else exit with `err`.
fn int_in(v: &str, range: std::ops::RangeInclusive<usize>, err: &str) -> usize {
    v.parse()
        .ok()
        .filter(|n| range.contains(n))
        .unwrap_or_else(|| die(err))
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .expect("spawn thread");
}

/// The sockets `run` binds before starting any thread.
struct Sockets {
    udp: UdpSocket,
    tcp: Option<TcpListener>,
    control: TcpListener,
    unix: Option<UnixDatagram>,
    stream: Option<TcpListener>,
    tcp_unix: Option<UnixListener>,
    stream_unix: Option<UnixListener>,
    control_unix: Option<UnixListener>,
}

/// A unix stream listener only its owner may connect to (mode 0600; the state dir holding it
/// is the platform's alone too).
fn private_listener(flag: &str, p: &str) -> UnixListener {
    let _ = std::fs::remove_file(p);
    let l = UnixListener::bind(p).unwrap_or_else(|e| die(&format!("{flag} {p}: {e}")));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| die(&format!("{flag} {p}: {e}")));
    l
}

/// The addresses the threads serve, for the ready line.
struct Bound {
    tcp: Option<SocketAddr>,
    control: SocketAddr,
    stream: Option<SocketAddr>,
}

/// Run the executor with `args`; returns only by exiting the process (0 after a signal).
pub fn run(args: Args) -> ! {
    let key = control_key(&args);
    let sigs = block_signals();
    let socks = bind(&args);
    // Before any engine is made: every engine's pool is sized from it.
    let pool = lambda::Pool::new(args.pool_memory, args.workers).unwrap_or_else(|e| die(&e));
    lambda::configure_pool(pool);
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
        max_conns_per_peer: args.max_conns_per_peer,
        tcp_idle: std::time::Duration::from_millis(args.tcp_idle_ms),
        poll: args.poll,
        slice: args.slice,
    };
    let srv = Arc::new(
        server::Server::new(engine, socks.udp, socks.unix, &cfg)
            .unwrap_or_else(|e| die(&format!("setup: {e}"))),
    );
    server::SrvRef::set(srv.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let mut bound = start_threads(&srv, &cfg, socks.tcp, socks.control, key.clone(), &stop);
    if let Some(l) = socks.tcp_unix {
        let s = srv.clone();
        spawn("tcp-unix", move || server::unix_accept_loop(s, l));
    }
    if let Some(l) = socks.control_unix {
        let (s, k) = (srv.clone(), key.clone());
        spawn("control-unix", move || control::control_unix_loop(s, l, k));
    }
    let stream_unix = socks.stream_unix;
    bound.stream = socks
        .stream
        .map(|l| start_stream(&srv, &args, l, stream_unix));
    announce(&args, &cfg, &srv, &bound);
    let sig = sigs.wait();
    eprintln!("nearfaas-fastpath: {:?}, shutting down", sig);
    stop.store(true, Ordering::Relaxed);
    srv.sched.shutdown();
    for p in [&args.unix, &args.tcp_unix, &args.stream_unix]
        .into_iter()
        .flatten()
    {
        let _ = std::fs::remove_file(p);
    }
    std::process::exit(0);
}

/// The control port's key. Fail closed: without a key the control port (which can swap any
/// lambda's code) would be open to every local user.
fn control_key(args: &Args) -> Arc<Vec<u8>> {
    match &args.control_key_file {
        None => die(
            "--control-key-file is required: the control port accepts only clients that \
             prove they hold its key (write 64 hex digits to a mode-0600 file)",
        ),
        Some(p) => {
            Arc::new(auth::load_key(p).unwrap_or_else(|e| die(&format!("--control-key-file: {e}"))))
        }
    }
}

/// SIGTERM/SIGINT are taken synchronously by the main thread: blocked here, before any thread
/// starts, so every thread inherits the mask.
fn block_signals() -> SigSet {
    let mut sigs = SigSet::empty();
    sigs.add(Signal::SIGTERM);
    sigs.add(Signal::SIGINT);
    sigs.thread_block().expect("block signals");
    sigs
}

fn bind(args: &Args) -> Sockets {
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
    let stream = args
        .stream
        .as_ref()
        .map(|t| TcpListener::bind(t).unwrap_or_else(|e| die(&format!("--stream {t}: {e}"))));
    let tcp_unix = args
        .tcp_unix
        .as_ref()
        .map(|p| private_listener("--tcp-unix", p));
    let stream_unix = args
        .stream_unix
        .as_ref()
        .map(|p| private_listener("--stream-unix", p));
    let control_unix = args
        .control_unix
        .as_ref()
        .map(|p| private_listener("--control-unix", p));
    if stream_unix.is_some() && stream.is_none() {
        die("--stream-unix needs --stream (the stream functions' listener)");
    }
    Sockets {
        udp,
        tcp,
        control,
        unix,
        stream,
        tcp_unix,
        stream_unix,
        control_unix,
    }
}

fn start_threads(
    srv: &Arc<server::Server>,
    cfg: &server::Config,
    tcp: Option<TcpListener>,
    control: TcpListener,
    key: Arc<Vec<u8>>,
    stop: &Arc<AtomicBool>,
) -> Bound {
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
    let tcp_addr = tcp.as_ref().map(|l| l.local_addr().unwrap());
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
    Bound {
        tcp: tcp_addr,
        control: control_addr,
        stream: None,
    }
}

/// The stream functions' event loop (src/stream/serve.rs) on its listener; returns its address.
fn start_stream(
    srv: &Arc<server::Server>,
    args: &Args,
    l: TcpListener,
    unix: Option<UnixListener>,
) -> SocketAddr {
    let addr = l.local_addr().unwrap();
    let _ = srv.streams.addr.set(addr);
    let cfg = stream::serve::Config {
        idle: std::time::Duration::from_millis(args.stream_idle_ms),
        max_conns: args.stream_max_conns,
    };
    let s = srv.clone();
    spawn("stream", move || {
        stream::serve::stream_loop(s, l, unix, cfg)
    });
    addr
}

/// The ready line (ports, addresses, pid): written atomically to `--ready-file`, else printed.
fn announce(args: &Args, cfg: &server::Config, srv: &server::Server, bound: &Bound) {
    let udp_addr = srv.udp.local_addr().unwrap();
    let ready = serde_json::json!({
        "udp": udp_addr.port(),
        "tcp": bound.tcp.map(|l| l.port()),
        "control": bound.control.port(),
        "udp_addr": udp_addr.to_string(),
        "tcp_addr": bound.tcp.map(|l| l.to_string()),
        "control_addr": bound.control.to_string(),
        "unix": args.unix,
        "pid": std::process::id(),
        "workers": cfg.workers,
        "sched": format!("{:?}", cfg.mode).to_lowercase(),
        "poll": cfg.poll.mode.name(),
        "slice_us": cfg.slice.map(|d| d.as_micros() as u64),
        "stream": bound.stream.map(|l| l.port()),
        "stream_addr": bound.stream.map(|l| l.to_string()),
        "pool_memory": lambda::pool().memory,
        "pool_slots": lambda::pool().slots,
        "cache_per_worker": lambda::pool().cache_per_worker,
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
}
