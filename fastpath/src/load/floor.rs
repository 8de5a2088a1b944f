//! `nearfaas-fastpath-load --stream-floor ADDR`: the TCP floor under the stream listener, for
//! benchmarks to print beside it. A blocking server, one connection at a time (no thread to
//! start per connection; the benchmarks' client sends one request at a time), that speaks the
//! stream protocol and does nothing else: it reads the 16-byte header and the payload, writes a
//! reply of the same shape as a K = 16 Top-K's (status OK, count 16, 64 bytes of zeros) and
//! closes, or with `STREAM_KEEP_ALIVE` waits for the next header. What a request costs against
//! it is the kernel's: the handshake, loopback round trips, the reads and writes. The executor
//! cannot be faster than this on the same machine, so its p50 is read beside this one.
//!
//! Prints `{"stream_floor_addr": "HOST:PORT"}` once listening, then serves until killed.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::exit;

use crate::wire::{STREAM_HEAD, STREAM_KEEP_ALIVE, STREAM_UNTIL_EOF};

/// The reply's element count: the benchmarks' Top-K has K = 16.
const REPLY_ELEMENTS: u32 = 16;

pub fn main(argv: &[String]) {
    let addr = argv
        .iter()
        .position(|a| a == "--stream-floor")
        .and_then(|i| argv.get(i + 1))
        .unwrap_or_else(|| {
            eprintln!("usage: nearfaas-fastpath-load --stream-floor HOST:PORT (port 0: any)");
            exit(2)
        });
    let listener = TcpListener::bind(addr).unwrap_or_else(|e| {
        eprintln!("nearfaas-fastpath-load --stream-floor: cannot listen on {addr}: {e}");
        exit(1)
    });
    let local = listener.local_addr().expect("bound address");
    println!("{{\"stream_floor_addr\": \"{local}\"}}");
    for sock in listener.incoming().flatten() {
        serve(sock);
    }
}

fn serve(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut reply = vec![0u8; 5 + 4 * REPLY_ELEMENTS as usize];
    reply[1..5].copy_from_slice(&REPLY_ELEMENTS.to_le_bytes());
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let mut head = [0u8; STREAM_HEAD];
        if s.read_exact(&mut head).is_err() {
            return;
        }
        let raw = u64::from_le_bytes(head[8..].try_into().unwrap());
        let keep = raw != STREAM_UNTIL_EOF && raw & STREAM_KEEP_ALIVE != 0;
        let mut left = if keep { raw & !STREAM_KEEP_ALIVE } else { raw };
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            match s.read(&mut buf[..want]) {
                Ok(0) if left == STREAM_UNTIL_EOF => break,
                Ok(0) | Err(_) => return,
                Ok(n) if left != STREAM_UNTIL_EOF => left -= n as u64,
                Ok(_) => {}
            }
        }
        if s.write_all(&reply).is_err() || !keep {
            return;
        }
    }
}
