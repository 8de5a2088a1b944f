//! Large payloads through shared memory: the image lambda over the Unix socket + memfd.

mod common;
use common::*;
use serde_json::json;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};

fn unsealed_memfd(data: &[u8]) -> OwnedFd {
    let fd =
        unsafe { libc::memfd_create(c"img".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let f = std::fs::File::from(fd.try_clone().unwrap());
    use std::io::Write;
    (&f).write_all(data).unwrap();
    fd
}

/// A memfd as clients must send it: sealed against shrinking (docs/fastpath.md).
fn memfd(data: &[u8]) -> OwnedFd {
    let fd = unsealed_memfd(data);
    assert_eq!(
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) },
        0
    );
    fd
}

fn read_memfd(fd: &OwnedFd, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    let r = unsafe { libc::pread(fd.as_raw_fd(), out.as_mut_ptr() as *mut libc::c_void, n, 0) };
    assert_eq!(r as usize, n);
    out
}

fn shm_call(
    sock: &UnixDatagram,
    server: &std::path::Path,
    id: u64,
    fd: &OwnedFd,
    len: u32,
) -> (u64, u8, u32) {
    let mut msg = id.to_be_bytes().to_vec();
    msg.extend_from_slice(&len.to_be_bytes());
    let fds = [fd.as_raw_fd()];
    let addr = UnixAddr::new(server).unwrap();
    sendmsg(
        sock.as_raw_fd(),
        &[IoSlice::new(&msg)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        Some(&addr),
    )
    .unwrap();
    let mut b = [0u8; 64];
    let n = sock.recv(&mut b).expect("shm reply");
    assert_eq!(n, wire::MEMFD_REPLY);
    (
        u64::from_be_bytes(b[..8].try_into().unwrap()),
        b[8],
        u32::from_be_bytes(b[9..13].try_into().unwrap()),
    )
}

#[test]
fn gray_via_memfd_wasm_and_native() {
    let fp = Fp::start(&["--workers", "2"]);
    fp.deploy_wasm(30, "gray", json!({}));
    fp.deploy_wasm(31, "gray_scalar", json!({}));
    fp.deploy_native(32, "gray", json!({}));
    let dir = tmpdir("gray");
    let me = dir.join("client.sock");
    let sock = UnixDatagram::bind(&me).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut rng = Rng(12345);
    let img: Vec<u8> = (0..256 * 256 * 4).map(|_| rng.next() as u8).collect();
    let want: Vec<u8> = img
        .chunks_exact(4)
        .map(|p| ((77 * p[0] as u32 + 150 * p[1] as u32 + 29 * p[2] as u32) >> 8) as u8)
        .collect();
    for id in [30u64, 31, 32, 30, 32] {
        let fd = memfd(&img);
        let (rid, st, n) = shm_call(&sock, &fp.unix_path(), id, &fd, img.len() as u32);
        assert_eq!((rid, st, n), (id, OK, 65536), "lambda {id}");
        assert_eq!(read_memfd(&fd, 65536), want, "lambda {id} output");
    }
    // Bad length (not a multiple of 4) -> BAD_REQUEST; unknown id -> UNKNOWN;
    // length larger than the memfd -> TOO_LARGE.
    let fd = memfd(&img[..10]);
    assert_eq!(shm_call(&sock, &fp.unix_path(), 30, &fd, 10).1, BAD_REQUEST);
    assert_eq!(shm_call(&sock, &fp.unix_path(), 32, &fd, 10).1, BAD_REQUEST);
    assert_eq!(shm_call(&sock, &fp.unix_path(), 99, &fd, 8).1, UNKNOWN);
    assert_eq!(shm_call(&sock, &fp.unix_path(), 30, &fd, 1000).1, TOO_LARGE);
    // Larger than the wasm lambda's 1 MiB buffer -> TOO_LARGE
    let big = memfd(&vec![0u8; (1 << 20) + 4]);
    assert_eq!(
        shm_call(&sock, &fp.unix_path(), 30, &big, (1 << 20) + 4).1,
        TOO_LARGE
    );
    // A memfd not sealed against shrinking could be truncated under the mapping (SIGBUS): refused.
    let loose = unsealed_memfd(&img);
    assert_eq!(
        shm_call(&sock, &fp.unix_path(), 30, &loose, img.len() as u32).1,
        BAD_REQUEST
    );
    // The web lambda answers through the memfd too.
    fp.deploy_wasm(7, "web", json!({}));
    let fd = memfd(b"shm!");
    // The reply is longer than the 4-byte memfd: TOO_LARGE (the executor never grows it).
    assert_eq!(
        shm_call(&sock, &fp.unix_path(), 7, &fd, 4),
        (7, TOO_LARGE, 0)
    );
    let fd = memfd(&[b'.'; 100]);
    let (_, st, n) = shm_call(&sock, &fp.unix_path(), 7, &fd, 4);
    assert_eq!(st, OK);
    assert_eq!(
        read_memfd(&fd, n as usize),
        b"Hello from nearfaas fastpath v1: ...."
    );
}

#[test]
fn memfd_inputs_are_bounded_like_tcp_frames() {
    let fp = Fp::start(&["--workers", "1", "--max-frame", "65536"]);
    fp.deploy_native(32, "gray", json!({}));
    let dir = tmpdir("shm-bounds");
    let sock = UnixDatagram::bind(dir.join("client.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // An input over --max-frame: refused before it is mapped or queued.
    let img = vec![7u8; 256 * 256 * 4];
    let fd = memfd(&img);
    assert_eq!(
        shm_call(&sock, &fp.unix_path(), 32, &fd, img.len() as u32),
        (32, TOO_LARGE, 0)
    );
    assert_eq!(fp.stats()["global"]["frames_too_large"], 1);
    // A small input in a (sparse) 80 MiB memfd: larger than the executor maps.
    let huge = memfd(&[1u8; 16]);
    assert_eq!(unsafe { libc::ftruncate(huge.as_raw_fd(), 80 << 20) }, 0);
    assert_eq!(shm_call(&sock, &fp.unix_path(), 32, &huge, 16).1, TOO_LARGE);
    // Within both limits: served.
    let ok = memfd(&img[..4096]);
    assert_eq!(
        shm_call(&sock, &fp.unix_path(), 32, &ok, 4096),
        (32, OK, 1024)
    );
}
