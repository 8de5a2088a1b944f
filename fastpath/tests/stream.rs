//! Stream functions (docs/fastpath.md, "Stream functions"): the stages against references
//! (Top-K insertion network == heap == sort, bit for bit, u32 and f32 with NaNs; Space-Saving's
//! guarantees against exact counts; parse → filter → topk as one pipeline == separate steps ==
//! separate hops), and the listener: protocol errors, the idle timeout, bounded memory on a
//! 64 MiB stream, the connection cap, and 10,000 connections opened and dropped.

mod common;
use common::*;
use nearfaas_fastpath::stream::ops::{
    topk_reference, Dtype, Filter, HeapTopK, Insertion, Parser, SpaceSaving,
};
use nearfaas_fastpath::stream::parse_chain;
use nearfaas_fastpath::wire::{decode_stream_reply_head, encode_stream_head, STREAM_UNTIL_EOF};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The stages, in process

/// Top-K of `elems` by the insertion network and by the heap, each fed in random chunk sizes.
fn both_topk(dtype: Dtype, elems: &[u32], k: usize, rng: &mut Rng) -> (Vec<u32>, Vec<u32>) {
    let mut ins = Insertion::new(dtype, k);
    let mut heap = HeapTopK::new(dtype, k);
    let mut at = 0;
    while at < elems.len() {
        let n = (1 + rng.next() as usize % 97).min(elems.len() - at);
        ins.push_all(&elems[at..at + n]);
        heap.push_all(&elems[at..at + n]);
        at += n;
    }
    (ins.result(), heap.result())
}

/// Input shapes: random, duplicate-heavy, sorted, reverse-sorted, all equal.
fn shapes(rng: &mut Rng, n: usize, gen: &mut dyn FnMut(&mut Rng) -> u32) -> Vec<Vec<u32>> {
    let random: Vec<u32> = (0..n).map(|_| gen(rng)).collect();
    let pool: Vec<u32> = (0..4).map(|_| gen(rng)).collect();
    let dups: Vec<u32> = (0..n).map(|_| pool[rng.next() as usize % 4]).collect();
    let mut sorted = random.clone();
    sorted.sort_by_key(|&b| Dtype::F32.key(b)); // some order; for u32 below too
    let mut usorted = random.clone();
    usorted.sort_unstable();
    let mut rev = usorted.clone();
    rev.reverse();
    let same = vec![gen(rng); n];
    vec![random, dups, sorted, usorted, rev, same]
}

#[test]
fn topk_insertion_equals_heap_equals_sort_u32() {
    let mut cases = 0;
    for seed in 1..=200u64 {
        let mut rng = Rng(seed * 0x9e37_79b9_7f4a_7c15 | 1);
        let n = [0, 1, 5, 15, 16, 17, 100, 1000][seed as usize % 8];
        let k = [1, 2, 16, 16, 64, 3][seed as usize % 6];
        let narrow = seed % 3 == 0; // small value range: many ties
        let mut gen = |r: &mut Rng| {
            if narrow {
                (r.next() % 10) as u32
            } else {
                r.next() as u32
            }
        };
        for elems in shapes(&mut rng, n, &mut gen) {
            let reference = topk_reference(Dtype::U32, &elems, k);
            let (ins, heap) = both_topk(Dtype::U32, &elems, k, &mut rng);
            assert_eq!(ins, reference, "insertion, seed {seed}, n {n}, k {k}");
            assert_eq!(heap, reference, "heap, seed {seed}, n {n}, k {k}");
            assert_eq!(reference.len(), n.min(k));
            assert!(reference.windows(2).all(|w| w[0] >= w[1]), "descending");
            cases += 1;
        }
    }
    assert_eq!(cases, 1200);
}

