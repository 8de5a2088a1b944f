//! Stream functions' stages, in process (docs/fastpath.md, "Stream functions"): Top-K insertion
//! network == heap == sort, bit for bit, u32 and f32 with NaNs; Space-Saving's guarantees
//! against exact counts; parse → filter → topk as one pipeline == separate steps; and the
//! deploy's validation.

mod common;
mod stream_common;
use common::*;
use nearfaas_fastpath::stream::ops::{
    topk_reference, Dtype, Filter, HeapTopK, Insertion, Parser, SpaceSaving,
};
use nearfaas_fastpath::stream::parse_chain;
use serde_json::{json, Value};
use std::collections::HashMap;
use stream_common::*;

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
