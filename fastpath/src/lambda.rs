//! Lambdas: WebAssembly modules (wasmtime, pooling allocator, epoch interruption) and
//! native Rust lambdas, behind one calling convention.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use wasmtime::{
    Config, Engine, ExternType, InstanceAllocationStrategy, InstancePre, Linker, Memory, Module,
    OptLevel, PoolingAllocationConfig, Store, Strategy, Trap, TypedFunc, Val, ValType,
};

/// WASI errno ENOSYS, returned by every stubbed `wasi_snapshot_preview1` import.
pub const ENOSYS: i32 = 52;
/// `nf_handle` / `nf_resume` return value asking for an external call.
pub const NF_EXTERNAL: i32 = -2;
/// Reply header room kept at the front of a worker's output buffer:
/// 4 bytes TCP frame length, 4 bytes lambda id, 1 byte status.
pub const HDR: usize = crate::wire::FRAME_LEN + crate::wire::REPLY_HEAD;

/// Highest lambda id accepted by `deploy` (the match table is dense).
pub use crate::wire::MAX_ID;

/// Number of instance slots in the pooling allocator.
pub const POOL_INSTANCES: u32 = 512;
/// Largest linear memory of one lambda instance.
pub const MAX_MEMORY: usize = 16 << 20;

/// The engine; with `fuel` the modules it compiles count instructions (lambdas deployed with a
/// `fuel` budget), which costs some speed, so only those lambdas use it.
pub fn make_engine(fuel: bool) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_memories(POOL_INSTANCES)
        .total_tables(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES)
        .max_memory_size(MAX_MEMORY)
        .max_unused_warm_slots(64);
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
        pre: InstancePre<()>,
        buffer_size: usize,
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
    pub id: u32,
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

/// Compile a wasm module and link its imports: every `wasi_snapshot_preview1` import is a stub
/// returning ENOSYS (proc_exit traps); any other import is an error naming it.
pub fn compile_wasm(engine: &Engine, bytes: &[u8]) -> Result<(InstancePre<()>, usize), String> {
    let pre = link_wasm(engine, bytes)?;
    // Validate the ABI by making one instance now (deploy fails early, not on the first call).
    let inst =
        WasmInst::new(&pre).map_err(|e| format!("module does not follow the lambda ABI: {e}"))?;
    Ok((pre, inst.buf_size))
}

/// Compile a wasm module and link its imports (the WASI stubs of [`compile_wasm`]), checking
/// no ABI: lambdas and WebAssembly stream functions share it.
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
}

impl WasmInst {
    pub fn new(pre: &InstancePre<()>) -> Result<WasmInst, String> {
        let mut store = Store::new(pre.module().engine(), ());
        store.epoch_deadline_trap();
        store.set_epoch_deadline(1000);
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
        let buf = getter(&mut store, "nf_buffer")? as u32 as usize;
        let buf_size = getter(&mut store, "nf_buffer_size")? as u32 as usize;
        if buf
            .checked_add(buf_size)
            .is_none_or(|end| end > mem.data_size(&store))
        {
            return Err(format!(
                "nf_buffer {buf}+{buf_size} lies outside linear memory"
            ));
        }
        let handle = inst
            .get_typed_func::<i32, i32>(&mut store, "nf_handle")
            .map_err(|e| format!("export `nf_handle: (i32) -> i32`: {e:#}"))?;
        let resume = inst
            .get_typed_func::<i32, i32>(&mut store, "nf_resume")
            .ok();
        Ok(WasmInst {
            store,
            mem,
            buf,
            buf_size,
            handle,
            resume,
        })
    }