/// f32 bit patterns: random bits (NaNs of every payload, infinities, subnormals) mixed with the
/// special values, so ties between -0.0/+0.0 and between NaNs come up often.
fn f32_gen(r: &mut Rng) -> u32 {
    const SPECIAL: [f32; 9] = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::MIN_POSITIVE,
        f32::MAX,
    ];
    match r.next() % 4 {
        0 => SPECIAL[(r.next() % 9) as usize].to_bits(),
        1 => (-f32::NAN).to_bits() ^ (r.next() as u32 & 0x3f_ffff), // NaNs, sign set
        _ => r.next() as u32,
    }
}

#[test]
fn topk_insertion_equals_heap_equals_sort_f32_with_nan_policy() {
    for seed in 1..=200u64 {
        let mut rng = Rng(seed * 0x2545_f491_4f6c_dd1d | 1);
        let n = [0, 3, 16, 40, 500][seed as usize % 5];
        let k = [1, 4, 16, 32][seed as usize % 4];
        for elems in shapes(&mut rng, n, &mut f32_gen) {
            let reference = topk_reference(Dtype::F32, &elems, k);
            let (ins, heap) = both_topk(Dtype::F32, &elems, k, &mut rng);
            assert_eq!(ins, reference, "insertion, seed {seed}, n {n}, k {k}");
            assert_eq!(heap, reference, "heap, seed {seed}, n {n}, k {k}");
            // The policy: every number before every NaN; numbers descending as f32, -0 after +0.
            let first_nan = reference
                .iter()
                .position(|&b| f32::from_bits(b).is_nan())
                .unwrap_or(reference.len());
            assert!(reference[first_nan..]
                .iter()
                .all(|&b| f32::from_bits(b).is_nan()));
            let numbers = elems
                .iter()
                .filter(|&&b| !f32::from_bits(b).is_nan())
                .count();
            assert_eq!(
                first_nan,
                numbers.min(k),
                "NaNs only when the numbers ran out"
            );
            for w in reference[..first_nan].windows(2) {
                let (a, b) = (f32::from_bits(w[0]), f32::from_bits(w[1]));
                assert!(a > b || (a == b && (w[0] == w[1] || w[1] == (-0.0f32).to_bits())));
            }
        }
    }
}

#[test]
fn topk_examples() {
    let k = |v: &[u32], k| topk_reference(Dtype::U32, v, k);
    assert_eq!(k(&[5, 1, 5, 3, 9, 5], 3), [9, 5, 5]); // duplicates kept
    assert_eq!(k(&[2, 7], 16), [7, 2]); // n < K: all, descending
    let f = |x: f32| x.to_bits();
    let out = topk_reference(
        Dtype::F32,
        &[f(f32::NAN), f(-0.0), f(0.0), f(-1.0), f(f32::NEG_INFINITY)],
        5,
    );
    assert_eq!(
        out,
        [f(0.0), f(-0.0), f(-1.0), f(f32::NEG_INFINITY), f(f32::NAN)]
    );
}

/// A skewed (Zipf-like, s = 1) stream over `distinct` values.
fn zipf(rng: &mut Rng, n: usize, distinct: u32) -> Vec<u32> {
    let h: f64 = (1..=distinct).map(|i| 1.0 / i as f64).sum();
    let cdf: Vec<f64> = (1..=distinct)
        .scan(0.0, |acc, i| {
            *acc += 1.0 / (i as f64 * h);
            Some(*acc)
        })
        .collect();
    (0..n)
        .map(|_| {
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let i = cdf.partition_point(|&c| c < u) as u32;
            i.min(distinct - 1).wrapping_mul(2_654_435_761) // spread the values
        })
        .collect()
}

