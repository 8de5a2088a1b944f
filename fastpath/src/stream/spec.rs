//! A stream function's chain as deployed (`{"kind": "stream", "stream": {"chain": [...]}}`),
//! validated with errors that name the field, and the per-connection [`Pipeline`] it makes.
//!
//! A chain is `[parse]? [filter]* (topk | frequent)`: `parse` (text in, u32 out) can only come
//! first, `topk`/`frequent` (whose state is the reply) only last, and every stage works on one
//! element type (`dtype`, u32 or f32; `parse` gives u32, `frequent` takes only u32).

use serde_json::{json, Map, Value};

use super::ops::{Dtype, Filter, HeapTopK, Insertion, ParseError, Parser, SpaceSaving};
use super::wasm::{WasmStage, WasmStream, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS};
use crate::wire::{BAD_REQUEST, OK, OVERLOADED, TIMEOUT, TRAP};

/// Compiles and links a `wasm` stage's module: `(path, fuel)` → the pre-linked module (the
/// executor's engines; see `control.rs`).
pub type Compile<'a> = &'a dyn Fn(&str, Option<u64>) -> Result<wasmtime::InstancePre<()>, String>;

/// Most stages in a chain.
pub const MAX_STAGES: usize = 16;
/// Largest K (Top-K registers, Space-Saving counters): bounds each connection's state to
/// about K × 8 bytes (topk) or K × 40 bytes (frequent).
pub const MAX_K: u64 = 4096;

/// Element steps (compare-and-swap or so) one turn of the event loop spends on one connection:
/// a few milliseconds at most.
const TURN_WORK: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Insertion,
    Heap,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reduce {
    TopK {
        k: usize,
        variant: Variant,
    },
    Frequent {
        k: usize,
    },
    /// A WebAssembly stream function (src/stream/wasm.rs).
    Wasm(WasmStage),
}

/// A validated chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// The payload is ASCII text for the `parse` stage (elements of 1 byte), else elements of
    /// `dtype` (4 bytes, little-endian).
    pub parse: bool,
    pub dtype: Dtype,
    pub filters: Vec<Filter>,
    pub reduce: Reduce,
}

impl Chain {
    /// Bytes of one input element: the payload length must be a multiple of it.
    pub fn elem_size(&self) -> u64 {
        if self.parse {
            1
        } else {
            4
        }
    }

    /// Payload bytes one turn of the event loop feeds this chain: about `TURN_WORK` element
    /// steps (an insertion network costs K steps an element, a heap or Space-Saving about
    /// log2 K), between 4 KiB and 256 KiB.
    pub fn turn_bytes(&self) -> usize {
        let log2 = |k: usize| (usize::BITS - k.leading_zeros()) as usize;
        let per_elem = self.filters.len()
            + match self.reduce {
                Reduce::TopK {
                    k,
                    variant: Variant::Insertion,
                } => k,
                Reduce::TopK {
                    k,
                    variant: Variant::Heap,
                } => 2 + log2(k),
                Reduce::Frequent { k } => 8 + log2(k),
                // Unknown cost: assume an insertion network of K (each call is also bounded
                // by the stage's timeout).
                Reduce::Wasm(ref w) => w.k,
            };
        let elem_bytes = if self.parse { 2 } else { 4 };
        (TURN_WORK / per_elem.max(1) * elem_bytes).clamp(4 << 10, 256 << 10)
    }

    /// The chain as `stats` and `deploy` show it.
    pub fn describe(&self) -> Value {
        let mut stages = Vec::new();
        if self.parse {
            stages.push(json!({"fn": "parse"}));
        }
        for f in &self.filters {
            stages.push(match *f {
                Filter::U32 { min, max } => json!({"fn": "filter", "min": min, "max": max}),
                Filter::F32 { min, max } => json!({"fn": "filter", "min": min, "max": max}),
            });
        }
        stages.push(match &self.reduce {
            Reduce::TopK { k, variant } => json!({"fn": "topk", "k": k, "dtype": self.dtype.name(),
                "variant": if *variant == Variant::Heap { "heap" } else { "insertion" }}),
            Reduce::Frequent { k } => json!({"fn": "frequent", "k": k, "dtype": "u32"}),
            Reduce::Wasm(w) => json!({"fn": "wasm", "path": w.path, "k": w.k,
                "dtype": self.dtype.name(), "fuel": w.fuel, "timeout_ms": w.timeout_ms}),
        });
        json!({"chain": stages, "input": if self.parse { "text" } else { self.dtype.name() }})
    }

