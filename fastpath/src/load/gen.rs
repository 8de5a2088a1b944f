//! The generator's state: the socket, the request being built, the outstanding requests (slots
//! in tag mode, per-ID FIFOs in fifo mode), and the probe that finds where replies echo the tag.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use super::stats::Stats;
use crate::wire::{decode_id, ID_LEN, REPLY_HEAD};

const PROBE_TAG: u64 = 0x5a17_c0de_9e3b_0001;
/// Bytes of the sequence number written at the start of the payload (tag mode).
pub const TAG_LEN: usize = 8;
/// The receive buffer: any datagram, with room to spare.
const RBUF: usize = 65_536 + 64;

pub struct Slot {
    seq: u64,
    sent: Instant,
    busy: bool,
    measured: bool,
}

pub struct Gen {
    pub sock: UdpSocket,
    ids: Vec<crate::wire::LambdaId>,
    offsets: Vec<Option<usize>>, // per id index: where the tag sits in the reply payload (tag mode)
    pub tag: bool,
    buf: Vec<u8>,      // the request being built: id + payload
    pub rbuf: Vec<u8>, // receive buffer
    rr: usize,         // round-robin position over ids
    k: usize,
    slots: Vec<Slot>,                     // tag mode
    fifo: Vec<VecDeque<(Instant, bool)>>, // fifo mode: per id index, outstanding send times (measured?)
    pub fifo_total: usize,
    timeout: Duration,
}

impl Gen {
    /// `k` outstanding requests at most; `offsets` from [`probe`] (tag mode).
    pub fn new(
        sock: UdpSocket,
        ids: &[crate::wire::LambdaId],
        payload: &[u8],
        offsets: Vec<Option<usize>>,
        tag: bool,
        k: usize,
        timeout: Duration,
    ) -> Gen {
        let mut buf = Vec::with_capacity(ID_LEN + payload.len());
        buf.extend_from_slice(&[0; ID_LEN]);
        buf.extend_from_slice(payload);
        Gen {
            sock,
            ids: ids.to_vec(),
            offsets,
            tag,
            buf,
            rbuf: vec![0u8; RBUF],
            rr: 0,
            k,
            // slot s carries sequence numbers s, s+K, s+2K, ... (seq % K == s); the first send adds K
            slots: (0..k)
                .map(|s| Slot {
                    seq: s as u64,
                    sent: Instant::now(),
                    busy: false,
                    measured: false,
                })
                .collect(),
            fifo: (0..ids.len()).map(|_| VecDeque::with_capacity(k)).collect(),
            fifo_total: 0,
            timeout,
        }
    }

    /// Bytes of the payload each request carries.
    pub fn payload_len(&self) -> usize {
        self.buf.len() - ID_LEN
    }