#[test]
fn frequent_keeps_space_saving_guarantees_on_skewed_data() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed * 0xd1b5_4a32_d192_ed03 | 1);
        let n = 20_000 + (seed as usize * 3_001);
        let k = [8usize, 16, 50, 100][seed as usize % 4];
        let mut data = zipf(&mut rng, n, 5_000);
        if seed % 5 == 0 {
            data.sort_unstable(); // adversarial order for the eviction
        }
        let mut ss = SpaceSaving::new(k);
        for c in data.chunks(777) {
            ss.push_all(c);
        }
        let got = ss.result();
        let mut exact: HashMap<u32, u64> = HashMap::new();
        for &v in &data {
            *exact.entry(v).or_default() += 1;
        }
        let bound = n as f64 / k as f64;
        assert_eq!(got.len(), k.min(exact.len()));
        assert_eq!(got.iter().map(|&(_, c)| c as u64).sum::<u64>(), n as u64);
        let reported: HashMap<u32, u32> = got.iter().copied().collect();
        for (&v, &c) in &exact {
            if c as f64 > bound {
                assert!(
                    reported.contains_key(&v),
                    "seed {seed}: heavy value {v} ({c} > N/K) missing"
                );
            }
        }
        for &(v, est) in &got {
            let t = exact.get(&v).copied().unwrap_or(0);
            assert!(
                est as u64 >= t,
                "seed {seed}: estimate {est} under true {t}"
            );
            assert!(
                (est as u64 - t) as f64 <= bound,
                "seed {seed}: overcount past N/K"
            );
        }
        assert!(got
            .windows(2)
            .all(|w| w[0].1 > w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
    }
}

/// Random text of numbers with random separators; (the text, the numbers).
fn text_numbers(rng: &mut Rng, n: usize) -> (Vec<u8>, Vec<u32>) {
    let seps: [&[u8]; 6] = [b" ", b",", b"\n", b", ", b"\t\t", b" ,\r\n"];
    let mut text = Vec::new();
    let mut nums = Vec::new();
    for i in 0..n {
        let v = match rng.next() % 3 {
            0 => (rng.next() % 1000) as u32,
            1 => rng.next() as u32,
            _ => (rng.next() % 200) as u32,
        };
        if i > 0 || rng.next() % 2 == 0 {
            text.extend_from_slice(seps[(rng.next() % 6) as usize]);
        }
        if rng.next() % 7 == 0 {
            text.extend_from_slice(b"00"); // leading zeros
        }
        text.extend_from_slice(v.to_string().as_bytes());
        nums.push(v);
    }
    if rng.next() % 2 == 0 {
        text.push(b'\n');
    }
    (text, nums)
}

fn chain_json(min: u32, max: u32, k: usize, variant: &str) -> Value {
    json!({"chain": [{"fn": "parse"}, {"fn": "filter", "min": min, "max": max},
                     {"fn": "topk", "k": k, "dtype": "u32", "variant": variant}]})
}

/// The reply a pipeline of `chain` gives for `payload` fed in random pieces.
fn run_pipeline(chain: &Value, payload: &[u8], rng: &mut Rng) -> Vec<u8> {
    let c = parse_chain(Some(chain)).unwrap();
    let mut p = c.pipeline();
    let mut scratch = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let n = (1 + rng.next() as usize % 300).min(payload.len() - at);
        p.feed(&payload[at..at + n], &mut scratch).unwrap();
        at += n;
    }
    p.finish(&mut scratch).unwrap()
}

fn reply_bytes(status: u8, elems: &[u32]) -> Vec<u8> {
    let mut out = vec![status];
    out.extend_from_slice(&(elems.len() as u32).to_le_bytes());
    for e in elems {
        out.extend_from_slice(&e.to_le_bytes());
    }
    out
}

#[test]
fn chain_parse_filter_topk_equals_separate_steps() {
    for seed in 1..=100u64 {
        let mut rng = Rng(seed * 0x9e37_79b9_7f4a_7c15 | 1);
        let (text, nums) = text_numbers(&mut rng, [0, 1, 10, 500, 3000][seed as usize % 5]);
        let (min, max, k) = (100, 900, [1, 16, 40][seed as usize % 3]);
        // Separate steps: parse everything, filter, then Top-K by sorting.
        let mut parsed = Vec::new();
        let mut p = Parser::default();
        p.feed(&text, &mut parsed).unwrap();
        p.finish(&mut parsed);
        assert_eq!(parsed, nums);
        let mut kept = parsed.clone();
        Filter::U32 { min, max }.apply(&mut kept);
        let want = reply_bytes(OK, &topk_reference(Dtype::U32, &kept, k));
        for variant in ["insertion", "heap"] {
            let got = run_pipeline(&chain_json(min, max, k, variant), &text, &mut rng);
            assert_eq!(got, want, "seed {seed} {variant}");
        }
    }
}

