//! Control protocol: one JSON object per line in each direction (see docs/fastpath.md).

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::auth::{self, LineError};
use crate::lambda::{self, inc, Code, Lambda, LambdaStats, NativeKind};
use crate::modules::EngineKind;
use crate::server::{Duplex, Server};
use crate::stream;
use crate::wire::LambdaId;

/// Control connections open at once; more are closed at accept (each holds a thread).
const MAX_CONTROL_CONNS: usize = 16;
/// The client has this long to answer the challenge; an unauthenticated peer cannot park a
/// thread here.
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest line before authentication (the answer is ~90 bytes) and after it (a deploy is a
/// few hundred bytes; the limit only stops a line that never ends).
const PRE_AUTH_LINE: usize = 512;
const LINE_LIMIT: usize = 1 << 20;

static OPEN: AtomicUsize = AtomicUsize::new(0);

pub fn control_loop(srv: Arc<Server>, listener: TcpListener, key: Arc<Vec<u8>>) {
    serve(srv, listener.incoming(), key, &OPEN);
}

/// Control connections open at once on the gateway's own socket.
static OPEN_UNIX: AtomicUsize = AtomicUsize::new(0);

/// The control protocol on the gateway's private unix socket (`--control-unix`, mode 0600 in
/// the state dir), with the same challenge-response. Its connections are counted apart from the
/// TCP port's 16: red team round 7 held those 16 from loopback addresses (each re-opened as the
/// executor dropped it after 5 s) and every deploy and removal of every tenant failed.
pub fn control_unix_loop(srv: Arc<Server>, listener: UnixListener, key: Arc<Vec<u8>>) {
    serve(srv, listener.incoming(), key, &OPEN_UNIX);
}

fn serve<S: Duplex>(
    srv: Arc<Server>,
    incoming: impl Iterator<Item = std::io::Result<S>>,
    key: Arc<Vec<u8>>,
    open: &'static AtomicUsize,
) {
    for s in incoming {
        let Ok(s) = s else { continue };
        if open.fetch_add(1, Ordering::AcqRel) >= MAX_CONTROL_CONNS {
            open.fetch_sub(1, Ordering::AcqRel);
            inc(&srv.g.conns_refused);
            continue; // dropping `s` closes it
        }
        let (srv, key) = (srv.clone(), key.clone());
        let spawned = std::thread::Builder::new()
            .name("control-conn".into())
            .stack_size(256 << 10)
            .spawn(move || {
                conn(&srv, s, &key);
                open.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn send(w: &mut impl Write, v: &Value) -> bool {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    w.write_all(&out).is_ok()
}

/// Challenge-response before any op: send `{"challenge": hex nonce}`, expect
/// `{"op": "auth", "hmac": hex HMAC-SHA256(key, nonce)}`. Anything else is refused, counted and
/// the connection closed.
fn authenticate<S: Duplex>(srv: &Server, r: &mut BufReader<S>, w: &mut S, key: &[u8]) -> bool {
    let Ok(nonce) = auth::nonce() else {
        return false; // no randomness: fail closed
    };
    w.read_timeout(Some(AUTH_TIMEOUT));
    let challenge = json!({"challenge": auth::encode_hex(&nonce), "auth": "hmac-sha256"});
    if !send(w, &challenge) {
        return false;
    }
    let answer = match auth::read_line_limited(r, PRE_AUTH_LINE) {
        Ok(Some(line)) => serde_json::from_slice::<Value>(&line).ok(),
        _ => None,
    };
    let ok = match &answer {
        Some(Value::Object(m)) if m.get("op") == Some(&json!("auth")) => match m.get("hmac") {
            Some(Value::String(h)) => auth::verify(key, &nonce, h),
            _ => false,
        },
        _ => false,
    };
    if !ok {
        inc(&srv.g.auth_failures);
        send(w, &err("auth: answer the challenge first with {\"op\": \"auth\", \"hmac\": hex HMAC-SHA256(key, nonce)}; the answer was missing or wrong"));
        return false;
    }
    w.read_timeout(None);
    send(w, &json!({"ok": true, "op": "auth"}))
}

fn conn<S: Duplex>(srv: &Server, s: S, key: &[u8]) {
    let Ok(mut w) = s.dup() else { return };
    let mut r = BufReader::new(s);
    if !authenticate(srv, &mut r, &mut w, key) {
        return;
    }
    loop {
        let line = match auth::read_line_limited(&mut r, LINE_LIMIT) {
            Ok(Some(l)) => l,
            Ok(None) | Err(LineError::Io) => return,
            Err(LineError::TooLong) => {
                send(
                    &mut w,
                    &err(&format!(
                        "request: a line is longer than {LINE_LIMIT} bytes"
                    )),
                );
                return;
            }
        };
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => handle(srv, &m),
            Ok(_) => err("request: expected one JSON object per line, e.g. {\"op\": \"ping\"}"),
            Err(e) => err(&format!(
                "request: invalid JSON ({e}); send one JSON object per line"
            )),
        };
        if !send(&mut w, &reply) {
            return;
        }
    }
}

fn err(msg: &str) -> Value {
    json!({"ok": false, "error": msg})
}

pub fn handle(srv: &Server, m: &Map<String, Value>) -> Value {
    let op = match m.get("op") {
        Some(Value::String(s)) => s.as_str(),
        _ => return err("op: required string, one of deploy, remove, stats, ping"),
    };
    match op {
        "ping" => json!({"ok": true, "pong": true, "workers": srv.workers}),
        "stats" => stats(srv),
        "remove" => match get_id(m) {
            Err(e) => err(&e),
            Ok(id) => {
                // An id names one function: a lambda or a stream function.
                let _g = srv.deploy_lock.lock().unwrap();
                match (srv.remove(id), srv.streams.remove(id)) {
                    (Some(old), _) => json!({"ok": true, "id": id, "removed_version": old.version}),
                    (None, Some(old)) => {
                        json!({"ok": true, "id": id, "removed_version": old.version,
                                                "kind": "stream"})
                    }
                    (None, None) => err(&format!(
                        "id: no lambda with id {id} is deployed (nor a stream function)"
                    )),
                }
            }
        },
        "deploy" => match deploy(srv, m) {
            Ok(v) => v,
            Err(e) => err(&e),
        },
        other => err(&format!(
            "op: unknown op {other:?}; use one of deploy, remove, stats, ping"
        )),
    }
}

fn stats(srv: &Server) -> Value {
    let mut all: Vec<_> = srv.table.read().unwrap().values().cloned().collect();
    all.sort_by_key(|l| l.id);
    let lambdas: Vec<Value> = all.iter().map(|l| srv.lambda_json(l)).collect();
    let streams = srv.streams.json();
    let g = &srv.g;
    let r = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let global = json!({
        "malformed_short": r(&g.malformed_short), "unknown": r(&g.unknown),
        "host_forwarded": r(&g.host_forwarded), "host_errors": r(&g.host_errors),
        "packets": r(&g.packets), "auth_failures": r(&g.auth_failures),
        "conns_refused": r(&g.conns_refused), "frames_too_large": r(&g.frames_too_large),
        "conns_refused_peer": r(&g.conns_refused_peer), "conns_idle_closed": r(&g.conns_idle_closed),
        "tcp_conns": srv.tcp_conns.load(Ordering::Relaxed),
    });
    let mut global = global;
    if let (Value::Object(g), Value::Object(s)) = (&mut global, srv.streams.global_json()) {
        g.extend(s);
    }
    let (modules_live, code_bytes) = srv.modules.live();
    let mut v = json!({"ok": true, "lambdas": lambdas, "streams": streams, "global": global.clone(),
                       "workers": srv.workers,
                       "modules": {"live": modules_live, "code_bytes": code_bytes},
                       "sched": format!("{:?}", srv.sched.mode).to_lowercase(),
                       "poll": {"mode": srv.poll.mode.name(), "max_us": srv.poll.max.as_micros() as u64,
                                "share": srv.poll.share, "spun_ns": r(&srv.polled.spun_ns),
                                "caught": r(&srv.polled.caught), "blocked": r(&srv.polled.blocked)},
                       "slice": srv.slicer.as_ref().map(|s| json!({
                           "slice_us": s.slice.as_micros() as u64, "preempt": s.preempt,
                           "yields": r(&s.yields), "in_flight": s.in_flight.load(Ordering::Relaxed)}))});
    if let (Value::Object(o), Value::Object(gm)) = (&mut v, global) {
        o.extend(gm);
    }
    v
}

/// The `id` field: any u64 (the gateway draws them at random, docs/fastpath.md, Security).
fn get_id(m: &Map<String, Value>) -> Result<LambdaId, String> {
    const USE: &str = "use an integer from 0 to 18446744073709551615 (2^64-1)";
    match m.get("id") {
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("id: {n} is not an integer in range; {USE}")),
        Some(v) => Err(format!("id: {v} is not an integer; {USE}")),
        None => Err(format!("id: required; {USE}")),
    }
}

fn get_uint(
    m: &Map<String, Value>,
    key: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(i) if (min..=max).contains(&i) => Ok(i),
            Some(_) => Err(format!(
                "{key}: {n} is out of range; use an integer from {min} to {max}"
            )),
            None => Err(format!(
                "{key}: {n} is not an integer; use an integer from {min} to {max}"
            )),
        },
        Some(v) => Err(format!(
            "{key}: {v} is not an integer; use an integer from {min} to {max}"
        )),
    }
}

fn get_str<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!("{key}: {v} is not a string")),
    }
}