    fn id_index(&self, id: crate::wire::LambdaId) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }

    #[inline]
    fn send_raw(&mut self, id_index: usize, seq: Option<u64>) -> bool {
        let id = self.ids[id_index];
        self.buf[0..ID_LEN].copy_from_slice(&id.to_be_bytes());
        if let Some(s) = seq {
            self.buf[ID_LEN..ID_LEN + TAG_LEN].copy_from_slice(&s.to_le_bytes());
        }
        loop {
            match self.sock.send(&self.buf) {
                Ok(_) => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // ECONNREFUSED (an ICMP port unreachable from an earlier datagram) or a full buffer
                Err(_) => return false,
            }
        }
    }

    /// Sends the next request (round robin over the IDs) in slot `s` (tag mode) or appends it to
    /// the FIFO of its ID.
    #[inline]
    pub fn send_next(&mut self, s: usize, measured: bool, stats: &mut Stats) {
        let idx = self.rr % self.ids.len();
        self.rr = self.rr.wrapping_add(1);
        if self.tag {
            let seq = self.slots[s].seq + self.k as u64;
            let now = Instant::now();
            self.slots[s] = Slot {
                seq,
                sent: now,
                busy: true,
                measured,
            };
            self.send_raw(idx, Some(seq));
        } else {
            let now = Instant::now();
            self.fifo[idx].push_back((now, measured));
            self.fifo_total += 1;
            self.send_raw(idx, None);
        }
        stats.sent += 1;
    }

    /// Handles one received datagram; returns the slot freed (tag mode: its index; fifo: 0), if any.
    #[inline]
    pub fn on_reply(
        &mut self,
        n: usize,
        now: Instant,
        stats: &mut Stats,
        recording: bool,
    ) -> Option<usize> {
        let head = if n < REPLY_HEAD {
            None
        } else {
            decode_id(&self.rbuf)
        };
        let Some(idx) = head.and_then(|id| self.id_index(id)) else {
            stats.malformed += 1;
            return None;
        };
        let status = self.rbuf[ID_LEN];
        if !self.tag {
            return self.on_fifo_reply(idx, status, now, stats, recording);
        }
        let seq = match self.offsets[idx] {
            Some(off) if n >= REPLY_HEAD + off + TAG_LEN => {
                let p = REPLY_HEAD + off;
                u64::from_le_bytes(self.rbuf[p..p + TAG_LEN].try_into().unwrap())
            }
            _ => {
                // a reply without the echo (an error status): cannot be matched; its request
                // will time out and be resent.
                if recording {
                    stats.statuses[status as usize] += 1;
                }
                return None;
            }
        };
        let s = (seq % self.k as u64) as usize;
        let slot = &mut self.slots[s];
        if !slot.busy || slot.seq != seq {
            stats.stale += 1;
            return None;
        }
        slot.busy = false;
        if slot.measured && recording {
            stats.record(idx, status, now.duration_since(slot.sent).as_nanos() as u64);
        }
        Some(s)
    }

    fn on_fifo_reply(
        &mut self,
        idx: usize,
        status: u8,
        now: Instant,
        stats: &mut Stats,
        recording: bool,
    ) -> Option<usize> {
        match self.fifo[idx].pop_front() {
            Some((sent, measured)) => {
                self.fifo_total -= 1;
                if measured && recording {
                    stats.record(idx, status, now.duration_since(sent).as_nanos() as u64);
                }
                Some(0)
            }
            None => {
                stats.stale += 1;
                None
            }
        }
    }

    /// Requests older than the timeout: counted (when measured) and forgotten; the slots freed
    /// are appended to `freed`.
    pub fn expire(
        &mut self,
        now: Instant,
        stats: &mut Stats,
        recording: bool,
        freed: &mut Vec<usize>,
    ) {
        if self.tag {
            for (s, slot) in self.slots.iter_mut().enumerate() {
                if slot.busy && now.duration_since(slot.sent) > self.timeout {
                    slot.busy = false;
                    if slot.measured && recording {
                        stats.timeouts += 1;
                    }
                    freed.push(s);
                }
            }
            return;
        }
        for q in self.fifo.iter_mut() {
            while let Some(&(sent, measured)) = q.front() {
                if now.duration_since(sent) <= self.timeout {
                    break;
                }
                q.pop_front();
                self.fifo_total -= 1;
                if measured && recording {
                    stats.timeouts += 1;
                }
                freed.push(0);
            }
        }
    }
}

/// Sends one tagged probe to each ID and looks for the tag in the reply: its offset, or None.
pub fn probe(
    sock: &UdpSocket,
    ids: &[crate::wire::LambdaId],
    payload: &[u8],
) -> Vec<Option<usize>> {
    let mut rbuf = vec![0u8; RBUF];
    let _ = sock.set_read_timeout(Some(Duration::from_millis(300)));
    let out = ids
        .iter()
        .enumerate()
        .map(|(k, &id)| probe_one(sock, id, PROBE_TAG + k as u64, payload, &mut rbuf))
        .collect();
    // drain late replies
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    while sock.recv(&mut rbuf).is_ok() {}
    out
}

fn probe_one(
    sock: &UdpSocket,
    id: crate::wire::LambdaId,
    tag: u64,
    payload: &[u8],
    rbuf: &mut [u8],
) -> Option<usize> {
    let mut req = Vec::with_capacity(ID_LEN + payload.len().max(TAG_LEN));
    req.extend_from_slice(&id.to_be_bytes());
    req.extend_from_slice(payload);
    while req.len() < ID_LEN + TAG_LEN {
        req.push(b'a');
    }
    req[ID_LEN..ID_LEN + TAG_LEN].copy_from_slice(&tag.to_le_bytes());
    for _ in 0..3 {
        if sock.send(&req).is_err() {
            continue;
        }
        let deadline = Instant::now() + Duration::from_millis(300);
        while Instant::now() < deadline {
            match sock.recv(rbuf) {
                Ok(n) if n >= REPLY_HEAD => {
                    if decode_id(rbuf) != Some(id) {
                        continue;
                    }
                    let t = tag.to_le_bytes();
                    return rbuf[REPLY_HEAD..n].windows(TAG_LEN).position(|w| w == t);
                }
                Ok(_) => continue,
                Err(_) => break,
            }
        }
    }
    None
}