    /// The pipeline of a chain of native stages (panics for a `wasm` stage: use
    /// [`Chain::try_pipeline`]).
    pub fn pipeline(&self) -> Pipeline {
        self.try_pipeline()
            .expect("a wasm stage's pipeline can fail: use try_pipeline")
    }

    /// One connection's pipeline; a `wasm` stage instantiates its module here (OVERLOADED
    /// when the instance pool is full, TRAP/TIMEOUT when `nf_stream_init` fails).
    pub fn try_pipeline(&self) -> Result<Pipeline, Refusal> {
        Ok(Pipeline {
            input: if self.parse {
                Input::Parse(Parser::default())
            } else {
                Input::Raw {
                    carry: [0; 4],
                    n: 0,
                }
            },
            filters: self.filters.clone(),
            reduce: match self.reduce {
                Reduce::TopK {
                    k,
                    variant: Variant::Insertion,
                } => State::Insertion(Insertion::new(self.dtype, k)),
                Reduce::TopK {
                    k,
                    variant: Variant::Heap,
                } => State::Heap(HeapTopK::new(self.dtype, k)),
                Reduce::Frequent { k } => State::Frequent(SpaceSaving::new(k)),
                Reduce::Wasm(ref w) => State::Wasm(Box::new(WasmStream::new(w)?)),
            },
            elements: 0,
        })
    }
}

const STAGE_FNS: &str = "parse, filter, topk, frequent or wasm";

/// Validate the deploy's `stream` object (chains of native stages only: a `wasm` stage needs
/// [`parse_chain_with`] and the executor's engine).
pub fn parse_chain(v: Option<&Value>) -> Result<Chain, String> {
    parse_chain_with(v, None)
}

/// Validate the deploy's `stream` object; `compile` compiles a `wasm` stage's module.
pub fn parse_chain_with(v: Option<&Value>, compile: Option<Compile>) -> Result<Chain, String> {
    let m = match v {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => {
            return Err(
                "stream: required for kind stream, e.g. {\"chain\": [{\"fn\": \"topk\", \"k\": 16, \"dtype\": \"u32\"}]}"
                    .into(),
            )
        }
        Some(other) => {
            return Err(format!(
                "stream: {other} is not an object; give {{\"chain\": [stages]}}"
            ))
        }
    };
    for k in m.keys() {
        match k.as_str() {
            "chain" => {}
            "wasm" | "path" | "module" => {
                return Err(format!(
                    "stream.{k}: a WebAssembly stream function is a chain stage: {{\"chain\": [{{\"fn\": \"wasm\", \"path\": \"/abs/module.wasm\", \"k\": 16}}]}}"
                ))
            }
            _ => return Err(format!("stream.{k}: unknown field; stream accepts chain")),
        }
    }
    let stages = match m.get("chain") {
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_STAGES => a,
        Some(Value::Array(a)) => {
            return Err(format!(
                "stream.chain: {} stages; give 1 to {MAX_STAGES}",
                a.len()
            ))
        }
        Some(other) => return Err(format!("stream.chain: {other} is not an array of stages")),
        None => return Err("stream.chain: required; an array of stages, e.g. [{\"fn\": \"parse\"}, {\"fn\": \"topk\", \"k\": 16}]".into()),
    };
    let mut objs = Vec::new();
    for (i, s) in stages.iter().enumerate() {
        match s {
            Value::Object(o) => objs.push(o),
            other => {
                return Err(format!(
                    "stream.chain[{i}]: {other} is not an object like {{\"fn\": \"topk\", ...}}"
                ))
            }
        }
    }
    let fns: Vec<&str> = objs
        .iter()
        .enumerate()
        .map(|(i, o)| stage_fn(i, o))
        .collect::<Result<_, _>>()?;
    let parse = fns[0] == "parse";
    let dtype = chain_dtype(&objs, parse)?;
    let last = fns.len() - 1;
    let mut filters = Vec::new();
    let mut reduce = None;
    for (i, (o, f)) in objs.iter().zip(&fns).enumerate() {
        let at = format!("stream.chain[{i}]");
        match *f {
            "parse" => {
                if i != 0 {
                    return Err(format!("{at}.fn: parse must be the first stage (it turns the text payload into u32 elements)"));
                }
                only_fields(&at, o, &["fn"])?;
            }
            "filter" => {
                only_fields(&at, o, &["fn", "min", "max", "dtype"])?;
                filters.push(filter(&at, o, dtype)?);
            }
            "topk" | "frequent" => {
                if i != last {
                    return Err(format!(
                        "{at}.fn: {f} must be the last stage (its state is the reply)"
                    ));
                }
                let k = get_k(&at, o)?;
                reduce = Some(if *f == "topk" {
                    only_fields(&at, o, &["fn", "k", "dtype", "variant"])?;
                    let variant = match o.get("variant") {
                        None | Some(Value::Null) => Variant::Insertion,
                        Some(Value::String(s)) if s == "insertion" => Variant::Insertion,
                        Some(Value::String(s)) if s == "heap" => Variant::Heap,
                        Some(v) => {
                            return Err(format!(
                                "{at}.variant: {v} is not a variant; use \"insertion\" or \"heap\""
                            ))
                        }
                    };
                    Reduce::TopK { k, variant }
                } else {
                    only_fields(&at, o, &["fn", "k", "dtype"])?;
                    if dtype != Dtype::U32 {
                        return Err(format!(
                            "{at}.dtype: frequent counts u32 values only; the chain's elements are {}",
                            dtype.name()
                        ));
                    }
                    Reduce::Frequent { k }
                });
            }
            "wasm" => {
                if i != last {
                    return Err(format!(
                        "{at}.fn: wasm must be the last stage (its state is the reply)"
                    ));
                }
                only_fields(&at, o, &["fn", "path", "k", "dtype", "fuel", "timeout_ms"])?;
                reduce = Some(Reduce::Wasm(wasm_stage(&at, o, compile)?));
            }
            _ => unreachable!("stage_fn checked the name"),
        }
    }
    let reduce = reduce.ok_or_else(|| {
        format!(
            "stream.chain[{last}].fn: the last stage must be topk, frequent or wasm (the stage whose state is the reply), not {}",
            fns[last]
        )
    })?;
    Ok(Chain {
        parse,
        dtype,
        filters,
        reduce,
    })
}