const DEPLOY_FIELDS: &[&str] = &[
    "op",
    "id",
    "name",
    "kind",
    "path",
    "native",
    "weight",
    "version",
    "fuel",
    "timeout_ms",
    "external",
    "stream",
    "entry",
    "group",
];

/// Fields of a lambda deploy that a stream function has no use for (null is accepted).
const NOT_FOR_STREAM: &[&str] = &[
    "path",
    "native",
    "fuel",
    "timeout_ms",
    "weight",
    "external",
    "entry",
];

/// A deploy request, checked and compiled, ready to swap in.
struct Deploy {
    id: LambdaId,
    name: String,
    /// The version asked for; `None` takes the deployed version + 1 (or 1).
    version: Option<u64>,
    weight: u32,
    timeout_ms: u64,
    fuel: Option<u64>,
    external: Option<SocketAddr>,
    code: Code,
    group: Arc<str>,
}

fn deploy(srv: &Server, m: &Map<String, Value>) -> Result<Value, String> {
    check_deploy_fields(m)?;
    if matches!(m.get("kind"), Some(Value::String(k)) if k == "stream") {
        return stream_deploy(srv, m);
    }
    if m.get("stream").is_some_and(|v| !v.is_null()) {
        return Err("stream: only a deploy of kind \"stream\" takes a chain".into());
    }
    let id = get_id(m)?;
    let weight = get_uint(m, "weight", 1, 1, 1_000_000)? as u32;
    let timeout_ms = get_uint(m, "timeout_ms", 50, 1, 60_000)?;
    let version_given = m.get("version").is_some_and(|v| !v.is_null());
    let version = get_uint(m, "version", 1, 0, u64::MAX)?;
    let fuel = get_fuel(m)?;
    let external = get_external(m)?;
    let kind =
        get_str(m, "kind")?.ok_or("kind: required; use \"wasm\", \"native\" or \"stream\"")?;
    let name_field = get_str(m, "name")?;
    let entry = get_entry(m)?;
    if entry.is_some() && kind == "native" {
        return Err(
            "entry: only a wasm lambda has entries; set entry to null for a native lambda".into(),
        );
    }
    let (code, compiled) = match kind {
        "wasm" => wasm_code(srv, m, fuel, entry)?,
        "native" => (native_code(m, name_field)?, false),
        other => {
            return Err(format!(
                "kind: {other:?} is not a kind; use \"wasm\", \"native\" or \"stream\""
            ))
        }
    };
    let name = name_field
        .map(str::to_string)
        .unwrap_or_else(|| format!("lambda-{id}"));
    let group = get_group(m, &name)?;
    let mut answer = swap_in(
        srv,
        Deploy {
            id,
            name,
            version: version_given.then_some(version),
            weight,
            timeout_ms,
            fuel,
            external,
            code,
            group,
        },
    );
    // Whether this deploy compiled its module or reused another lambda's compilation.
    answer["compiled"] = json!(compiled);
    Ok(answer)
}