    /// Run `nf_handle` (or `nf_resume`) on `input`; the reply goes to `out[HDR..]`.
    pub fn call(
        &mut self,
        input: &[u8],
        resume: bool,
        timeout_ms: u64,
        fuel: Option<u64>,
        out: &mut Vec<u8>,
    ) -> Outcome {
        if input.len() > self.buf_size {
            return if resume {
                Outcome::ExternalError(format!(
                    "external reply of {} bytes exceeds the lambda buffer ({} bytes)",
                    input.len(),
                    self.buf_size
                ))
            } else {
                Outcome::TooLarge
            };
        }
        let f = if resume {
            match &self.resume {
                Some(f) => f.clone(),
                None => return Outcome::ExternalError("lambda has no nf_resume export".into()),
            }
        } else {
            self.handle.clone()
        };
        let (buf, size) = (self.buf, self.buf_size);
        // Memory can only grow, so the buffer checked at instantiation stays in bounds.
        match self
            .mem
            .data_mut(&mut self.store)
            .get_mut(buf..buf + input.len())
        {
            Some(dst) => dst.copy_from_slice(input),
            None => return Outcome::Trap("buffer outside linear memory".into()),
        }
        self.store.set_epoch_deadline(timeout_ms + 1);
        if let Some(f) = fuel {
            let _ = self.store.set_fuel(f);
        }
        let n = match f.call(&mut self.store, input.len() as i32) {
            Ok(n) => n,
            Err(e) => {
                return match e.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) | Some(Trap::OutOfFuel) => Outcome::Timeout,
                    Some(t) => Outcome::Trap(format!("wasm trap: {t}")),
                    None => Outcome::Trap(format!("{e}")),
                }
            }
        };
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

// ---------------------------------------------------------------------------------------------
// Native lambdas: the same behaviour as fastpath/lambdas/{web,kv,gray}.c

pub const WEB_PREFIX: &[u8] = b"Hello from nearfaas fastpath v1: ";

pub fn run_native(kind: NativeKind, input: &[u8], resume: bool, out: &mut Vec<u8>) -> Outcome {
    out.truncate(HDR);
    match (kind, resume) {
        (NativeKind::Web, false) => {
            let keep = input.len().min(kind.buffer_size() - WEB_PREFIX.len());
            out.extend_from_slice(WEB_PREFIX);
            out.extend_from_slice(&input[..keep]);
            Outcome::Reply
        }
        (NativeKind::Gray, false) => {
            if !input.len().is_multiple_of(4) {
                return Outcome::BadRequest;
            }
            out.extend(
                input.chunks_exact(4).map(|p| {
                    ((77 * p[0] as u32 + 150 * p[1] as u32 + 29 * p[2] as u32) >> 8) as u8
                }),
            );
            Outcome::Reply
        }
        (NativeKind::Kv, false) => match kv_request(input) {
            Some(cmd) => Outcome::External(cmd),
            None => Outcome::BadRequest,
        },
        (NativeKind::Kv, true) => match kv_reply(input, out) {
            Some(()) => Outcome::Reply,
            None => Outcome::BadRequest,
        },
        (_, true) => Outcome::ExternalError("native lambda makes no external calls".into()),
    }
}

/// Native gray in place: the luma of pixel i goes to byte i (i <= 4i, so it never overwrites
/// unread input). Returns the reply length, or None for BAD_REQUEST.
pub fn gray_in_place(buf: &mut [u8]) -> Option<usize> {
    if !buf.len().is_multiple_of(4) {
        return None;
    }
    let n = buf.len() / 4;
    for i in 0..n {
        let (r, g, b) = (
            buf[4 * i] as u32,
            buf[4 * i + 1] as u32,
            buf[4 * i + 2] as u32,
        );
        buf[i] = ((77 * r + 150 * g + 29 * b) >> 8) as u8;
    }
    Some(n)
}

fn valid_key(k: &[u8]) -> bool {
    !k.is_empty() && k.len() <= 250 && k.iter().all(|&c| c > b' ' && c != 0x7f)
}

/// "GET key" / "SET key value" -> memcached text protocol command.
pub fn kv_request(input: &[u8]) -> Option<Vec<u8>> {
    let input = input.strip_suffix(b"\n").unwrap_or(input);
    let input = input.strip_suffix(b"\r").unwrap_or(input);
    if let Some(key) = input.strip_prefix(b"GET ") {
        if !valid_key(key) {
            return None;
        }
        let mut c = b"get ".to_vec();
        c.extend_from_slice(key);
        c.extend_from_slice(b"\r\n");
        Some(c)
    } else if let Some(rest) = input.strip_prefix(b"SET ") {
        let sp = rest.iter().position(|&c| c == b' ')?;
        let (key, value) = (&rest[..sp], &rest[sp + 1..]);
        if !valid_key(key) {
            return None;
        }
        let mut c = b"set ".to_vec();
        c.extend_from_slice(key);
        c.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
        c.extend_from_slice(value);
        c.extend_from_slice(b"\r\n");
        Some(c)
    } else {
        None
    }
}