fn stage_fn<'a>(i: usize, o: &'a Map<String, Value>) -> Result<&'a str, String> {
    match o.get("fn") {
        Some(Value::String(s)) => match s.as_str() {
            "parse" | "filter" | "topk" | "frequent" | "wasm" => Ok(s),
            other => Err(format!(
                "stream.chain[{i}].fn: {other:?} is not a stream function; use {STAGE_FNS}"
            )),
        },
        Some(v) => Err(format!(
            "stream.chain[{i}].fn: {v} is not a string; use {STAGE_FNS}"
        )),
        None => Err(format!("stream.chain[{i}].fn: required; use {STAGE_FNS}")),
    }
}

fn only_fields(at: &str, o: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    for k in o.keys() {
        if !allowed.contains(&k.as_str()) {
            let f = o.get("fn").and_then(Value::as_str).unwrap_or("?");
            return Err(format!(
                "{at}.{k}: unknown field for {f}; it accepts {}",
                allowed.join(", ")
            ));
        }
    }
    Ok(())
}

/// The chain's one element type: u32 after parse; else the stages' `dtype` (all the same), or
/// u32 when none says.
fn chain_dtype(objs: &[&Map<String, Value>], parse: bool) -> Result<Dtype, String> {
    let mut found: Option<(Dtype, usize)> = parse.then_some((Dtype::U32, 0));
    for (i, o) in objs.iter().enumerate() {
        let d = match o.get("dtype") {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => Dtype::parse(s).ok_or_else(|| {
                format!("stream.chain[{i}].dtype: {s:?} is not a dtype; use \"u32\" or \"f32\"")
            })?,
            Some(v) => {
                return Err(format!(
                    "stream.chain[{i}].dtype: {v} is not a string; use \"u32\" or \"f32\""
                ))
            }
        };
        match found {
            None => found = Some((d, i)),
            Some((f, j)) if f != d => {
                let why = if parse && j == 0 {
                    "parse gives u32 elements".to_string()
                } else {
                    format!("stream.chain[{j}].dtype is {:?}", f.name())
                };
                return Err(format!(
                    "stream.chain[{i}].dtype: {:?} does not match the chain's elements ({why}); every stage works on one dtype",
                    d.name()
                ));
            }
            _ => {}
        }
    }
    Ok(found.map_or(Dtype::U32, |(d, _)| d))
}

