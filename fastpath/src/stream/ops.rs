//! The stream stages as plain data structures, independent of sockets: element order keys,
//! Top-K (a systolic insertion network and a binary min-heap), Space-Saving heavy hitters, the
//! range filter and the ASCII number parser. Each consumes elements one chunk at a time and
//! holds only its own state (K registers or counters, a few bytes of parser carry), never the
//! stream.
//!
//! Elements travel as `u32` bit patterns: a `u32` element is itself, an `f32` element its IEEE
//! bits (`f32::to_bits`). Ordering goes through [`Dtype::key`].
//!
//! **Order and NaN policy (f32).** Top-K orders f32 elements by a *total* order: every NaN sorts
//! below every number (below -inf; NaNs among themselves by their bit pattern as an unsigned
//! integer), and -0.0 sorts below +0.0. Two elements compare equal only when their bits are
//! equal, so every correct Top-K of a multiset gives the same bits whatever its algorithm, and
//! the insertion network, the heap and a sort agree bit for bit. The filter stage compares
//! numerically instead (`min <= x <= max` as f32): NaN never passes, -0.0 and +0.0 both pass
//! `min: 0`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// The element type of a stream function's input and Top-K output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    U32,
    F32,
}

impl Dtype {
    pub fn parse(s: &str) -> Option<Dtype> {
        match s {
            "u32" => Some(Dtype::U32),
            "f32" => Some(Dtype::F32),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dtype::U32 => "u32",
            Dtype::F32 => "f32",
        }
    }

    /// The element's order key plus one (0 is kept for an empty register): distinct bit
    /// patterns get distinct keys. u32: the value. f32: NaNs first (by bits), then the numbers
    /// in IEEE total order (-inf .. -0.0 < +0.0 .. +inf).
    #[inline(always)]
    pub fn key(self, bits: u32) -> u64 {
        match self {
            Dtype::U32 => bits as u64 + 1,
            Dtype::F32 => {
                if bits & 0x7fff_ffff > 0x7f80_0000 {
                    bits as u64 + 1 // NaN: below 2^32, so below every number
                } else {
                    let t = if bits >> 31 == 1 {
                        !bits
                    } else {
                        bits | 0x8000_0000
                    };
                    (1u64 << 32) + t as u64 + 1
                }
            }
        }
    }

    /// The bits of the element whose key is `key` (the inverse of [`Dtype::key`]).
    #[inline]
    pub fn unkey(self, key: u64) -> u32 {
        let k = key - 1;
        match self {
            Dtype::U32 => k as u32,
            Dtype::F32 => {
                if k < (1u64 << 32) {
                    k as u32
                } else {
                    let t = (k - (1u64 << 32)) as u32;
                    if t & 0x8000_0000 != 0 {
                        t & 0x7fff_ffff
                    } else {
                        !t
                    }
                }
            }
        }
    }
}

/// Top-K as the FPGA computes it: a systolic array of K registers, kept sorted descending.
/// Every element enters at register 0 and moves through all K cells; each cell keeps the larger
/// of its value and the passing one and passes the smaller on; what leaves cell K-1 is dropped.
/// In hardware the K cells work on K elements at once (one element per clock); here one element
/// walks the K cells (O(K) per element, branch-free compare-and-swap, no early exit, exactly the
/// network's data flow).
pub struct Insertion {
    dtype: Dtype,
    regs: Vec<u64>, // order keys + 1, 0 = empty; regs[0] is the largest
}

impl Insertion {
    pub fn new(dtype: Dtype, k: usize) -> Insertion {
        Insertion {
            dtype,
            regs: vec![0; k],
        }
    }

    #[inline]
    pub fn push_all(&mut self, elems: &[u32]) {
        let d = self.dtype;
        for &e in elems {
            let mut x = d.key(e);
            for r in self.regs.iter_mut() {
                let hi = (*r).max(x);
                x = (*r).min(x);
                *r = hi;
            }
        }
    }

    /// The K largest (fewer when fewer arrived), descending, as element bits.
    pub fn result(&self) -> Vec<u32> {
        self.regs
            .iter()
            .take_while(|&&r| r != 0)
            .map(|&r| self.dtype.unkey(r))
            .collect()
    }
}

