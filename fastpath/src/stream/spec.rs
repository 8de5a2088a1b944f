//! A stream function's chain as deployed (`{"kind": "stream", "stream": {"chain": [...]}}`),
//! validated with errors that name the field, and the per-connection [`Pipeline`] it makes.
//!
//! A chain is `[parse]? [filter]* (topk | frequent)`: `parse` (text in, u32 out) can only come
//! first, `topk`/`frequent` (whose state is the reply) only last, and every stage works on one
//! element type (`dtype`, u32 or f32; `parse` gives u32, `frequent` takes only u32).

use std::sync::Arc;

use serde_json::{json, Value};

use super::ops::{Dtype, Filter, HeapTopK, Insertion, ParseError, Parser, SpaceSaving};
pub use super::stage::{parse_chain, parse_chain_with};
use super::wasm::{WasmStage, WasmStream};
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
                // Not the loop's work: the loop reads a wasm request in batches of
                // `offload::BATCH` for the offload pool (this turn size is unused).
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
    /// when the instance pool is full, TRAP/TIMEOUT when `nf_stream_init` fails). No group's
    /// share is counted: the served path uses [`Chain::pipeline_for`].
    pub fn try_pipeline(&self) -> Result<Pipeline, Refusal> {
        self.pipeline_in(None)
    }

    /// A request's pipeline whose `wasm` instance takes a ticket of `group` (src/quota.rs:
    /// OVERLOADED when the group holds its share of instance slots).
    pub fn pipeline_for(&self, group: &Arc<str>) -> Result<Pipeline, Refusal> {
        self.pipeline_in(Some(group))
    }

    fn pipeline_in(&self, group: Option<&Arc<str>>) -> Result<Pipeline, Refusal> {
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
                Reduce::Wasm(ref w) => {
                    let ticket = group
                        .map(crate::quota::acquire)
                        .transpose()
                        .map_err(Refusal::Overloaded)?;
                    State::Wasm(Box::new(WasmStream::new(w, ticket)?))
                }
            },
            elements: 0,
        })
    }
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