/// A `wasm` stage: compile its module and make one instance now, so a module that does not
/// follow the stream ABI (or refuses `k`) fails the deploy, not the first request.
fn wasm_stage(
    at: &str,
    o: &Map<String, Value>,
    compile: Option<Compile>,
) -> Result<WasmStage, String> {
    let compile = compile.ok_or_else(|| {
        format!("{at}.fn: a wasm stage is compiled by the executor's deploy (parse_chain_with)")
    })?;
    let path = match o.get("path") {
        Some(Value::String(p)) if p.starts_with('/') => p.clone(),
        Some(v) => {
            return Err(format!(
                "{at}.path: {v} is not an absolute path of a .wasm file"
            ))
        }
        None => {
            return Err(format!(
                "{at}.path: required; the absolute path of a .wasm file with the stream ABI"
            ))
        }
    };
    let k = get_k(at, o)?;
    let uint = |key: &str, lo: u64, hi: u64| -> Result<Option<u64>, String> {
        match o.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(format!(
                    "{at}.{key}: {n} is out of range; use an integer from {lo} to {hi}"
                )),
            },
            Some(v) => Err(format!("{at}.{key}: {v} is not an integer")),
        }
    };
    let fuel = uint("fuel", 1, u64::MAX / 2)?;
    let timeout_ms = uint("timeout_ms", 1, MAX_TIMEOUT_MS)?.unwrap_or(DEFAULT_TIMEOUT_MS);
    let pre = compile(&path, fuel).map_err(|e| format!("{at}.path: {e}"))?;
    let stage = WasmStage {
        path,
        k,
        fuel,
        timeout_ms,
        pre,
    };
    WasmStream::new(&stage).map_err(|e| {
        format!(
            "{at}.path: {}: module does not follow the stream ABI: {e:?}",
            stage.path
        )
    })?;
    Ok(stage)
}

fn get_k(at: &str, o: &Map<String, Value>) -> Result<usize, String> {
    match o.get("k") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if (1..=MAX_K).contains(&k) => Ok(k as usize),
            _ => Err(format!(
                "{at}.k: {n} is out of range; use an integer from 1 to {MAX_K}"
            )),
        },
        Some(v) => Err(format!(
            "{at}.k: {v} is not an integer; use an integer from 1 to {MAX_K}"
        )),
        None => Err(format!(
            "{at}.k: required; use an integer from 1 to {MAX_K}"
        )),
    }
}

fn filter(at: &str, o: &Map<String, Value>, dtype: Dtype) -> Result<Filter, String> {
    let present = |k: &str| o.get(k).is_some_and(|v| !v.is_null());
    if !present("min") && !present("max") {
        return Err(format!(
            "{at}: filter needs min and/or max (it keeps min <= x <= max)"
        ));
    }
    let f = match dtype {
        Dtype::U32 => {
            let get = |k: &str, dflt: u32| -> Result<u32, String> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(dflt),
                    Some(Value::Number(n)) => n
                        .as_u64()
                        .filter(|&x| x <= u32::MAX as u64)
                        .map(|x| x as u32)
                        .ok_or_else(|| {
                            format!(
                                "{at}.{k}: {n} is not a u32; use an integer from 0 to {}",
                                u32::MAX
                            )
                        }),
                    Some(v) => Err(format!(
                        "{at}.{k}: {v} is not a number; use an integer from 0 to {}",
                        u32::MAX
                    )),
                }
            };
            Filter::U32 {
                min: get("min", 0)?,
                max: get("max", u32::MAX)?,
            }
        }
        Dtype::F32 => {
            let get = |k: &str, dflt: f32| -> Result<f32, String> {
                match o.get(k) {
                    None | Some(Value::Null) => Ok(dflt),
                    Some(Value::Number(n)) => n
                        .as_f64()
                        .map(|x| x as f32)
                        .ok_or_else(|| format!("{at}.{k}: {n} is not a number")),
                    Some(v) => Err(format!("{at}.{k}: {v} is not a number")),
                }
            };
            Filter::F32 {
                min: get("min", f32::NEG_INFINITY)?,
                max: get("max", f32::INFINITY)?,
            }
        }
    };
    let empty = match f {
        Filter::U32 { min, max } => min > max,
        Filter::F32 { min, max } => min > max,
    };
    if empty {
        return Err(format!(
            "{at}.max: below min, so the filter would keep nothing"
        ));
    }
    Ok(f)
}

