//! Native lambdas: the same behaviour as fastpath/lambdas/{web,kv,gray}.c, in Rust (trusted,
//! short, run to completion), and the memcached framing the external calls share.

use crate::lambda::{NativeKind, Outcome, HDR};

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
