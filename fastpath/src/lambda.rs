//! Lambdas: WebAssembly modules (wasmtime, pooling allocator, epoch interruption) and
//! native Rust lambdas, behind one calling convention.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::slice::{self, Slicer};
use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, InstancePre, Linker, Memory, Module,
    OptLevel, PoolingAllocationConfig, Store, Strategy, Trap, TypedFunc, Val, ValType,
};

/// WASI errno ENOSYS, returned by every stubbed `wasi_snapshot_preview1` import.
pub const ENOSYS: i32 = 52;
/// `nf_handle` / `nf_resume` return value asking for an external call.
pub const NF_EXTERNAL: i32 = -2;
/// Reply header room kept at the front of a worker's output buffer:
/// 4 bytes TCP frame length, 8 bytes lambda id, 1 byte status.
pub const HDR: usize = crate::wire::FRAME_LEN + crate::wire::REPLY_HEAD;

/// Largest linear memory of one lambda instance.
pub const MAX_MEMORY: usize = 16 << 20;
/// The engines that may each hold a pool of instances: the plain one, the slicer's
/// (src/slice.rs) and the fuel-counting one (made on first use, src/control.rs).
pub const ENGINES: u64 = 3;
/// `--pool-memory` when none is given: the linear memory of every wasm instance together.
pub const DEFAULT_POOL_MEMORY: u64 = 1 << 30;
/// Slots of each engine's pool that the workers' caches of idle instances leave free: for the
/// ABI check of a deploy, the instances of suspended sliced calls and stream connections.
pub const RESERVED_SLOTS: u32 = 2;
/// Slots of each engine's pool with the default `--pool-memory` (21).
pub const DEFAULT_SLOTS: u32 = (DEFAULT_POOL_MEMORY / MAX_MEMORY as u64 / ENGINES) as u32;

/// The instance pools' size, from the memory budget (`--pool-memory`, the cluster file's
/// `fastpath.memory`): every engine's pool gets `memory / MAX_MEMORY / ENGINES` slots, so the
/// pools of all engines together never hold more than `memory` of linear memory, whatever
/// lambdas, stream functions and fuel budgets are deployed. An instance that needs a slot when
/// its pool is full evicts an idle instance of another lambda (src/server/worker.rs), else the
/// call answers OVERLOADED; memory never grows past the budget (red team round 5, N2: 512
/// slots of 16 MiB each, per engine, let one tenant's lambdas grow the executor to 8 GiB).
///
/// Worked example: `--pool-memory 1073741824` (1 GiB) and 1 worker: 64 slots of 16 MiB, 21 per
/// engine; the worker keeps at most 19 idle instances cached (2 slots stay free), so a 20th
/// lambda's first call evicts the least useful cached instance, not a deploy's ABI check.
///
/// Known caveats: a lambda that uses little memory still counts as 16 MiB (the pool's slot);
/// the pools of engines no lambda uses stay empty, not lent to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// The budget the pools were sized from (bytes).
    pub memory: u64,
    /// Slots of each engine's pool.
    pub slots: u32,
    /// Idle instances one worker keeps cached at most (of all engines together).
    pub cache_per_worker: usize,
}

impl Pool {
    /// The smallest `--pool-memory`: RESERVED_SLOTS + 1 slots for each engine.
    pub const MIN_MEMORY: u64 = (RESERVED_SLOTS as u64 + 1) * MAX_MEMORY as u64 * ENGINES;