/// memcached reply -> "VALUE <data>" / "NOT_FOUND" / "STORED"; anything else (NOT_STORED,
/// ERROR, malformed) -> None (BAD_REQUEST), exactly as kv.c's nf_resume.
pub fn kv_reply(reply: &[u8], out: &mut Vec<u8>) -> Option<()> {
    if reply == b"END\r\n" {
        out.extend_from_slice(b"NOT_FOUND");
        return Some(());
    }
    if reply == b"STORED\r\n" {
        out.extend_from_slice(b"STORED");
        return Some(());
    }
    if !reply.starts_with(b"VALUE ") {
        return None;
    }
    let eol = find_crlf(reply, 6)?;
    let toks: Vec<&[u8]> = reply[6..eol].split(|&c| c == b' ').collect();
    if toks.len() < 3 || toks.len() > 4 || toks.iter().any(|t| t.is_empty()) {
        return None;
    }
    let n: usize = std::str::from_utf8(toks[2]).ok()?.parse().ok()?;
    let d0 = eol + 2;
    if d0 + n + 7 != reply.len() || &reply[d0 + n..] != b"\r\nEND\r\n" {
        return None;
    }
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(&reply[d0..d0 + n]);
    Some(())
}

pub fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    if buf.len() < 2 {
        return None;
    }
    (from..buf.len() - 1).find(|&i| buf[i] == b'\r' && buf[i + 1] == b'\n')
}

/// Length of the first complete memcached reply in `buf`, if it is all there: any number of
/// `VALUE <key> <flags> <bytes> [cas]\r\n<data>\r\n` blocks then `END\r\n`, or one line.
pub fn memcached_reply_len(buf: &[u8]) -> Option<usize> {
    let mut pos = 0;
    loop {
        let e = find_crlf(buf, pos)?;
        let line = &buf[pos..e];
        if line.starts_with(b"VALUE ") {
            let n: usize = line
                .split(|&c| c == b' ')
                .nth(3)
                .and_then(|t| std::str::from_utf8(t).ok())
                .and_then(|t| t.parse().ok())?;
            pos = e + 2 + n + 2;
            if pos > buf.len() {
                return None;
            }
        } else {
            // END after values, or a single-line reply (STORED, NOT_FOUND, ERROR, ...).
            return Some(e + 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn memcached_framing() {
        assert_eq!(memcached_reply_len(b"END\r\n"), Some(5));
        assert_eq!(memcached_reply_len(b"STORED\r\nEND"), Some(8));
        assert_eq!(memcached_reply_len(b"VALUE k 0 5\r\nEND\r\n"), None);
        assert_eq!(
            memcached_reply_len(b"VALUE k 0 5\r\nEND\r\n\r\nEND\r\n"),
            Some(25)
        );
        assert_eq!(memcached_reply_len(b"VALUE k 0 5\r\nab"), None);
        let mut out = Vec::new();
        kv_reply(b"VALUE k 0 3\r\nabc\r\nEND\r\n", &mut out).unwrap();
        assert_eq!(out, b"VALUE abc");
        assert!(kv_reply(b"NOT_STORED\r\n", &mut out).is_none());
        assert!(kv_reply(b"VALUE k 0 3\r\nabcd\r\nEND\r\n", &mut out).is_none());
        assert_eq!(
            kv_request(b"SET a hello world").unwrap(),
            b"set a 0 0 11\r\nhello world\r\n"
        );
        assert_eq!(kv_request(b"GET a").unwrap(), b"get a\r\n");
        assert!(kv_request(b"PUT a").is_none());
    }
    #[test]
    fn gray() {
        let mut b = vec![255, 255, 255, 0, 10, 20, 30, 0];
        assert_eq!(gray_in_place(&mut b), Some(2));
        assert_eq!(b[0], 255);
        assert_eq!(b[1], ((77 * 10 + 150 * 20 + 29 * 30) >> 8) as u8);
    }
}