/// Top-K with a binary min-heap of at most K keys (the software baseline): an element larger
/// than the heap's minimum replaces it (O(log K)); anything else is dropped after one compare.
pub struct HeapTopK {
    dtype: Dtype,
    k: usize,
    heap: BinaryHeap<Reverse<u64>>,
}

impl HeapTopK {
    pub fn new(dtype: Dtype, k: usize) -> HeapTopK {
        HeapTopK {
            dtype,
            k,
            heap: BinaryHeap::with_capacity(k),
        }
    }

    #[inline]
    pub fn push_all(&mut self, elems: &[u32]) {
        let d = self.dtype;
        for &e in elems {
            let x = d.key(e);
            if self.heap.len() < self.k {
                self.heap.push(Reverse(x));
            } else if let Some(mut top) = self.heap.peek_mut() {
                if x > top.0 {
                    *top = Reverse(x);
                }
            }
        }
    }

    pub fn result(&self) -> Vec<u32> {
        let mut keys: Vec<u64> = self.heap.iter().map(|r| r.0).collect();
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys.into_iter().map(|k| self.dtype.unkey(k)).collect()
    }
}

/// The reference Top-K: sort everything by the same order, keep the first K.
pub fn topk_reference(dtype: Dtype, elems: &[u32], k: usize) -> Vec<u32> {
    let mut keys: Vec<u64> = elems.iter().map(|&e| dtype.key(e)).collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    keys.truncate(k);
    keys.into_iter().map(|x| dtype.unkey(x)).collect()
}

/// A multiplicative hasher for u32 keys (the default SipHash costs more than the rest of a
/// Space-Saving update). Not DoS-resistant, but the table never holds more than K entries.
#[derive(Default)]
pub struct MulHasher(u64);

impl Hasher for MulHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(b as u32);
        }
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        let h = (self.0 ^ v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

type FastMap = HashMap<u32, u32, BuildHasherDefault<MulHasher>>;

/// Space-Saving heavy hitters (Metwally et al.) with K counters: a monitored value's counter is
/// incremented; an unmonitored value takes over the counter with the smallest count (its count
/// becomes that minimum + 1). Guarantees, for N elements: every value whose true count exceeds
/// N/K is monitored, and each estimate overcounts its value by at most N/K (by at most the
/// minimum counter). The minimum is found with an indexed binary min-heap (O(log K) an update).
pub struct SpaceSaving {
    k: usize,
    value: Vec<u32>,
    count: Vec<u64>,
    /// Heap of counter slots by count (minimum first) and each slot's place in it.
    heap: Vec<u32>,
    pos: Vec<u32>,
    index: FastMap,
}

impl SpaceSaving {
    pub fn new(k: usize) -> SpaceSaving {
        SpaceSaving {
            k,
            value: Vec::new(),
            count: Vec::new(),
            heap: Vec::new(),
            pos: Vec::new(),
            index: FastMap::default(),
        }
    }

    #[inline]
    pub fn push_all(&mut self, elems: &[u32]) {
        for &e in elems {
            self.push(e);
        }
    }

    #[inline]
    pub fn push(&mut self, v: u32) {
        if let Some(&slot) = self.index.get(&v) {
            self.count[slot as usize] += 1;
            self.sift_down(self.pos[slot as usize] as usize);
        } else if self.value.len() < self.k {
            let slot = self.value.len() as u32;
            self.value.push(v);
            self.count.push(1);
            self.pos.push(self.heap.len() as u32);
            self.heap.push(slot);
            self.index.insert(v, slot);
            self.sift_up(self.heap.len() - 1);
        } else {
            let slot = self.heap[0] as usize;
            self.index.remove(&self.value[slot]);
            self.value[slot] = v;
            self.count[slot] += 1;
            self.index.insert(v, slot as u32);
            self.sift_down(0);
        }
    }

    fn less(&self, a: usize, b: usize) -> bool {
        self.count[self.heap[a] as usize] < self.count[self.heap[b] as usize]
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a] as usize] = a as u32;
        self.pos[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if !self.less(i, p) {
                break;
            }
            self.swap(i, p);
            i = p;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.less(l, m) {
                m = l;
            }
            if r < n && self.less(r, m) {
                m = r;
            }
            if m == i {
                return;
            }
            self.swap(i, m);
            i = m;
        }
    }

    /// (value, estimated count) of every counter, by count descending then value ascending;
    /// counts past u32::MAX are reported as u32::MAX.
    pub fn result(&self) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u64)> = self
            .value
            .iter()
            .zip(&self.count)
            .map(|(&v, &c)| (v, c))
            .collect();
        out.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.into_iter()
            .map(|(v, c)| (v, c.min(u32::MAX as u64) as u32))
            .collect()
    }
}

