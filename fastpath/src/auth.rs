//! Control-port authentication: challenge-response with HMAC-SHA256 over a per-cluster key.
//!
//! The control port can swap any lambda's module, so anyone on the host who reaches it could
//! run their code under another function's ID. On each connection the executor sends a fresh
//! random nonce; the client proves it holds the key by answering HMAC-SHA256(key, nonce). The
//! key itself never crosses the socket, and a recorded answer is useless for the next nonce.

use std::io::{BufRead, ErrorKind};
use std::os::unix::fs::PermissionsExt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Nonce bytes per challenge.
pub const NONCE_LEN: usize = 32;
/// The shortest key accepted (bytes after hex decoding): 128 bits.
const MIN_KEY_LEN: usize = 16;

/// Read the hex key from `path`. Fails (with a message naming the fix) when the file is
/// missing, readable by group or others, not hex, or too short: a key others can read is no key.
pub fn load_key(path: &str) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{path:?} has mode {mode:o}: other users can read the key; chmod 600 it"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path:?}: {e}"))?;
    let key = decode_hex(text.trim())
        .ok_or_else(|| format!("{path:?} does not hold a hex string (e.g. 64 hex digits)"))?;
    if key.len() < MIN_KEY_LEN {
        return Err(format!(
            "{path:?} holds a {}-byte key; use at least {MIN_KEY_LEN} bytes ({} hex digits)",
            key.len(),
            MIN_KEY_LEN * 2
        ));
    }
    Ok(key)
}

/// A fresh nonce from the OS's CSPRNG.
pub fn nonce() -> Result<[u8; NONCE_LEN], String> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| format!("getrandom: {e}"))?;
    Ok(n)
}

/// HMAC-SHA256(key, nonce), hex: what a client answers (clients are Python and the tests).
#[cfg(test)]
pub fn answer(key: &[u8], nonce: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(nonce);
    encode_hex(&mac.finalize().into_bytes())
}

/// Whether `answer_hex` is HMAC-SHA256(key, nonce). The comparison is constant-time
/// (`verify_slice`), so timing does not leak how much of a guess was right.
pub fn verify(key: &[u8], nonce: &[u8], answer_hex: &str) -> bool {
    let Some(tag) = decode_hex(answer_hex) else {
        return false;
    };
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(nonce);
    mac.verify_slice(&tag).is_ok()
}

pub fn encode_hex(b: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(D[(x >> 4) as usize] as char);
        s.push(D[(x & 15) as usize] as char);
    }
    s
}

pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

/// Why a line could not be read.
#[derive(Debug)]
pub enum LineError {
    /// The peer sent more than the limit without a newline.
    TooLong,
    /// The connection closed, timed out or failed.
    Io,
}

/// One `\n`-terminated line of at most `limit` bytes (without the newline); `Ok(None)` at a
/// clean end of stream. Unlike `BufRead::split`, a peer that never sends a newline cannot make
/// the line grow without bound.
pub fn read_line_limited(r: &mut impl BufRead, limit: usize) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(LineError::Io),
        };
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(LineError::Io)
            };
        }
        let (take, done) = match buf.iter().position(|&c| c == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > limit {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take + done as usize);
        if done {
            return Ok(Some(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            answer(b"Jefe", b"what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let good = answer(b"Jefe", b"n");
        assert!(verify(b"Jefe", b"n", &good));
        assert!(!verify(b"Jefe", b"m", &good));
        assert!(!verify(b"Jefe", b"n", "zz"));
    }

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        assert_eq!(
            decode_hex(&encode_hex(&[0, 1, 254, 255])).unwrap(),
            [0, 1, 254, 255]
        );
        assert!(decode_hex("abc").is_none());
        assert!(decode_hex("zz").is_none());
    }

    #[test]
    fn lines_are_bounded() {
        let mut r = std::io::BufReader::with_capacity(4, &b"abc\ndefghij\n"[..]);
        assert_eq!(read_line_limited(&mut r, 5).unwrap().unwrap(), b"abc");
        assert!(matches!(
            read_line_limited(&mut r, 5),
            Err(LineError::TooLong)
        ));
    }
}