fn check_deploy_fields(m: &Map<String, Value>) -> Result<(), String> {
    for k in m.keys() {
        if !DEPLOY_FIELDS.contains(&k.as_str()) {
            return Err(format!(
                "{k}: unknown field; deploy accepts {}",
                DEPLOY_FIELDS.join(", ")
            ));
        }
    }
    Ok(())
}

/// `fuel`: a positive instruction budget per call, or none; only a wasm lambda counts it.
fn get_fuel(m: &Map<String, Value>) -> Result<Option<u64>, String> {
    let fuel = match m.get("fuel") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|f| f >= 1) => n.as_u64(),
        Some(v) => {
            return Err(format!(
                "fuel: {v} is not a positive integer; give an instruction budget per call (e.g. 10000000) or null for none"
            ))
        }
    };
    if fuel.is_some() && kind_is_native(m) {
        return Err(
            "fuel: only wasm lambdas count fuel; set fuel to null for a native lambda".into(),
        );
    }
    Ok(fuel)
}

/// `external`: the "host:port" a lambda's external calls go to, resolved now.
fn get_external(m: &Map<String, Value>) -> Result<Option<SocketAddr>, String> {
    let Some(s) = get_str(m, "external")? else {
        return Ok(None);
    };
    match s.to_socket_addrs().ok().and_then(|mut a| a.next()) {
        Some(a) => Ok(Some(a)),
        None => Err(format!(
            "external: {s:?} is not a reachable \"host:port\" address, e.g. \"127.0.0.1:11211\""
        )),
    }
}

