//! The miss path: a datagram whose ID has no lambda goes to the gateway's host port (λ-NIC's
//! "send to host") and its answer is relayed to the client.

use super::*;

pub struct HostFwd {
    sock: UdpSocket,
    addr: SocketAddr,
    pending: Mutex<HashMap<u32, (LambdaId, ReplyTo, Instant)>>,
    next: AtomicU32,
}

impl HostFwd {
    pub fn new(sock: UdpSocket, addr: SocketAddr) -> HostFwd {
        HostFwd {
            sock,
            addr,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU32::new(1),
        }
    }

    pub(super) fn forward(
        &self,
        srv: &Server,
        dgram: &[u8],
        reply: ReplyTo,
        scratch: &mut Vec<u8>,
    ) {
        let id = LambdaId::from_be_bytes(dgram[..ID_LEN].try_into().unwrap());
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let mut msg = Vec::with_capacity(dgram.len() + 4);
        msg.extend_from_slice(&token.to_be_bytes());
        msg.extend_from_slice(dgram);
        if msg.len() > MAX_DGRAM {
            inc(&srv.g.host_errors);
            srv.reply_simple(
                &reply,
                id,
                HOST_ERROR,
                b"request too large to forward to the host",
                scratch,
            );
            return;
        }
        {
            let mut p = self.pending.lock().unwrap();
            if p.len() >= MAX_HOST_PENDING {
                drop(p);
                inc(&srv.g.host_errors);
                srv.reply_simple(
                    &reply,
                    id,
                    HOST_ERROR,
                    b"too many requests waiting for the host",
                    scratch,
                );
                return;
            }
            p.insert(token, (id, reply, Instant::now()));
        }
        inc(&srv.g.host_forwarded);
        if let Err(e) = self.sock.send_to(&msg, self.addr) {
            if let Some((id, reply, _)) = self.pending.lock().unwrap().remove(&token) {
                inc(&srv.g.host_errors);
                srv.reply_simple(
                    &reply,
                    id,
                    HOST_ERROR,
                    format!("cannot reach host: {e}").as_bytes(),
                    scratch,
                );
            }
        }
    }
}

pub fn host_loop(srv: Arc<Server>) {
    let Some(h) = srv.host.as_ref() else { return };
    let mut buf = vec![0u8; 65536];
    let mut scratch = Vec::new();
    let mut last_sweep = Instant::now();
    loop {
        if let Ok((n, from)) = h.sock.recv_from(&mut buf) {
            // Only the gateway answers misses: anything else could forge a client's reply.
            if n >= 5 && from == h.addr {
                let token = u32::from_be_bytes(buf[..4].try_into().unwrap());
                let entry = h.pending.lock().unwrap().remove(&token);
                if let Some((id, reply, _)) = entry {
                    if buf[4] == HOST_ERROR {
                        inc(&srv.g.host_errors);
                    }
                    srv.reply_simple(&reply, id, buf[4], &buf[5..n], &mut scratch);
                }
            }
        }
        if last_sweep.elapsed() >= Duration::from_millis(100) {
            last_sweep = Instant::now();
            let expired: Vec<(LambdaId, ReplyTo)> = {
                let mut p = h.pending.lock().unwrap();
                let old: Vec<u32> = p
                    .iter()
                    .filter(|(_, v)| v.2.elapsed() >= HOST_TIMEOUT)
                    .map(|(k, _)| *k)
                    .collect();
                old.into_iter()
                    .filter_map(|k| p.remove(&k))
                    .map(|(id, r, _)| (id, r))
                    .collect()
            };
            for (id, reply) in expired {
                inc(&srv.g.host_errors);
                srv.reply_simple(
                    &reply,
                    id,
                    HOST_ERROR,
                    b"host did not answer within 5 s",
                    &mut scratch,
                );
            }
        }
    }
}