#[test]
fn deploy_validation_names_the_field() {
    let bad = [
        (json!(null), "stream"),
        (json!({"chain": []}), "stream.chain"),
        (json!({"chain": [{"fn": "topk"}]}), "stream.chain[0].k"),
        (
            json!({"chain": [{"fn": "topk", "k": 0}]}),
            "stream.chain[0].k",
        ),
        (
            json!({"chain": [{"fn": "topk", "k": 5000}]}),
            "stream.chain[0].k",
        ),
        (
            json!({"chain": [{"fn": "topk", "k": 4, "dtype": "i8"}]}),
            "stream.chain[0].dtype",
        ),
        (
            json!({"chain": [{"fn": "topk", "k": 4, "variant": "bubble"}]}),
            "stream.chain[0].variant",
        ),
        (
            json!({"chain": [{"fn": "topk", "k": 4, "kk": 1}]}),
            "stream.chain[0].kk",
        ),
        (
            json!({"chain": [{"fn": "filter", "min": 1}]}),
            "stream.chain[0].fn",
        ),
        (
            json!({"chain": [{"fn": "topk", "k": 4}, {"fn": "filter", "min": 1}]}),
            "stream.chain[0].fn",
        ),
        (
            json!({"chain": [{"fn": "filter", "min": 1}, {"fn": "parse"}, {"fn": "topk", "k": 1}]}),
            "stream.chain[1].fn",
        ),
        (
            json!({"chain": [{"fn": "parse"}, {"fn": "topk", "k": 4, "dtype": "f32"}]}),
            "stream.chain[1].dtype",
        ),
        (
            json!({"chain": [{"fn": "frequent", "k": 4, "dtype": "f32"}]}),
            "stream.chain[0].dtype",
        ),
        (
            json!({"chain": [{"fn": "filter", "min": -1}, {"fn": "topk", "k": 4}]}),
            "stream.chain[0].min",
        ),
        (
            json!({"chain": [{"fn": "filter", "min": 5, "max": 4}, {"fn": "topk", "k": 4}]}),
            "stream.chain[0].max",
        ),
        (
            json!({"chain": [{"fn": "filter"}, {"fn": "topk", "k": 4}]}),
            "stream.chain[0]",
        ),
        (json!({"chain": [{"fn": "sort"}]}), "stream.chain[0].fn"),
        (
            json!({"chain": [{"fn": "wasm", "path": "/x.wasm"}]}),
            "stream.chain[0].fn",
        ),
        (json!({"wasm": "/x.wasm"}), "stream.wasm"),
        (json!({"chain": [{"k": 1}]}), "stream.chain[0].fn"),
    ];
    for (v, field) in bad {
        let e = parse_chain(Some(&v)).expect_err(&v.to_string());
        assert!(e.starts_with(field), "{v}: {e:?} should name {field}");
    }
    // A wasm stage needs the executor's engine (tests/stream_wasm.rs deploys them).
    let e = parse_chain(Some(&json!({"chain": [{"fn": "wasm"}]}))).unwrap_err();
    assert!(e.contains("compiled by the executor"), "{e}");
    // f32 filter bounds are numbers; every stage agrees on the dtype.
    let c = parse_chain(Some(&json!({"chain": [{"fn": "filter", "min": -0.5},
                                                {"fn": "topk", "k": 3, "dtype": "f32"}]})))
    .unwrap();
    assert_eq!(c.dtype, Dtype::F32);
    assert_eq!(c.elem_size(), 4);
}

// ---------------------------------------------------------------------------------------------
// Over the network