/// The engine for wasm code: the fuel-counting one (made on first use) when there is a budget.
fn engine_for(srv: &Server, fuel: Option<u64>) -> Result<&wasmtime::Engine, String> {
    Ok(match fuel {
        None => &srv.engine,
        Some(_) => srv
            .fuel_engine
            .get_or_init(|| lambda::make_engine(true).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| format!("fuel: cannot make the fuel-counting engine: {e}"))?,
    })
}

/// Read the module of a stream function's `wasm` stage and link it like a lambda's.
fn stream_wasm(
    srv: &Server,
    path: &str,
    fuel: Option<u64>,
) -> Result<wasmtime::InstancePre<()>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    lambda::link_wasm(engine_for(srv, fuel)?, &bytes).map_err(|e| format!("{path}: {e}"))
}

/// Read and compile the wasm module at `path` (with the fuel-counting engine when `fuel`), or
/// reuse the compilation of a lambda deployed from the same bytes (src/modules.rs); `entry`
/// picks a lambda of a coalesced module. The second value: whether it compiled now.
fn wasm_code(
    srv: &Server,
    m: &Map<String, Value>,
    fuel: Option<u64>,
    entry: Option<String>,
) -> Result<(Code, bool), String> {
    let path = get_str(m, "path")?
        .ok_or("path: required for kind wasm; give the absolute path of a .wasm file")?;
    let bytes = std::fs::read(path).map_err(|e| format!("path: cannot read {path:?}: {e}"))?;
    // Without a fuel budget a lambda runs in slices when the executor slices (src/slice.rs).
    let slicer = srv.slicer.as_ref().filter(|_| fuel.is_none());
    let (kind, engine) = match (slicer, fuel) {
        (Some(s), _) => (EngineKind::Sliced, &s.engine),
        (None, None) => (EngineKind::Plain, engine_for(srv, None)?),
        (None, Some(_)) => (EngineKind::Fuel, engine_for(srv, fuel)?),
    };
    let (module, compiled) = srv
        .modules
        .get_or_compile(kind, engine, &bytes)
        .map_err(|e| format!("path: {path}: {e}"))?;
    let buffer_size = lambda::check_abi(&module.pre, slicer, entry.as_deref()).map_err(|e| match &entry {
        Some(en) => format!("entry: {en:?} in {path}: {e} (a coalesced module exports {en}.nf_handle, {en}.nf_buffer, {en}.nf_buffer_size)"),
        None => format!("path: {path}: {e}"),
    })?;
    let code = Code::Wasm {
        module,
        entry,
        buffer_size,
        sliced: slicer.is_some(),
    };
    Ok((code, compiled))
}

/// `entry`: the lambda's entry in a coalesced module: 1 to 64 letters, digits or `_`.
fn get_entry(m: &Map<String, Value>) -> Result<Option<String>, String> {
    let Some(e) = get_str(m, "entry")? else {
        return Ok(None);
    };
    if e.is_empty() || e.len() > 64 || !e.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
        return Err(format!(
            "entry: {e:?} is not an entry name; use 1 to 64 letters, digits or _ (e.g. \"web2\"), or null for a module of one lambda"
        ));
    }
    Ok(Some(e.to_string()))
}

/// The native lambda named by `native` (or else by `name`).
fn native_code(m: &Map<String, Value>, name_field: Option<&str>) -> Result<Code, String> {
    let n = match get_str(m, "native")? {
        Some(n) => n,
        None => {
            name_field.ok_or("native: required for kind native; use \"web\", \"kv\" or \"gray\"")?
        }
    };
    Ok(Code::Native(NativeKind::parse(n).ok_or_else(|| {
        format!("native: unknown native lambda {n:?}; use \"web\", \"kv\" or \"gray\"")
    })?))
}

