//! Parsing and validating a stream chain's stages (the deploy's `stream` object) into a
//! [`Chain`], with errors that name the field.

use serde_json::{Map, Value};

use super::ops::{Dtype, Filter};
use super::spec::{Chain, Compile, Reduce, Variant, MAX_K, MAX_STAGES};
use super::wasm::{WasmStage, WasmStream, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS};

const STAGE_FNS: &str = "parse, filter, topk, frequent or wasm";

/// Validate the deploy's `stream` object (chains of native stages only: a `wasm` stage needs
/// [`parse_chain_with`] and the executor's engine).
pub fn parse_chain(v: Option<&Value>) -> Result<Chain, String> {
    parse_chain_with(v, None)
}

/// Validate the deploy's `stream` object; `compile` compiles a `wasm` stage's module.
pub fn parse_chain_with(v: Option<&Value>, compile: Option<Compile>) -> Result<Chain, String> {
    let m = stream_object(v)?;
    let objs = chain_stages(m)?;
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
            "parse" => parse_stage(&at, i, o)?,
            "filter" => {
                only_fields(&at, o, &["fn", "min", "max", "dtype"])?;
                filters.push(filter(&at, o, dtype)?);
            }
            "topk" | "frequent" | "wasm" => {
                if i != last {
                    return Err(format!(
                        "{at}.fn: {f} must be the last stage (its state is the reply)"
                    ));
                }
                reduce = Some(match *f {
                    "topk" => topk_stage(&at, o)?,
                    "frequent" => frequent_stage(&at, o, dtype)?,
                    _ => wasm_reduce(&at, o, compile)?,
                });
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

/// The `stream` object itself, with no field but `chain`.
fn stream_object(v: Option<&Value>) -> Result<&Map<String, Value>, String> {
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
    Ok(m)
}

/// `stream.chain`: 1 to `MAX_STAGES` stage objects.
fn chain_stages(m: &Map<String, Value>) -> Result<Vec<&Map<String, Value>>, String> {
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
    Ok(objs)
}

/// A `parse` stage (stage `i`): first, with no field but `fn`.
fn parse_stage(at: &str, i: usize, o: &Map<String, Value>) -> Result<(), String> {
    if i != 0 {
        return Err(format!(
            "{at}.fn: parse must be the first stage (it turns the text payload into u32 elements)"
        ));
    }
    only_fields(at, o, &["fn"])
}

/// A `topk` stage.
fn topk_stage(at: &str, o: &Map<String, Value>) -> Result<Reduce, String> {
    let k = get_k(at, o)?;
    only_fields(at, o, &["fn", "k", "dtype", "variant"])?;
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
    Ok(Reduce::TopK { k, variant })
}

/// A `frequent` stage (u32 elements only).
fn frequent_stage(at: &str, o: &Map<String, Value>, dtype: Dtype) -> Result<Reduce, String> {
    let k = get_k(at, o)?;
    only_fields(at, o, &["fn", "k", "dtype"])?;
    if dtype != Dtype::U32 {
        return Err(format!(
            "{at}.dtype: frequent counts u32 values only; the chain's elements are {}",
            dtype.name()
        ));
    }
    Ok(Reduce::Frequent { k })
}

/// A `wasm` stage as the chain's reducer.
fn wasm_reduce(
    at: &str,
    o: &Map<String, Value>,
    compile: Option<Compile>,
) -> Result<Reduce, String> {
    only_fields(at, o, &["fn", "path", "k", "dtype", "fuel", "timeout_ms"])?;
    Ok(Reduce::Wasm(wasm_stage(at, o, compile)?))
}

fn stage_fn(i: usize, o: &Map<String, Value>) -> Result<&str, String> {
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
    WasmStream::new(&stage, None).map_err(|e| {
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