fn start(extra: &[&str]) -> Fp {
    let mut args = vec!["--workers", "1", "--stream", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let fp = Fp::start(&args);
    assert!(fp.ready["stream_addr"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    assert_eq!(
        fp.ready["stream"].as_u64().unwrap(),
        fp.port("stream") as u64
    );
    fp
}

fn deploy_stream(fp: &Fp, id: u32, stream: Value) -> Value {
    let r = fp.ctl(json!({"op": "deploy", "id": id, "kind": "stream", "stream": stream}));
    assert_eq!(r["ok"], true, "{r}");
    r
}

fn connect(fp: &Fp) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", fp.port("stream"))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Read a reply to EOF: (status, the bytes after the head); checks count against the length.
fn read_reply(s: &mut TcpStream, item: usize) -> (u8, Vec<u8>) {
    let mut all = Vec::new();
    s.read_to_end(&mut all).expect("reply");
    let (st, count) = decode_stream_reply_head(&all).unwrap_or_else(|| panic!("reply {all:?}"));
    assert_eq!(all.len(), 5 + count as usize * item, "reply length");
    (st, all[5..].to_vec())
}

/// One request: header (payload_len = `len`, or the payload's length), the payload in pieces
/// of `piece` bytes, then half-close when `close`.
fn call(fp: &Fp, id: u32, payload: &[u8], len: Option<u64>, close: bool) -> (u8, Vec<u8>) {
    let mut s = connect(fp);
    s.write_all(&encode_stream_head(id, len.unwrap_or(payload.len() as u64)))
        .unwrap();
    let _ = s.write_all(payload); // the reply may come (and the server stop reading) first
    if close {
        let _ = s.shutdown(Shutdown::Write);
    }
    read_reply(&mut s, 4)
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn le(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn stream_requests_and_protocol_errors() {
    let fp = start(&["--stream-idle-ms", "400"]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 4, "dtype": "u32"}]}),
    );
    deploy_stream(
        &fp,
        2,
        json!({"chain": [{"fn": "topk", "k": 3, "dtype": "f32", "variant": "heap"}]}),
    );
    deploy_stream(&fp, 3, json!({"chain": [{"fn": "frequent", "k": 3}]}));
    let r = deploy_stream(&fp, 4, chain_json(10, 99, 2, "insertion"));
    assert_eq!(r["stream_addr"], fp.ready["stream_addr"]);
    let data = le(&[5, 1, 9, 9, 0, 7, 3]);
    // Explicit length, and until EOF.
    let want = le(&[9, 9, 7, 5]);
    assert_eq!(call(&fp, 1, &data, None, false), (OK, want.clone()));
    assert_eq!(
        call(&fp, 1, &data, Some(STREAM_UNTIL_EOF), true),
        (OK, want)
    );
    assert_eq!(call(&fp, 1, b"", None, false), (OK, vec![]));
    let f: Vec<u32> = [1.5f32, f32::NAN, -2.0, 8.25]
        .iter()
        .map(|x| x.to_bits())
        .collect();
    assert_eq!(
        call(&fp, 2, &le(&f), None, false),
        (OK, le(&[f[3], f[0], f[2]]))
    );
    // frequent: (value, count) pairs.
    let (st, body) = {
        let mut s = connect(&fp);
        let d = le(&[4, 1, 4, 6, 4, 6]);
        s.write_all(&encode_stream_head(3, d.len() as u64)).unwrap();
        s.write_all(&d).unwrap();
        read_reply(&mut s, 8)
    };
    assert_eq!((st, u32s(&body)), (OK, vec![4, 3, 6, 2, 1, 1]));
    assert_eq!(
        call(&fp, 4, b"5 50,500\n60 61 7", None, false),
        (OK, le(&[61, 60]))
    );
    // Errors: unknown id, a length not a multiple of 4, truncated, a parse error.
    assert_eq!(call(&fp, 99, &data, None, false), (UNKNOWN, vec![]));
    assert_eq!(call(&fp, 1, &data[..6], None, false), (BAD_REQUEST, vec![]));
    assert_eq!(
        call(&fp, 1, &data[..6], Some(STREAM_UNTIL_EOF), true),
        (BAD_REQUEST, vec![])
    );
    assert_eq!(
        call(&fp, 1, &data[..8], Some(40), true),
        (BAD_REQUEST, vec![])
    );
    assert_eq!(call(&fp, 4, b"1 2 x3", None, false), (BAD_REQUEST, vec![]));
    assert_eq!(
        call(&fp, 4, b"99999999999", None, false),
        (BAD_REQUEST, vec![])
    );
    // A header cut short, then EOF.
    let mut s = connect(&fp);
    s.write_all(&[1, 0, 0]).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s, 4), (BAD_REQUEST, vec![]));
    // A client that never half-closes (until-EOF), one that stops short of payload_len, and
    // one that sends nothing: TIMEOUT after the idle time, then closed.
    for (head, body) in [
        (Some(STREAM_UNTIL_EOF), &data[..]),
        (Some(100), &data[..]),
        (None, &[][..]),
    ] {
        let mut s = connect(&fp);
        let t = Instant::now();
        if let Some(len) = head {
            s.write_all(&encode_stream_head(1, len)).unwrap();
            s.write_all(body).unwrap();
        }
        assert_eq!(read_reply(&mut s, 4), (TIMEOUT, vec![]));
        let dt = t.elapsed();
        assert!(
            dt >= Duration::from_millis(350) && dt < Duration::from_secs(3),
            "{dt:?}"
        );
    }
    // An unknown id answered while the client is still sending a long payload: the reply
    // arrives (FIN, not a reset) and the connection ends.
    let mut s = connect(&fp);
    s.write_all(&encode_stream_head(77, 1 << 20)).unwrap();
    let _ = s.write_all(&vec![0u8; 256 << 10]);
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_reply(&mut s, 4), (UNKNOWN, vec![]));
    // Counters, and remove.
    let st = fp.stats();
    let one = st["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == 1)
        .unwrap()
        .clone();
    assert_eq!(one["ok"], 3, "{one}");
    assert_eq!(one["bad_request"], 3, "{one}");
    assert_eq!(one["timeouts"], 2, "{one}");
    assert_eq!(st["global"]["stream_timeouts"], 3, "{st}");
    assert_eq!(st["global"]["stream_unknown"], 2, "{st}");
    let r = fp.ctl(json!({"op": "remove", "id": 1}));
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(call(&fp, 1, &data, None, false), (UNKNOWN, vec![]));
    // Deploy errors name the field (a wasm stage without its module names `path`).
    for (req, field) in [
        (json!({"op": "deploy", "id": 5, "kind": "stream"}), "stream"),
        (
            json!({"op": "deploy", "id": 5, "kind": "stream", "path": "/x.wasm",
                "stream": {"chain": [{"fn": "topk", "k": 1}]}}),
            "path",
        ),
        (
            json!({"op": "deploy", "id": 5, "kind": "stream",
                "stream": {"chain": [{"fn": "wasm"}]}}),
            "stream.chain[0].path",
        ),
        (
            json!({"op": "deploy", "id": 5, "kind": "native", "native": "web",
                "stream": {"chain": []}}),
            "stream",
        ),
    ] {
        let r = fp.ctl(req.clone());
        assert_eq!(r["ok"], false, "{req}");
        assert!(r["error"].as_str().unwrap().starts_with(field), "{r}");
    }
}

