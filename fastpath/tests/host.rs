//! Miss path: an unknown id goes to the gateway's host port (token-tagged) and comes back.

mod common;
use common::*;
use nearfaas_fastpath::server::HOST_TIMEOUT;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

#[test]
fn miss_is_relayed_through_the_host_and_expires() {
    let host = UdpSocket::bind("127.0.0.1:0").unwrap();
    host.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let haddr = host.local_addr().unwrap().to_string();
    let fp = Fp::start(&["--workers", "1", "--host", &haddr]);
    let c = fp.client();
    c.send(55, b"abc");
    let mut buf = [0u8; 2048];
    let (n, from) = host.recv_from(&mut buf).unwrap();
    assert_eq!(n, wire::TOKEN_LEN + wire::ID_LEN + 3);
    assert_eq!(
        &buf[4..12],
        &55u64.to_be_bytes(),
        "the original id follows the token"
    );
    assert_eq!(&buf[12..n], b"abc");
    let mut ans = buf[..4].to_vec();
    ans.push(HOST_OK);
    ans.extend_from_slice(b"from the host");
    host.send_to(&ans, from).unwrap();
    let (id, st, p) = c.recv().expect("relayed reply");
    assert_eq!((id, st, p.as_slice()), (55, HOST_OK, &b"from the host"[..]));

    // The host answers UNKNOWN: relayed as is.
    c.send(56, b"");
    let (n, from) = host.recv_from(&mut buf).unwrap();
    let mut ans = buf[..4].to_vec();
    ans.push(UNKNOWN);
    host.send_to(&ans, from).unwrap();
    assert_eq!(n, wire::TOKEN_LEN + wire::ID_LEN);
    assert_eq!(c.recv().unwrap(), (56, UNKNOWN, vec![]));

    // Over TCP too.
    let mut t = TcpClient::connect(&fp);
    t.send(57, b"tcp");
    let (n, from) = host.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[12..n], b"tcp");
    let mut ans = buf[..4].to_vec();
    ans.push(HOST_OK);
    ans.extend_from_slice(b"ok-tcp");
    host.send_to(&ans, from).unwrap();
    assert_eq!(t.recv(), (57, HOST_OK, b"ok-tcp".to_vec()));

    // No answer: the token expires after HOST_TIMEOUT (5 s) -> HOST_ERROR, counted.
    c.sock
        .set_read_timeout(Some(Duration::from_secs(8)))
        .unwrap();
    let t0 = Instant::now();
    c.send(58, b"lost");
    let _ = host.recv_from(&mut buf).unwrap();
    let (id, st, _) = c.recv().expect("HOST_ERROR after expiry");
    assert_eq!((id, st), (58, HOST_ERROR));
    assert!(
        t0.elapsed() >= HOST_TIMEOUT - Duration::from_millis(100),
        "{:?}",
        t0.elapsed()
    );
    let s = fp.stats();
    assert_eq!(s["global"]["host_forwarded"], 4);
    assert_eq!(s["global"]["host_errors"], 1);
    assert_eq!(s["global"]["unknown"], 0);
}
