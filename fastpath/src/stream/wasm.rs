//! WebAssembly stream functions: a chain's last stage `{"fn": "wasm", "path": ..., "k": ...}`
//! runs a module with the incremental stream ABI (docs/fastpath.md, "WebAssembly stream
//! functions"), with the wasm lambdas' isolation: the same engines (pooling allocator, 16 MiB
//! linear memory at most, epoch interruption; the fuel-counting engine when the stage has a
//! `fuel` budget) and the same imports (WASI stubs returning ENOSYS, `proc_exit` traps).
//!
//! One instance per connection, made from the stage's pre-linked module when the header
//! arrives and dropped (its pool slot reset) when the connection ends, so no state leaks from
//! one request to the next and a connection's memory is the module's linear memory.
//!
//! Exports: `memory`; `nf_stream_buf() -> i32` and `nf_stream_buf_size() -> i32` (the input
//! buffer, at least 4 bytes); `nf_stream_init(k: i32) -> i32`; `nf_stream_feed(len: i32) ->
//! i32` (elements, u32/f32 LE, in `buf[0..len]`; larger chunks come in pieces of at most the
//! buffer's size, always whole elements); `nf_stream_finish() -> i32` (the reply elements written
//! to `buf[0..n]`, returns n, a multiple of 4). A negative return is BAD_REQUEST.
//!
//! `timeout_ms` is the request's budget of time inside the module, all its calls together
//! (init, every feed, finish), not a limit per call: a module with a 4-byte buffer whose every
//! feed stayed just under a per-call limit held every other stream request for minutes from one
//! small body when the calls ran on the event loop (red team, issue 39). They run on the offload
//! pool now (`offload`), one job at a time per group, and the budget bounds a group's turn.

use std::fmt;
use std::time::{Duration, Instant};

use wasmtime::{InstancePre, Memory, Store, Trap, TypedFunc};

use super::spec::{reply_head, Refusal};
use crate::wire::OK;

/// A request's budget inside the module when the deploy gives none (milliseconds; the
/// gateway always gives one: the cluster's `fastpath.max_timeout_ms` unless the stage asks less).
pub const DEFAULT_TIMEOUT_MS: u64 = 1_000;
/// Largest `timeout_ms` of a stage (a bare executor's; the gateway caps it at the cluster's
/// `fastpath.max_timeout_ms`).
pub const MAX_TIMEOUT_MS: u64 = 10_000;

/// A deployed `wasm` stage: the module, linked once, and its parameters.
#[derive(Clone)]
pub struct WasmStage {
    pub path: String,
    pub k: usize,
    /// Instructions for the whole request (the fuel-counting engine), besides the timeout.
    pub fuel: Option<u64>,
    /// The request's budget inside the module (init, every feed and finish together), in ms.
    pub timeout_ms: u64,
    pub pre: InstancePre<()>,
}

impl fmt::Debug for WasmStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WasmStage")
            .field("path", &self.path)
            .field("k", &self.k)
            .field("fuel", &self.fuel)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl PartialEq for WasmStage {
    fn eq(&self, o: &Self) -> bool {
        (&self.path, self.k, self.fuel, self.timeout_ms) == (&o.path, o.k, o.fuel, o.timeout_ms)
    }
}

/// One connection's instance.
pub struct WasmStream {
    store: Store<()>,
    mem: Memory,
    buf: usize,
    buf_size: usize,
    feed: TypedFunc<i32, i32>,
    finish: TypedFunc<(), i32>,
    timeout_ms: u64,
    /// Time spent inside the module so far in this request.
    spent: Duration,
    /// Its group's claim on the slot it holds (src/quota.rs); none for a deploy's check.
    _ticket: Option<crate::quota::Ticket>,
}

fn classify(e: wasmtime::Error) -> Refusal {
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) | Some(Trap::OutOfFuel) => Refusal::Timeout,
        Some(t) => Refusal::Trap(format!("wasm trap: {t}")),
        None => Refusal::Trap(format!("{e:#}")),
    }
}