#[test]
fn chain_equals_separate_hops_over_the_network() {
    let fp = start(&[]);
    deploy_stream(&fp, 10, chain_json(100, 5000, 16, "insertion"));
    deploy_stream(
        &fp,
        11,
        json!({"chain": [{"fn": "topk", "k": 16, "variant": "heap"}]}),
    );
    deploy_stream(
        &fp,
        12,
        json!({"chain": [{"fn": "filter", "min": 100, "max": 5000},
                                            {"fn": "topk", "k": 16}]}),
    );
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for n in [0, 3, 16, 2000, 40_000] {
        let (text, nums) = text_numbers(&mut rng, n);
        let mut kept = nums.clone();
        Filter::U32 {
            min: 100,
            max: 5000,
        }
        .apply(&mut kept);
        let want = le(&topk_reference(Dtype::U32, &kept, 16));
        // One pipeline: text in, Top-K out.
        assert_eq!(
            call(&fp, 10, &text, None, false),
            (OK, want.clone()),
            "n {n}"
        );
        // Separate hops: parsed and filtered here, Top-K there; and filter + Top-K there.
        assert_eq!(call(&fp, 11, &le(&kept), None, false), (OK, want.clone()));
        assert_eq!(
            call(&fp, 12, &le(&nums), Some(STREAM_UNTIL_EOF), true),
            (OK, want)
        );
    }
}

