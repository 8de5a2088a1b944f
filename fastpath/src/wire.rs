//! The fast path's wire format (docs/fastpath.md), in one place for the executor, the load
//! generator and the integration tests. The Python side's copy is src/nearfaas/fastpath/wire.py.
//!
//! * UDP request: lambda id (u64 BE), payload. Reply: lambda id (u64 BE), status (u8), payload.
//! * TCP: each request or reply framed as length (u32 BE) + the UDP-format message.
//! * Unix datagram + memfd (SCM_RIGHTS): request id (u64 BE), input length (u32 BE); reply id
//!   (u64 BE), status (u8), reply length (u32 BE), the reply itself written into the memfd.
//! * Miss path to the host: token (u32 BE) + the request; the host answers token (u32 BE),
//!   status (u8), payload.
//! * Stream functions (`--stream`), one TCP connection per request, **little-endian**: header
//!   stream_id (u64 LE), payload_len (u64 LE; `STREAM_UNTIL_EOF` = until the client
//!   half-closes), the payload; reply status (u8), count (u32 LE), count elements (4 bytes LE
//!   each; `frequent`: count pairs of value u32 LE, estimated count u32 LE), then close. With
//!   `STREAM_KEEP_ALIVE` or-ed into a declared payload_len the connection stays open after the
//!   reply for the next request.
//!
//! Lambda IDs are 64-bit values the gateway draws from a CSPRNG (issue 39: an ID is not a
//! credential, but a small sequential one invites sweeps); the executor takes any u64.

/// The lambda ran and answered.
pub const OK: u8 = 0;
/// The host (the gateway's miss path) ran the function and answered.
pub const HOST_OK: u8 = 1;
/// No lambda has this id (and no host took the miss).
pub const UNKNOWN: u8 = 2;
/// The lambda trapped (its instance is dropped and rebuilt).
pub const TRAP: u8 = 3;
/// The lambda ran past its timeout or fuel budget.
pub const TIMEOUT: u8 = 4;
/// The request or the reply does not fit the lambda's buffer (or a datagram).
pub const TOO_LARGE: u8 = 5;
/// The lambda's queue is full.
pub const OVERLOADED: u8 = 6;
/// The host failed, or did not answer in time.
pub const HOST_ERROR: u8 = 7;
/// The lambda's external call (memcached) failed.
pub const EXTERNAL_ERROR: u8 = 8;
/// The lambda refused the input (a negative return).
pub const BAD_REQUEST: u8 = 9;
/// The function requires credentials the fast path does not carry (the host refused the miss).
pub const UNAUTHORIZED: u8 = 10;

/// Status names, indexed by code.
pub const STATUS_NAMES: [&str; 11] = [
    "OK",
    "HOST_OK",
    "UNKNOWN",
    "TRAP",
    "TIMEOUT",
    "TOO_LARGE",
    "OVERLOADED",
    "HOST_ERROR",
    "EXTERNAL_ERROR",
    "BAD_REQUEST",
    "UNAUTHORIZED",
];

/// A lambda (or stream function) id.
pub type LambdaId = u64;
/// The hasher of maps keyed by lambda id (the match table, the scheduler's queues). IDs are drawn at random by the gateway (and only the
/// authenticated control port inserts them), so one multiply spreads them well enough; SipHash
/// would cost more than the rest of a lookup.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        // Fold the high bits down: hashbrown takes its bucket from the low bits and its tag from the top 7.
        let h = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