/// Why a stream was refused (the reply status is BAD_REQUEST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Parse(ParseError),
    /// The stream ended inside an element (its length is not a multiple of 4).
    PartialElement,
    /// A `wasm` stage's module returned a negative number (BAD_REQUEST).
    Module,
    /// A `wasm` stage trapped (or broke the ABI): TRAP.
    Trap(String),
    /// A `wasm` stage ran out of fuel or past its timeout: TIMEOUT.
    Timeout,
    /// No instance for a `wasm` stage (the pool is full): OVERLOADED.
    Overloaded(String),
}

enum Input {
    Parse(Parser),
    /// Bytes of an element split across reads.
    Raw {
        carry: [u8; 4],
        n: usize,
    },
}

enum State {
    Insertion(Insertion),
    Heap(HeapTopK),
    Frequent(SpaceSaving),
    Wasm(Box<WasmStream>),
}

/// One request's run of a chain: the decoder (or parser), the filters and the reducer's state.
/// Its memory is the reducer's K registers or counters, whatever the stream's length.
pub struct Pipeline {
    input: Input,
    filters: Vec<Filter>,
    reduce: State,
    /// Elements decoded (before the filters).
    pub elements: u64,
}

impl Pipeline {
    /// Feed the next bytes of the payload; `scratch` is the caller's element buffer (one per
    /// event loop, not per connection).
    pub fn feed(&mut self, bytes: &[u8], scratch: &mut Vec<u32>) -> Result<(), Refusal> {
        scratch.clear();
        match &mut self.input {
            Input::Parse(p) => p.feed(bytes, scratch).map_err(Refusal::Parse)?,
            Input::Raw { carry, n } => {
                let mut b = bytes;
                if *n > 0 {
                    let take = (4 - *n).min(b.len());
                    carry[*n..*n + take].copy_from_slice(&b[..take]);
                    *n += take;
                    b = &b[take..];
                    if *n == 4 {
                        scratch.push(u32::from_le_bytes(*carry));
                        *n = 0;
                    }
                }
                let whole = b.len() / 4 * 4;
                scratch.extend(
                    b[..whole]
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().unwrap())),
                );
                let rest = &b[whole..];
                carry[..rest.len()].copy_from_slice(rest);
                *n += rest.len();
            }
        }
        self.push(scratch)
    }

    fn push(&mut self, elems: &mut Vec<u32>) -> Result<(), Refusal> {
        self.elements += elems.len() as u64;
        for f in &self.filters {
            f.apply(elems);
        }
        match &mut self.reduce {
            State::Insertion(t) => t.push_all(elems),
            State::Heap(t) => t.push_all(elems),
            State::Frequent(t) => t.push_all(elems),
            State::Wasm(w) => return w.feed(elems),
        }
        Ok(())
    }

    /// The end of the payload: the reply (`status u8`, `count u32 LE`, the elements or
    /// (value, count) pairs, little-endian).
    pub fn finish(&mut self, scratch: &mut Vec<u32>) -> Result<Vec<u8>, Refusal> {
        scratch.clear();
        match &mut self.input {
            Input::Parse(p) => p.finish(scratch),
            Input::Raw { n, .. } => {
                if *n != 0 {
                    return Err(Refusal::PartialElement);
                }
            }
        }
        self.push(scratch)?;
        Ok(match &mut self.reduce {
            State::Insertion(t) => reply_elems(&t.result()),
            State::Heap(t) => reply_elems(&t.result()),
            State::Frequent(t) => {
                let r = t.result();
                let mut out = reply_head(OK, r.len());
                for (v, c) in r {
                    out.extend_from_slice(&v.to_le_bytes());
                    out.extend_from_slice(&c.to_le_bytes());
                }
                out
            }
            State::Wasm(w) => w.finish()?,
        })
    }
}

/// A reply's head: status, count (u32 LE).
pub fn reply_head(status: u8, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + count * 8);
    out.push(status);
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out
}

fn reply_elems(elems: &[u32]) -> Vec<u8> {
    let mut out = reply_head(OK, elems.len());
    for e in elems {
        out.extend_from_slice(&e.to_le_bytes());
    }
    out
}

/// An empty reply with `status` (BAD_REQUEST, UNKNOWN, TIMEOUT, ...).
pub fn reply_status(status: u8) -> Vec<u8> {
    reply_head(status, 0)
}

/// The status a refusal answers.
pub fn refusal_status(r: &Refusal) -> u8 {
    match r {
        Refusal::Parse(_) | Refusal::PartialElement | Refusal::Module => BAD_REQUEST,
        Refusal::Trap(_) => TRAP,
        Refusal::Timeout => TIMEOUT,
        Refusal::Overloaded(_) => OVERLOADED,
    }
}