/// Keep elements with `min <= x <= max` (u32: as integers; f32: as numbers, NaN never passes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Filter {
    U32 { min: u32, max: u32 },
    F32 { min: f32, max: f32 },
}

impl Filter {
    #[inline]
    pub fn keep(&self, e: u32) -> bool {
        match *self {
            Filter::U32 { min, max } => min <= e && e <= max,
            Filter::F32 { min, max } => {
                let x = f32::from_bits(e);
                min <= x && x <= max
            }
        }
    }

    /// Filter `elems` in place.
    #[inline]
    pub fn apply(&self, elems: &mut Vec<u32>) {
        elems.retain(|&e| self.keep(e));
    }
}

/// Why the parser refused its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// A byte that is neither a digit, whitespace nor a comma (at this offset of the stream).
    BadByte { offset: u64, byte: u8 },
    /// A number larger than u32::MAX (ending at this offset).
    TooLarge { offset: u64 },
}

/// ASCII decimal numbers (digits only: no sign, no point) separated by any run of whitespace
/// (space, \t, \n, \r, \x0b, \x0c) or commas, into u32 elements. A number may be split across
/// chunks: the parser carries the digits seen so far (this is its whole state).
#[derive(Default)]
pub struct Parser {
    acc: u64,
    in_num: bool,
    offset: u64,
}

impl Parser {
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<u32>) -> Result<(), ParseError> {
        let (mut acc, mut in_num) = (self.acc, self.in_num);
        for (i, &b) in bytes.iter().enumerate() {
            let d = b.wrapping_sub(b'0');
            if d < 10 {
                acc = acc * 10 + d as u64;
                if acc > u32::MAX as u64 {
                    return Err(ParseError::TooLarge {
                        offset: self.offset + i as u64,
                    });
                }
                in_num = true;
            } else if matches!(b, b' ' | b',' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c) {
                if in_num {
                    out.push(acc as u32);
                    acc = 0;
                    in_num = false;
                }
            } else {
                return Err(ParseError::BadByte {
                    offset: self.offset + i as u64,
                    byte: b,
                });
            }
        }
        self.acc = acc;
        self.in_num = in_num;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// The end of the stream: the number in progress, if any.
    pub fn finish(&mut self, out: &mut Vec<u32>) {
        if self.in_num {
            out.push(self.acc as u32);
            self.acc = 0;
            self.in_num = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_keys_round_trip_and_order() {
        let vals = [
            f32::NAN.to_bits(),
            (-f32::NAN).to_bits(),
            f32::NEG_INFINITY.to_bits(),
            (-1.5f32).to_bits(),
            (-0.0f32).to_bits(),
            0.0f32.to_bits(),
            1e-40f32.to_bits(),
            2.5f32.to_bits(),
            f32::INFINITY.to_bits(),
        ];
        for w in vals[1..].windows(2) {
            assert!(
                Dtype::F32.key(w[0]) < Dtype::F32.key(w[1]),
                "{:x} {:x}",
                w[0],
                w[1]
            );
        }
        for &v in &vals {
            assert_eq!(Dtype::F32.unkey(Dtype::F32.key(v)), v);
            assert!(Dtype::F32.key(v) > 0);
        }
        assert_eq!(Dtype::U32.unkey(Dtype::U32.key(u32::MAX)), u32::MAX);
    }

    #[test]
    fn parser_splits_and_errors() {
        let mut p = Parser::default();
        let mut out = Vec::new();
        p.feed(b"12, 3", &mut out).unwrap();
        p.feed(b"4\n\n5,,6", &mut out).unwrap();
        p.finish(&mut out);
        assert_eq!(out, [12, 34, 5, 6]);
        assert!(Parser::default().feed(b"1 -2", &mut out).is_err());
        assert!(Parser::default().feed(b"4294967296", &mut out).is_err());
        let mut out = Vec::new();
        Parser::default().feed(b"4294967295 ", &mut out).unwrap();
        assert_eq!(out, [u32::MAX]);
    }
}