#[test]
fn a_64_mib_stream_in_1_kib_writes_keeps_memory_bounded() {
    let fp = start(&[]);
    deploy_stream(
        &fp,
        1,
        json!({"chain": [{"fn": "topk", "k": 16, "dtype": "u32"}]}),
    );
    let pid = fp.child.id();
    // Warm the path (first allocations of the loop's buffers) before the baseline.
    assert_eq!(call(&fp, 1, &le(&[1, 2, 3]), None, false).0, OK);
    let before = rss_kib(pid);
    let total: u64 = 64 << 20;
    let mut s = connect(&fp);
    s.write_all(&encode_stream_head(1, total)).unwrap();
    let mut rng = Rng(42);
    let mut piece = [0u8; 1024];
    let mut max_rss = before;
    let mut biggest = 0u32;
    for i in 0..(total / 1024) {
        for c in piece.chunks_exact_mut(4) {
            let v = (rng.next() >> 40) as u32;
            biggest = biggest.max(v);
            c.copy_from_slice(&v.to_le_bytes());
        }
        s.write_all(&piece).unwrap();
        if i % 4096 == 0 {
            max_rss = max_rss.max(rss_kib(pid));
        }
    }
    let (st, body) = read_reply(&mut s, 4);
    max_rss = max_rss.max(rss_kib(pid));
    assert_eq!(st, OK);
    let top = u32s(&body);
    assert_eq!((top.len(), top[0]), (16, biggest));
    let grew = max_rss.saturating_sub(before);
    eprintln!("64 MiB stream: RSS {before} KiB -> max {max_rss} KiB (+{grew} KiB)");
    assert!(grew < 4 * 1024, "RSS grew by {grew} KiB streaming 64 MiB");
    let f = &fp.stats()["streams"][0];
    assert_eq!(f["bytes"], total + 12); // and the warm-up's 3 elements
    assert_eq!(f["elements"], total / 4 + 3);
}

#[test]
fn ten_thousand_connections_opened_and_dropped_leave_it_serving() {
    let fp = start(&["--stream-max-connections", "64"]);
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 2}]}));
    let addr = ("127.0.0.1", fp.port("stream"));
    for i in 0..10_000u32 {
        let mut s = TcpStream::connect(addr).unwrap();
        match i % 4 {
            0 => {} // connect, close
            1 => {
                let _ = s.write_all(&[1, 0]);
            } // half a header
            2 => {
                // header, part of the payload
                let _ = s.write_all(&encode_stream_head(1, 1 << 30));
                let _ = s.write_all(&[7u8; 100]);
            }
            _ => {
                // reset instead of FIN
                let _ = s.write_all(&encode_stream_head(1, 400));
                let l = libc::linger {
                    l_onoff: 1,
                    l_linger: 0,
                };
                unsafe {
                    use std::os::fd::AsRawFd;
                    libc::setsockopt(
                        s.as_raw_fd(),
                        libc::SOL_SOCKET,
                        libc::SO_LINGER,
                        (&l as *const libc::linger).cast(),
                        std::mem::size_of::<libc::linger>() as u32,
                    );
                }
            }
        }
    }
    // A burst of connections held open past the cap at once, then dropped.
    let held: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    drop(held);
    let t = Instant::now();
    while fp.stats()["global"]["stream_conns"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connections not released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let g = fp.stats()["global"].clone();
    // Every connection was accepted, or refused at the cap (64) when the loop was behind.
    let (acc, refused) = (
        g["stream_accepted"].as_u64().unwrap(),
        g["stream_refused"].as_u64().unwrap(),
    );
    assert_eq!(acc + refused, 10_200, "{g}");
    assert!(refused >= 100 && acc >= 9_000, "{g}");
    assert_eq!(
        call(&fp, 1, &le(&[3, 8, 1]), None, false),
        (OK, le(&[8, 3]))
    );
    assert_eq!(call(&fp, 1, &le(&[5]), None, false), (OK, le(&[5])));
}

