//! Stream functions: the third execution target (besides UDP/TCP/memfd lambdas). A request is
//! one TCP connection on the `--stream` listener: a 16-byte header (`stream_id: u64 LE`,
//! `payload_len: u64 LE`, u64::MAX = until the client half-closes), then the payload, which the
//! function consumes *as it arrives*, in chunks, through a chain of native stages (`parse`,
//! `filter`, `topk`, `frequent`) run as one pipeline inside the executor; when the payload ends
//! the last stage's state is the reply (`status: u8`, `count: u32 LE`, the elements), and the
//! connection closes (or, with `STREAM_KEEP_ALIVE` in the payload_len, waits for the next
//! request). Protocol and limits: docs/fastpath.md, "Stream functions".
//!
//! * [`ops`]: the stages as data structures (Top-K insertion network and heap, Space-Saving,
//!   filter, parser), independent of sockets.
//! * [`spec`]: a validated chain and the per-connection pipeline.
//! * [`stage`]: the deploy JSON's `stream` object, parsed and validated into a chain.
//! * [`serve`]: the listener's event loop.
//! * [`conn`]: one connection's state machine (header, body, reply, drain; kept-alive).
//! * [`offload`]: the pool that runs `wasm` stages off the loop, groups taking turns.
//!
//! Stream functions share the lambdas' ID space: an ID names one function, so deploying a
//! stream function over a lambda's ID replaces it (and the other way round), and `remove`
//! removes either.

pub mod conn;
pub mod offload;
pub mod ops;
pub mod serve;
pub mod sock;
pub mod spec;
pub mod stage;
pub mod wasm;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::{json, Value};

pub use spec::{parse_chain, parse_chain_with, Chain, Compile};

/// Counters of one stream function (kept across versions, like a lambda's).
#[derive(Default)]
pub struct StreamStats {
    /// Requests that named this function (a complete header).
    pub calls: AtomicU64,
    pub ok: AtomicU64,
    pub bad_request: AtomicU64,
    pub timeouts: AtomicU64,
    /// A `wasm` stage trapped, or ran out of fuel or time (answered TRAP or TIMEOUT).
    pub traps: AtomicU64,
    /// A `wasm` stage found no free instance slot (answered OVERLOADED).
    pub overloaded: AtomicU64,
    /// Payload bytes consumed.
    pub bytes: AtomicU64,
    /// Elements decoded (before any filter).
    pub elements: AtomicU64,
}

/// A deployed stream function.
pub struct StreamFn {
    pub id: crate::wire::LambdaId,
    pub name: String,
    pub version: u64,
    /// Whose turn its `wasm` stage's work takes in the offload pool (`offload`): the deploy's
    /// `group` (the gateway sends the namespace), else the function's name.
    pub group: Arc<str>,
    pub chain: Chain,
    pub stats: Arc<StreamStats>,
}

/// Listener-wide counters.
#[derive(Default)]
pub struct StreamGlobal {
    /// Connections open now.
    pub conns: AtomicUsize,
    pub accepted: AtomicU64,
    /// Closed at accept: over `--stream-max-connections`.
    pub refused: AtomicU64,
    /// Headers naming an ID with no stream function.
    pub unknown: AtomicU64,
    /// Connections answered TIMEOUT (no byte for `--stream-idle-ms`).
    pub timeouts: AtomicU64,
    /// Closed without a complete header, or refused a reply (header-level BAD_REQUEST).
    pub bad_header: AtomicU64,
    /// Requests that found their connection kept open by the request before
    /// (`STREAM_KEEP_ALIVE`).
    pub reused: AtomicU64,
}

/// The stream function table (64-bit IDs, shared with the lambdas) and the listener's
/// counters. Looked up once per connection, never on the lambda hot path.
#[derive(Default)]
pub struct Streams {
    table: RwLock<HashMap<crate::wire::LambdaId, Arc<StreamFn>>>,
    pub g: StreamGlobal,
    /// The bound `--stream` address, once listening.
    pub addr: OnceLock<SocketAddr>,
}

impl Streams {
    pub fn lookup(&self, id: crate::wire::LambdaId) -> Option<Arc<StreamFn>> {
        self.table.read().unwrap().get(&id).cloned()
    }

    pub fn install(&self, f: Arc<StreamFn>) -> Option<Arc<StreamFn>> {
        self.table.write().unwrap().insert(f.id, f)
    }

    pub fn remove(&self, id: crate::wire::LambdaId) -> Option<Arc<StreamFn>> {
        self.table.write().unwrap().remove(&id)
    }

    pub fn all(&self) -> Vec<Arc<StreamFn>> {
        let mut v: Vec<_> = self.table.read().unwrap().values().cloned().collect();
        v.sort_by_key(|f| f.id);
        v
    }

    /// Per-function entries for `stats`.
    pub fn json(&self) -> Vec<Value> {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.all()
            .iter()
            .map(|f| {
                let s = &f.stats;
                json!({"id": f.id, "name": f.name, "version": f.version, "kind": "stream", "group": &*f.group,
                       "stream": f.chain.describe(),
                       "calls": r(&s.calls), "ok": r(&s.ok), "bad_request": r(&s.bad_request),
                       "timeouts": r(&s.timeouts), "traps": r(&s.traps), "overloaded": r(&s.overloaded), "bytes": r(&s.bytes), "elements": r(&s.elements)})
            })
            .collect()
    }

    /// Listener counters for `stats`' global object.
    pub fn global_json(&self) -> Value {
        let g = &self.g;
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({"stream_conns": g.conns.load(Ordering::Relaxed), "stream_accepted": r(&g.accepted),
               "stream_refused": r(&g.refused), "stream_unknown": r(&g.unknown),
               "stream_timeouts": r(&g.timeouts), "stream_bad_header": r(&g.bad_header),
               "stream_reused": r(&g.reused)})
    }
}