impl WasmStream {
    /// Instantiate the stage's module and call `nf_stream_init(k)`.
    pub fn new(
        stage: &WasmStage,
        ticket: Option<crate::quota::Ticket>,
    ) -> Result<WasmStream, Refusal> {
        let mut store = Store::new(stage.pre.module().engine(), ());
        store.epoch_deadline_trap();
        store.set_epoch_deadline(stage.timeout_ms + 1);
        if let Some(f) = stage.fuel {
            store
                .set_fuel(f)
                .map_err(|e| Refusal::Trap(format!("fuel: {e:#}")))?;
        }
        // Instantiation fails when the pool has no free slot (shared with the lambdas).
        let inst = stage
            .pre
            .instantiate(&mut store)
            .map_err(|e| Refusal::Overloaded(format!("instantiate: {e:#}")))?;
        let abi = |m: String| Refusal::Trap(m);
        if let Some(init) = inst.get_func(&mut store, "_initialize") {
            let init = init
                .typed::<(), ()>(&store)
                .map_err(|e| abi(format!("_initialize: {e:#}")))?;
            init.call(&mut store, ()).map_err(classify)?;
        }
        let mem = inst
            .get_memory(&mut store, "memory")
            .ok_or_else(|| abi("missing export `memory`".into()))?;
        let mut get = |name: &str| -> Result<i32, Refusal> {
            let f = inst
                .get_typed_func::<(), i32>(&mut store, name)
                .map_err(|e| abi(format!("export `{name}: () -> i32`: {e:#}")))?;
            f.call(&mut store, ()).map_err(classify)
        };
        let buf = get("nf_stream_buf")? as u32 as usize;
        let buf_size = get("nf_stream_buf_size")? as u32 as usize;
        if buf_size < 4
            || buf
                .checked_add(buf_size)
                .is_none_or(|end| end > mem.data_size(&store))
        {
            return Err(abi(format!(
                "nf_stream_buf {buf}+{buf_size} is under 4 bytes or lies outside linear memory"
            )));
        }
        let init = inst
            .get_typed_func::<i32, i32>(&mut store, "nf_stream_init")
            .map_err(|e| abi(format!("export `nf_stream_init: (i32) -> i32`: {e:#}")))?;
        let feed = inst
            .get_typed_func::<i32, i32>(&mut store, "nf_stream_feed")
            .map_err(|e| abi(format!("export `nf_stream_feed: (i32) -> i32`: {e:#}")))?;
        let finish = inst
            .get_typed_func::<(), i32>(&mut store, "nf_stream_finish")
            .map_err(|e| abi(format!("export `nf_stream_finish: () -> i32`: {e:#}")))?;
        let mut s = WasmStream {
            store,
            mem,
            buf,
            buf_size,
            feed,
            finish,
            timeout_ms: stage.timeout_ms,
            spent: Duration::ZERO,
            _ticket: ticket,
        };
        let r = s.call(&init.clone(), stage.k as i32)?;
        if r < 0 {
            return Err(abi(format!("nf_stream_init({}) returned {r}", stage.k)));
        }
        Ok(s)
    }

    fn call<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
        &mut self,
        f: &TypedFunc<P, R>,
        p: P,
    ) -> Result<R, Refusal> {
        // What is left of the request's budget (whole epochs of 1 ms, at least one).
        let left = Duration::from_millis(self.timeout_ms).saturating_sub(self.spent);
        if left.is_zero() {
            return Err(Refusal::Timeout);
        }
        self.store
            .set_epoch_deadline(left.as_millis().max(1) as u64 + 1);
        let started = Instant::now();
        let r = f.call(&mut self.store, p).map_err(classify);
        self.spent += started.elapsed();
        r
    }

    /// Copy `elems` (little-endian) into the module's buffer and call `nf_stream_feed`, in
    /// pieces of at most the buffer's size.
    pub fn feed(&mut self, elems: &[u32]) -> Result<(), Refusal> {
        let feed = self.feed.clone();
        for piece in elems.chunks(self.buf_size / 4) {
            let n = piece.len() * 4;
            // Memory only grows, so the buffer checked at instantiation stays in bounds.
            let dst = &mut self.mem.data_mut(&mut self.store)[self.buf..self.buf + n];
            for (d, e) in dst.chunks_exact_mut(4).zip(piece) {
                d.copy_from_slice(&e.to_le_bytes());
            }
            if self.call(&feed, n as i32)? < 0 {
                return Err(Refusal::Module);
            }
        }
        Ok(())
    }

    /// `nf_stream_finish`: the reply (status OK, count, the elements).
    pub fn finish(&mut self) -> Result<Vec<u8>, Refusal> {
        let finish = self.finish.clone();
        let n = self.call(&finish, ())?;
        if n < 0 {
            return Err(Refusal::Module);
        }
        let n = n as usize;
        if !n.is_multiple_of(4) || n > self.buf_size {
            return Err(Refusal::Trap(format!(
                "nf_stream_finish returned {n}: not a multiple of 4 within the {}-byte buffer",
                self.buf_size
            )));
        }
        let mut out = reply_head(OK, n / 4);
        out.extend_from_slice(&self.mem.data(&self.store)[self.buf..self.buf + n]);
        Ok(out)
    }
}