#[test]
fn connections_over_the_stream_cap_are_closed_at_accept() {
    let fp = start(&["--stream-max-connections", "4"]);
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 1}]}));
    let held: Vec<TcpStream> = (0..4).map(|_| connect(&fp)).collect();
    let t = Instant::now();
    while fp.stats()["global"]["stream_conns"] != 4 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    // Over the cap: OVERLOADED (best effort) and closed at once.
    let mut extra = connect(&fp);
    let mut b = Vec::new();
    let r = extra.read_to_end(&mut b);
    assert!(r.is_ok() || b.is_empty(), "{r:?}");
    assert!(b.is_empty() || b == [OVERLOADED, 0, 0, 0, 0], "{b:?}");
    assert_eq!(fp.stats()["global"]["stream_refused"], 1);
    drop(held);
    let t = Instant::now();
    while fp.stats()["global"]["stream_conns"] != 0 {
        assert!(t.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(call(&fp, 1, &le(&[4, 6]), None, false), (OK, le(&[6])));
}

#[test]
fn one_id_names_one_function() {
    let fp = start(&[]);
    fp.deploy_native(7, "web", json!({}));
    let r = deploy_stream(&fp, 7, json!({"chain": [{"fn": "topk", "k": 1}]}));
    assert_eq!(r["swapped"], true, "{r}");
    assert_eq!(fp.client().call(7, b"x").0, UNKNOWN); // the lambda is gone
    assert_eq!(call(&fp, 7, &le(&[2, 9]), None, false), (OK, le(&[9])));
    let r = fp.deploy_native(7, "web", json!({}));
    assert_eq!(r["swapped"], true, "{r}");
    assert_eq!(call(&fp, 7, &le(&[2, 9]), None, false), (UNKNOWN, vec![]));
    assert_eq!(fp.client().call(7, b"x").0, OK);
}

#[test]
fn a_costly_stream_does_not_hold_up_the_others() {
    let fp = start(&[]);
    // K = 4096 insertion: 4096 steps an element; a 64 KiB read alone would be ~70M steps.
    deploy_stream(&fp, 1, json!({"chain": [{"fn": "topk", "k": 4096}]}));
    deploy_stream(&fp, 2, json!({"chain": [{"fn": "topk", "k": 4}]}));
    let heavy = connect(&fp);
    let mut w = heavy.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&encode_stream_head(1, STREAM_UNTIL_EOF));
        let piece = vec![0x5au8; 64 << 10];
        while w.write_all(&piece).is_ok() {}
    });
    std::thread::sleep(Duration::from_millis(200)); // the heavy stream is being consumed
    let mut lat = Vec::new();
    for i in 0..20u32 {
        let t = Instant::now();
        assert_eq!(
            call(&fp, 2, &le(&[i, 7]), None, false),
            (OK, le(&[i.max(7), i.min(7)]))
        );
        lat.push(t.elapsed());
    }
    lat.sort();
    eprintln!(
        "beside a K=4096 stream: p50 {:?}, max {:?}",
        lat[10], lat[19]
    );
    assert!(lat[10] < Duration::from_millis(50), "p50 {:?}", lat[10]);
    assert!(lat[19] < Duration::from_millis(500), "max {:?}", lat[19]);
    let _ = heavy.shutdown(Shutdown::Both);
    writer.join().unwrap();
}