/// Swap the compiled lambda in at its id (under the deploy lock); a new version keeps the
/// old one's counters.
fn swap_in(srv: &Server, d: Deploy) -> Value {
    let _g = srv.deploy_lock.lock().unwrap();
    let old = srv.lookup(d.id);
    // An id names one function: a stream function there is replaced.
    let old_stream = srv.streams.remove(d.id);
    let version = d
        .version
        .unwrap_or_else(|| old.as_ref().map_or(1, |o| o.version + 1));
    let stats = old
        .as_ref()
        .map_or_else(|| Arc::new(LambdaStats::default()), |o| o.stats.clone());
    let l = Arc::new(Lambda {
        id: d.id,
        name: d.name,
        version,
        weight: d.weight,
        timeout_ms: d.timeout_ms,
        fuel: d.fuel,
        external: d.external,
        code: d.code,
        uid: srv.next_uid.fetch_add(1, Ordering::Relaxed),
        retired: AtomicBool::new(false),
        stats,
        group: d.group,
    });
    let buffer_size = match &l.code {
        Code::Wasm { buffer_size, .. } => *buffer_size,
        Code::Native(k) => k.buffer_size(),
    };
    let old = srv.install(l);
    let previous = old
        .as_ref()
        .map(|o| o.version)
        .or(old_stream.as_ref().map(|s| s.version));
    json!({"ok": true, "id": d.id, "version": version,
           "swapped": old.is_some() || old_stream.is_some(),
           "previous_version": previous, "buffer_size": buffer_size})
}

/// Deploy a stream function (`"kind": "stream"`): validate its chain (src/stream/spec.rs), then
/// install it at its id, replacing a lambda or stream function there. Connections already
/// running keep the version they started with.
fn stream_deploy(srv: &Server, m: &Map<String, Value>) -> Result<Value, String> {
    for k in NOT_FOR_STREAM {
        if m.get(*k).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "{k}: does not apply to kind stream (a stream function is the chain in \"stream\"); leave it out"
            ));
        }
    }
    let id = get_id(m)?;
    let version_given = m.get("version").is_some_and(|v| !v.is_null());
    let version = get_uint(m, "version", 1, 0, u64::MAX)?;
    let name = get_str(m, "name")?
        .map(str::to_string)
        .unwrap_or_else(|| format!("stream-{id}"));
    let group = get_group(m, &name)?;
    let compile = |path: &str, fuel: Option<u64>| stream_wasm(srv, path, fuel);
    let chain = stream::parse_chain_with(m.get("stream"), Some(&compile))?;
    let describe = chain.describe();
    let _g = srv.deploy_lock.lock().unwrap();
    let old = srv.streams.lookup(id);
    let old_lambda = srv.remove(id);
    let version = if version_given {
        version
    } else {
        old.as_ref().map_or(1, |o| o.version + 1)
    };
    let stats = old
        .as_ref()
        .map_or_else(Default::default, |o| o.stats.clone());
    srv.streams.install(Arc::new(stream::StreamFn {
        id,
        name,
        version,
        group,
        chain,
        stats,
    }));
    let previous = old
        .as_ref()
        .map(|o| o.version)
        .or(old_lambda.as_ref().map(|l| l.version));
    Ok(
        json!({"ok": true, "id": id, "version": version, "kind": "stream",
              "swapped": old.is_some() || old_lambda.is_some(), "previous_version": previous,
              "stream": describe,
              "stream_addr": srv.streams.addr.get().map(|a| a.to_string())}),
    )
}

/// `group`: whose share of the executor a function's work takes (its wasm instances,
/// src/quota.rs; a stream's wasm jobs, src/stream/offload.rs). The gateway sends the namespace;
/// without one, the function is a group of its own.
fn get_group(m: &Map<String, Value>, name: &str) -> Result<Arc<str>, String> {
    match m.get("group") {
        None | Some(Value::Null) => Ok(name.into()),
        Some(Value::String(g)) if !g.is_empty() && g.len() <= 253 => Ok(g.as_str().into()),
        Some(v) => Err(format!(
            "group: must be a name of 1 to 253 bytes (the gateway sends the function's namespace), got {v}"
        )),
    }
}

fn kind_is_native(m: &Map<String, Value>) -> bool {
    matches!(m.get("kind"), Some(Value::String(k)) if k == "native")
}
