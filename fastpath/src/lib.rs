//! nearfaas-fastpath: the fast path executor (a software λ-NIC), as a library: the binaries
//! (src/main.rs: `nearfaas-fastpath`; src/bin/load.rs: `nearfaas-fastpath-load`) are thin
//! wrappers around [`executor`] and [`load`], and the integration tests (tests/) take the wire
//! format's constants from [`wire`]. The wire format, status codes, control protocol, lambda ABI
//! and shared-memory protocol are in docs/fastpath.md.
//!
//! Threads:
//! * `udp`: one socket; parses the 64-bit `id` and matches it in the table (a `HashMap` from
//!   id to `Arc<Lambda>` under one `RwLock`; IDs are random, issue 39); a hit is queued on that lambda's queue (bounded by
//!   `--queue-depth`, else OVERLOADED), a miss goes to the host (`--host`) or is answered UNKNOWN.
//! * `tcp` + a reader and a writer thread per connection (the writer puts replies back in
//!   request order); `unix`: Unix datagrams carrying a memfd (SCM_RIGHTS).
//! * `worker-N` (`--workers`, optionally `--pin`ned): run wasm calls in slices (`--slice-us`,
//!   src/slice.rs) and native ones to completion; they pick the next job (or slice) by
//!   deficit round-robin across lambdas with waiting jobs (quantum = weight) or from one FIFO
//!   (`--sched fifo`). Each worker keeps one wasm instance per lambda version, so global state
//!   persists; a trap or timeout drops it (rebuilt on the next call).
//! * `epoch`: advances the wasmtime epoch once per millisecond (lambda timeouts), and the
//!   sliced engine's once per slice while a sliced call is in flight.
//! * `host`: answers from the gateway's host port (token-matched, expired after 5 s).
//! * external I/O: per external address a writer thread (one persistent TCP connection) and a
//!   reader thread that frames memcached replies and queues `nf_resume` continuations, so workers
//!   never wait on an external call.
//! * `stream` (`--stream`): one epoll (mio) event loop serving every stream-function
//!   connection: each request is a connection whose payload runs through a chain of native
//!   stages as it arrives (src/stream/: parse, filter, Top-K, Space-Saving), see [`stream`].
//! * `control`: JSON lines (deploy / remove / stats / ping), each connection authenticated first
//!   by challenge-response over the `--control-key-file` key (src/auth.rs). A deploy compiles and
//!   validates the new module first, then swaps the slot's `Arc`; queued and running calls
//!   finish on the old one.
//!
//! Limits (docs/fastpath.md, "Security"): TCP connections are capped (`--max-connections`; each
//! holds a reader and a writer thread), a frame over `--max-frame` closes its connection, and a
//! frame's buffer grows only as its bytes arrive.

pub mod auth;
pub mod control;
pub mod executor;
pub mod lambda;
pub mod load;
pub mod modules;
pub mod native;
pub mod poll;
pub mod quota;
pub mod sched;
pub mod server;
pub mod shm;
pub mod slice;
pub mod stream;
pub mod wire;