pub type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// Bytes of the lambda id at the start of a request (u64 BE).
pub const ID_LEN: usize = 8;
/// Bytes of a reply's header: lambda id (u64 BE) and status (u8).
pub const REPLY_HEAD: usize = ID_LEN + 1;
/// Bytes of a TCP frame's length prefix (u32 BE).
pub const FRAME_LEN: usize = 4;
/// Bytes of a memfd request datagram: id (u64 BE), input length (u32 BE).
pub const MEMFD_REQ: usize = 12;
/// Bytes of a memfd reply datagram: id (u64 BE), status (u8), reply length (u32 BE).
pub const MEMFD_REPLY: usize = 13;
/// Bytes of the token the miss path puts before a request, and the host before its answer.
pub const TOKEN_LEN: usize = 4;
/// Largest UDP datagram payload.
pub const MAX_DGRAM: usize = 65507;
/// Bytes of a stream request's header: stream_id (u64 LE), payload_len (u64 LE).
pub const STREAM_HEAD: usize = 16;
/// `payload_len` meaning "until the client half-closes its side".
pub const STREAM_UNTIL_EOF: u64 = u64::MAX;
/// Or-ed into a declared payload_len: keep the connection open after the reply (stream IDs
/// take all 64 bits, and no payload is 2^63 bytes long, so the flag lives in the length).
pub const STREAM_KEEP_ALIVE: u64 = 1 << 63;
/// Bytes of a stream reply's head: status (u8), count (u32 LE).
pub const STREAM_REPLY_HEAD: usize = 5;
/// Bytes of one element of a stream payload or reply (u32 or f32, little-endian).
pub const STREAM_ELEM: usize = 4;
/// Bytes of one `frequent` reply entry: value (u32 LE), estimated count (u32 LE).
pub const STREAM_PAIR: usize = 8;

/// A stream request's header.
pub fn encode_stream_head(stream_id: LambdaId, payload_len: u64) -> [u8; STREAM_HEAD] {
    let mut h = [0u8; STREAM_HEAD];
    h[..8].copy_from_slice(&stream_id.to_le_bytes());
    h[8..].copy_from_slice(&payload_len.to_le_bytes());
    h
}

/// (status, count) of a stream reply's head; None when shorter than `STREAM_REPLY_HEAD`.
pub fn decode_stream_reply_head(b: &[u8]) -> Option<(u8, u32)> {
    let h = b.get(..STREAM_REPLY_HEAD)?;
    Some((h[0], u32::from_le_bytes(h[1..5].try_into().ok()?)))
}

/// Whether a status is a success (the lambda's or the host's answer).
pub fn is_ok(status: u8) -> bool {
    status == OK || status == HOST_OK
}

/// The name of a status code (`STATUS_<n>` for codes the format does not define).
pub fn status_name(status: u8) -> String {
    match STATUS_NAMES.get(status as usize) {
        Some(n) => n.to_string(),
        None => format!("STATUS_{status}"),
    }
}

/// A request: the lambda id, then the payload.
pub fn encode_request(id: LambdaId, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(ID_LEN + payload.len());
    d.extend_from_slice(&id.to_be_bytes());
    d.extend_from_slice(payload);
    d
}

/// The lambda id of a request or reply (None when shorter than an id).
pub fn decode_id(msg: &[u8]) -> Option<LambdaId> {
    Some(u64::from_be_bytes(msg.get(..ID_LEN)?.try_into().ok()?))
}

/// A reply: the lambda id, the status, then the payload.
pub fn encode_reply(id: LambdaId, status: u8, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(REPLY_HEAD + payload.len());
    d.extend_from_slice(&id.to_be_bytes());
    d.push(status);
    d.extend_from_slice(payload);
    d
}

/// (id, status, payload) of a reply; None when shorter than its header.
pub fn decode_reply(msg: &[u8]) -> Option<(LambdaId, u8, &[u8])> {
    if msg.len() < REPLY_HEAD {
        return None;
    }
    Some((decode_id(msg)?, msg[ID_LEN], &msg[REPLY_HEAD..]))
}

/// TCP framing: the message's length (u32 BE), then the message.
pub fn frame(msg: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(FRAME_LEN + msg.len());
    d.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    d.extend_from_slice(msg);
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_reply_and_frame_round_trip() {
        assert_eq!(
            encode_request(0x0102_0304_0506_0708, b"ab"),
            b"\x01\x02\x03\x04\x05\x06\x07\x08ab"
        );
        let r = encode_reply(7, TRAP, b"x");
        assert_eq!(r, b"\x00\x00\x00\x00\x00\x00\x00\x07\x03x");
        assert_eq!(decode_reply(&r), Some((7, TRAP, &b"x"[..])));
        assert_eq!(decode_reply(b"\x00\x00\x00\x00\x00\x00\x00\x07"), None);
        assert_eq!(decode_id(b"\x00\x01\x02\x03"), None);
        assert_eq!(frame(b"abc"), b"\x00\x00\x00\x03abc");
        assert_eq!(status_name(BAD_REQUEST), "BAD_REQUEST");
        assert_eq!(status_name(200), "STATUS_200");
        assert!(is_ok(HOST_OK) && !is_ok(UNKNOWN));
    }
}