    /// The pools for a budget of `memory` bytes and `workers` worker threads.
    pub fn new(memory: u64, workers: usize) -> Result<Pool, String> {
        if memory < Pool::MIN_MEMORY {
            return Err(format!(
                "--pool-memory: {memory} bytes is too little; use at least {} ({} slots of {} MiB for each of the {ENGINES} engines)",
                Pool::MIN_MEMORY,
                RESERVED_SLOTS + 1,
                MAX_MEMORY >> 20
            ));
        }
        let slots = (memory / MAX_MEMORY as u64 / ENGINES).min(u32::MAX as u64 / 2) as u32;
        let free = (slots - RESERVED_SLOTS) as usize;
        Ok(Pool {
            memory,
            slots,
            cache_per_worker: (free / workers.max(1)).max(1),
        })
    }
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// Size the pools once, at start-up, before any engine is made (src/executor.rs); the size
/// in force is returned (a second call changes nothing).
pub fn configure_pool(p: Pool) -> Pool {
    *POOL.get_or_init(|| p)
}

/// The pools' size: the configured one, else the default budget for one worker.
pub fn pool() -> Pool {
    *POOL.get_or_init(|| Pool::new(DEFAULT_POOL_MEMORY, 1).expect("the default budget is valid"))
}

/// The engine; with `fuel` the modules it compiles count instructions (lambdas deployed with a
/// `fuel` budget), which costs some speed, so only those lambdas use it. Its pool has
/// `pool().slots` slots (see [`Pool`]).
pub fn make_engine(fuel: bool) -> wasmtime::Result<Engine> {
    let slots = pool().slots;
    let mut pool = PoolingAllocationConfig::default();
    pool.total_memories(slots)
        .total_tables(slots)
        .total_core_instances(slots)
        .total_stacks(slots)
        .max_memory_size(MAX_MEMORY)
        .max_unused_warm_slots(slots.min(64));
    let mut cfg = Config::new();
    cfg.strategy(Strategy::Cranelift)
        .cranelift_opt_level(OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .epoch_interruption(true)
        .consume_fuel(fuel);
    Engine::new(&cfg)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeKind {
    Web,
    Kv,
    Gray,
}

impl NativeKind {
    pub fn parse(s: &str) -> Option<NativeKind> {
        match s {
            "web" => Some(NativeKind::Web),
            "kv" => Some(NativeKind::Kv),
            "gray" => Some(NativeKind::Gray),
            _ => None,
        }
    }

    /// Bytes of input accepted (the buffer of the matching C lambda).
    pub fn buffer_size(self) -> usize {
        match self {
            NativeKind::Web => 64 * 1024,
            NativeKind::Kv => 128 * 1024,
            NativeKind::Gray => 1 << 20,
        }
    }
}

pub enum Code {
    Wasm {
        /// The compiled module, shared by every lambda deployed from the same bytes.
        module: Arc<Compiled>,
        /// The entry of a coalesced module this lambda runs (`<entry>.nf_handle`, ...), or
        /// None for a module of one lambda (`nf_handle`, ...).
        entry: Option<String>,
        buffer_size: usize,
        /// Compiled on the slicer's engine: calls run in slices (src/slice.rs).
        sliced: bool,
    },
    Native(NativeKind),
}

#[derive(Default)]
pub struct LambdaStats {
    pub calls: AtomicU64,
    pub ok: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub too_large: AtomicU64,
    pub overloaded: AtomicU64,
    pub bad_request: AtomicU64,
    pub external_errors: AtomicU64,
}

#[inline]
pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub struct Lambda {
    pub id: crate::wire::LambdaId,
    pub name: String,
    pub version: u64,
    pub weight: u32,
    pub timeout_ms: u64,
    /// Instruction budget per call (wasm lambdas compiled by the fuel engine), besides the timeout.
    pub fuel: Option<u64>,
    pub external: Option<SocketAddr>,
    pub code: Code,
    /// Unique per deployed version (key of the per-worker instance cache).
    pub uid: u64,
    /// Set when this version was swapped out or removed.
    pub retired: AtomicBool,
    pub stats: Arc<LambdaStats>,
    /// Whose share of instance slots its instances take (src/quota.rs): the deploy's `group`
    /// (the gateway sends the namespace), else the lambda's name.
    pub group: Arc<str>,
}

impl Lambda {
    /// The largest request payload this lambda accepts (its I/O buffer).
    #[inline]
    pub fn input_capacity(&self) -> usize {
        match &self.code {
            Code::Wasm { buffer_size, .. } => *buffer_size,
            Code::Native(k) => k.buffer_size(),
        }
    }
}

/// What one call of a lambda produced. For `Reply` the reply payload is in the worker's output
/// buffer after the `HDR` bytes.
pub enum Outcome {
    Reply,
    External(Vec<u8>),
    BadRequest,
    Trap(String),
    Timeout,
    TooLarge,
    ExternalError(String),
}

/// A compiled, linked module. Lambda coalescing (λ-NIC §5.1): lambdas deployed from the same
/// bytes share one (compiled once, its machine code in memory once); each keeps its own
/// instances, so coalescing never shares state between lambdas.
pub struct Compiled {
    pub pre: InstancePre<()>,
    /// Bytes of machine code wasmtime compiled it to.
    pub code_bytes: usize,
    /// The first 12 hex digits of the module's SHA-256.
    pub digest: String,
}

/// Validate the lambda ABI of `entry` (or of the plain exports) by making one instance now, so a
/// deploy fails early, not on the first call; returns the entry's buffer size.
pub fn check_abi(
    pre: &InstancePre<()>,
    slicer: Option<&Arc<Slicer>>,
    entry: Option<&str>,
) -> Result<usize, String> {
    let inst = WasmInst::new(pre, slicer, entry).map_err(|e| {
        if e.starts_with("instantiate:") && e.contains("limit") {
            // Every slot is taken (suspended calls, stream connections): the module may be fine.
            format!("the executor's instance pool is full right now ({} slots per engine, from fastpath.memory); retry, or raise fastpath.memory in the cluster file: {e}", pool().slots)
        } else {
            format!("module does not follow the lambda ABI: {e}")
        }
    })?;
    Ok(inst.buf_size)
}

/// The export `name` of `entry` ("web2.nf_handle"), or `name` itself without an entry.
fn export_name(entry: Option<&str>, name: &str) -> String {
    match entry {
        Some(e) => format!("{e}.{name}"),
        None => name.to_string(),
    }
}

/// Compile a wasm module and link its imports: every `wasi_snapshot_preview1` import is a stub
/// returning ENOSYS (proc_exit traps); any other import is an error naming it. It checks no ABI
/// ([`check_abi`] does): lambdas and WebAssembly stream functions share it.
pub fn link_wasm(engine: &Engine, bytes: &[u8]) -> Result<InstancePre<()>, String> {
    let module = Module::new(engine, bytes).map_err(|e| format!("cannot compile module: {e:#}"))?;
    let mut linker: Linker<()> = Linker::new(engine);
    for imp in module.imports() {
        let (m, n) = (imp.module(), imp.name());
        if m != "wasi_snapshot_preview1" {
            return Err(format!(
                "module imports {m}.{n}, which the fast path does not provide (only wasi_snapshot_preview1 stubs are available)"
            ));
        }
        let ft = match imp.ty() {
            ExternType::Func(ft) => ft,
            other => {
                return Err(format!(
                    "module imports {m}.{n} as a non-function ({other:?})"
                ))
            }
        };
        let name = n.to_string();
        let is_exit = n == "proc_exit";
        linker
            .func_new(m, n, ft.clone(), move |_caller, _params, results| {
                if is_exit {
                    return Err(wasmtime::Error::msg(format!(
                        "wasi {name}: the lambda exited"
                    )));
                }
                for (i, r) in results.iter_mut().enumerate() {
                    *r = match r {
                        Val::I64(_) => Val::I64(0),
                        Val::F32(_) => Val::F32(0),
                        Val::F64(_) => Val::F64(0),
                        _ => Val::I32(if i == 0 { ENOSYS } else { 0 }),
                    };
                }
                Ok(())
            })
            .map_err(|e| format!("cannot link {m}.{n}: {e:#}"))?;
        let _ = ValType::I32;
    }
    linker
        .instantiate_pre(&module)
        .map_err(|e| format!("cannot link module: {e:#}"))
}

/// One live instance of a wasm lambda (one per lambda version and worker).
pub struct WasmInst {
    store: Store<()>,
    mem: Memory,
    buf: usize,
    pub buf_size: usize,
    handle: TypedFunc<i32, i32>,
    resume: Option<TypedFunc<i32, i32>>,
    /// Set for a sliced instance: its slicer and the clock its epoch callback reads.
    clock: Option<(Arc<Slicer>, Arc<slice::CallClock>)>,
    /// Its group's claim on the slot it holds (src/quota.rs); none for a deploy's check.
    pub ticket: Option<crate::quota::Ticket>,
}

impl WasmInst {
    /// A fresh instance; with `slicer`, one whose calls run in slices (src/slice.rs).
    pub fn new(
        pre: &InstancePre<()>,
        slicer: Option<&Arc<Slicer>>,
        entry: Option<&str>,
    ) -> Result<WasmInst, String> {
        let mut store = Store::new(pre.module().engine(), ());
        // Instantiation and `_initialize` get a second, as every call's timeout bounds it.
        let (clock, _in_flight) = match slicer {
            Some(s) => {
                let clock = slice::install(&mut store, s);
                clock.arm(s, 1000, false);
                (Some((s.clone(), clock)), Some(slice::InFlight::new(s)))
            }
            None => {
                store.epoch_deadline_trap();
                store.set_epoch_deadline(1000);
                (None, None)
            }
        };
        // Fails (harmlessly) when the engine does not count fuel.
        let _ = store.set_fuel(u64::MAX / 2);
        let inst = pre
            .instantiate(&mut store)
            .map_err(|e| format!("instantiate: {e:#}"))?;
        if let Some(init) = inst.get_func(&mut store, "_initialize") {
            let init = init
                .typed::<(), ()>(&store)
                .map_err(|e| format!("_initialize: {e:#}"))?;
            init.call(&mut store, ())
                .map_err(|e| format!("_initialize trapped: {e:#}"))?;
        }
        let mem = inst
            .get_memory(&mut store, "memory")
            .ok_or_else(|| "missing export `memory`".to_string())?;
        let getter = |store: &mut Store<()>, name: &str| -> Result<i32, String> {
            let f = inst
                .get_typed_func::<(), i32>(&mut *store, name)
                .map_err(|e| format!("export `{name}: () -> i32`: {e:#}"))?;
            f.call(&mut *store, ())
                .map_err(|e| format!("{name} trapped: {e:#}"))
        };
        let buf = getter(&mut store, &export_name(entry, "nf_buffer"))? as u32 as usize;
        let buf_size = getter(&mut store, &export_name(entry, "nf_buffer_size"))? as u32 as usize;
        if buf
            .checked_add(buf_size)
            .is_none_or(|end| end > mem.data_size(&store))
        {
            return Err(format!(
                "nf_buffer {buf}+{buf_size} lies outside linear memory"
            ));
        }
        let handle_name = export_name(entry, "nf_handle");
        let handle = inst
            .get_typed_func::<i32, i32>(&mut store, &handle_name)
            .map_err(|e| format!("export `{handle_name}: (i32) -> i32`: {e:#}"))?;
        let resume = inst
            .get_typed_func::<i32, i32>(&mut store, &export_name(entry, "nf_resume"))
            .ok();
        Ok(WasmInst {
            store,
            mem,
            buf,
            buf_size,
            handle,
            resume,
            clock,
            ticket: None,
        })
    }

    /// Run `nf_handle` (or `nf_resume`) on `input` to its end; the reply goes to `out[HDR..]`.
    pub fn call(
        &mut self,
        input: &[u8],
        resume: bool,
        timeout_ms: u64,
        fuel: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        match self.begin(input, resume, timeout_ms, fuel, false) {
            Ok(f) => {
                let r = f.call(&mut self.store, input.len() as i32);
                self.end(r, out)
            }
            Err(o) => o,
        }
    }

    /// Start a sliced call: it runs to its first yield or its end (src/slice.rs). The instance
    /// travels with the call and comes back with its outcome.
    pub fn call_sliced(
        mut self,
        input: &[u8],
        resume: bool,
        timeout_ms: u64,
        out: &mut Vec<u8>,
    ) -> Sliced {
        let f = match self.begin(input, resume, timeout_ms, None, true) {
            Ok(f) => f,
            Err(o) => return Sliced::Done(self, o),
        };
        let (slicer, clock) = self.clock.clone().expect("a sliced instance");
        let n = input.len() as i32;
        let step = slice::Running::start(
            &slicer,
            clock,
            Box::pin(async move {
                let r = f.call_async(&mut self.store, n).await;
                (self, r)
            }),
        );
        Sliced::settle(step, out)
    }

    /// Copy `input` in and arm the deadline (or give the outcome that makes the call moot).
    fn begin(
        &mut self,
        input: &[u8],
        resume: bool,
        timeout_ms: u64,
        fuel: Option<u64>,
        may_yield: bool,
    ) -> Result<TypedFunc<i32, i32>, Outcome> {
        if input.len() > self.buf_size {
            return Err(if resume {
                Outcome::ExternalError(format!(
                    "external reply of {} bytes exceeds the lambda buffer ({} bytes)",
                    input.len(),
                    self.buf_size
                ))
            } else {
                Outcome::TooLarge
            });
        }
        let f = if resume {
            match &self.resume {
                Some(f) => f.clone(),
                None => {
                    return Err(Outcome::ExternalError(
                        "lambda has no nf_resume export".into(),
                    ))
                }
            }
        } else {
            self.handle.clone()
        };
        let buf = self.buf;
        // Memory can only grow, so the buffer checked at instantiation stays in bounds.
        match self
            .mem
            .data_mut(&mut self.store)
            .get_mut(buf..buf + input.len())
        {
            Some(dst) => dst.copy_from_slice(input),
            None => return Err(Outcome::Trap("buffer outside linear memory".into())),
        }
        match &self.clock {
            Some((slicer, clock)) => {
                clock.arm(slicer, timeout_ms, may_yield);
                self.store.set_epoch_deadline(1);
            }
            None => self.store.set_epoch_deadline(timeout_ms + 1),
        }
        if let Some(f) = fuel {
            let _ = self.store.set_fuel(f);
        }
        Ok(f)
    }

    /// The outcome of a call that returned `r`; its reply goes to `out[HDR..]`.
    fn end(&mut self, r: wasmtime::Result<i32>, out: &mut Vec<u8>) -> Outcome {
        let n = match r {
            Ok(n) => n,
            Err(e) => {
                return match e.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) | Some(Trap::OutOfFuel) => Outcome::Timeout,
                    Some(t) => Outcome::Trap(format!("wasm trap: {t}")),
                    None => Outcome::Trap(format!("{e}")),
                };
            }
        };
        let (buf, size) = (self.buf, self.buf_size);
        let data = self.mem.data(&self.store);
        if n >= 0 {
            let n = n as usize;
            if n > size {
                return Outcome::TooLarge;
            }
            out.truncate(HDR);
            out.extend_from_slice(&data[buf..buf + n]);
            Outcome::Reply
        } else if n == NF_EXTERNAL {
            if size < 4 {
                return Outcome::BadRequest;
            }
            let l = u32::from_le_bytes(data[buf..buf + 4].try_into().unwrap()) as usize;
            if l > size - 4 {
                return Outcome::BadRequest;
            }
            Outcome::External(data[buf + 4..buf + 4 + l].to_vec())
        } else {
            Outcome::BadRequest
        }
    }
}

/// A sliced call after its latest slice: finished (the instance is back, with the outcome;
/// a reply is in the worker's `out`) or suspended.
pub enum Sliced {
    Done(WasmInst, Outcome),
    Suspended(slice::Running<WasmInst>),
}

impl Sliced {
    /// Run a suspended call's next slice.
    pub fn resume(running: slice::Running<WasmInst>, out: &mut Vec<u8>) -> Sliced {
        Sliced::settle(running.resume(), out)
    }

    fn settle(step: slice::Step<WasmInst>, out: &mut Vec<u8>) -> Sliced {
        match step {
            slice::Step::Done(mut inst, r) => {
                let o = inst.end(r, out);
                Sliced::Done(inst, o)
            }
            slice::Step::Suspended(r) => Sliced::Suspended(r),
        }
    }
}

// The native lambdas (src/native.rs) are called through this module too.
pub use crate::native::*;
