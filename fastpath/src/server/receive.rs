//! The receivers: UDP (λ-NIC's wire format), TCP framing, and the Unix socket that carries a
//! memfd. Each turns a request into a job on its lambda's queue (the match stage is
//! `Server::dispatch`).

use super::*;

/// One datagram already waiting on the UDP socket, without blocking: (length, sender).
fn recv_nowait(fd: i32, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: buf and addr are valid for the lengths given; the kernel writes at most those.
    let n = unsafe {
        libc::recvfrom(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if n < 0 {
        return None;
    }
    let from = match addr.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            SocketAddr::from((
                u32::from_be(a.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(a.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            SocketAddr::from((a.sin6_addr.s6_addr, u16::from_be(a.sin6_port)))
        }
        _ => return None,
    };
    Some((n as usize, from))
}

impl Server {
    /// Classify what already waits on the UDP socket before a worker picks its next job. The
    /// receiver thread competes for the CPU with the workers (and, on two cores, the clients),
    /// so under a heavy lambda's burst a light lambda's datagram could sit in the kernel buffer
    /// behind the whole burst, where weighted fair queueing cannot see it.
    pub fn drain_udp(&self, buf: &mut [u8], scratch: &mut Vec<u8>, max: usize) {
        let fd = self.udp.as_raw_fd();
        for _ in 0..max {
            let Some((n, from)) = recv_nowait(fd, buf) else {
                return;
            };
            self.accept_datagram(&buf[..n], from, scratch);
        }
    }

    fn accept_datagram(&self, dgram: &[u8], from: SocketAddr, scratch: &mut Vec<u8>) {
        inc(&self.g.packets);
        if dgram.len() < ID_LEN {
            inc(&self.g.malformed_short);
            return;
        }
        self.dispatch(dgram, ReplyTo::Udp(from), scratch);
    }
}

pub fn udp_loop(srv: Arc<Server>) {
    let mut buf = vec![0u8; 65536];
    let mut scratch = Vec::with_capacity(256);
    loop {
        let (n, from) = match srv.udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        srv.accept_datagram(&buf[..n], from, &mut scratch);
    }
}

/// Stack of a TCP connection's reader and writer threads: they parse frames and queue jobs, and
/// never run a lambda, so a small stack keeps a thread's reserved memory small.
const CONN_STACK: usize = 256 << 10;

pub fn tcp_accept_loop(srv: Arc<Server>, listener: TcpListener) {
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        // Each connection holds two threads and up to ~3 x --max-frame bytes: beyond the cap,
        // close at once (dropping `s`) rather than let a flood of connections exhaust memory.
        if srv.tcp_conns.fetch_add(1, Ordering::AcqRel) >= srv.max_conns {
            srv.tcp_conns.fetch_sub(1, Ordering::AcqRel);
            inc(&srv.g.conns_refused);
            continue;
        }
        // One peer IP gets at most its share, so one client cannot take the whole pool (issue 39).
        let Some(peer) = s.peer_addr().ok().map(|a| a.ip()) else {
            srv.tcp_conns.fetch_sub(1, Ordering::AcqRel);
            continue;
        };
        {
            let mut peers = srv.tcp_peers.lock().unwrap();
            let n = peers.entry(peer).or_insert(0);
            if *n >= srv.max_conns_per_peer {
                drop(peers);
                srv.tcp_conns.fetch_sub(1, Ordering::AcqRel);
                inc(&srv.g.conns_refused_peer);
                continue;
            }
            *n += 1;
        }
        let _ = s.set_nodelay(true);
        let srv2 = srv.clone();
        let spawned = std::thread::Builder::new()
            .name("tcp-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || {
                tcp_conn(&srv2, s);
                release_peer(&srv2, peer);
            });
        if spawned.is_err() {
            release_peer(&srv, peer);
        }
    }
}

/// A byte stream the framed protocol runs over: a TCP connection from anyone, or a connection
/// on the gateway's private unix socket (`--tcp-unix`).
pub trait Duplex: Read + Write + Send + Sized + 'static {
    fn dup(&self) -> std::io::Result<Self>;
    fn read_timeout(&self, t: Option<Duration>);
    fn write_timeout(&self, t: Duration);
    fn shut(&self);
}

/// TCP and unix streams have the same calls under the same names: one impl for both.
macro_rules! duplex {
    ($t:ty) => {
        impl Duplex for $t {
            fn dup(&self) -> std::io::Result<Self> {
                self.try_clone()
            }
            fn read_timeout(&self, t: Option<Duration>) {
                let _ = self.set_read_timeout(t);
            }
            fn write_timeout(&self, t: Duration) {
                let _ = self.set_write_timeout(Some(t));
            }
            fn shut(&self) {
                let _ = self.shutdown(std::net::Shutdown::Both);
            }
        }
    };
}
duplex!(TcpStream);
duplex!(std::os::unix::net::UnixStream);

/// Connections the gateway may hold on its private socket (it opens at most 64).
const UNIX_MAX_CONNS: usize = 256;

/// The framed protocol on the gateway's private unix socket (`--tcp-unix`, mode 0600 in the
/// state dir): the gateway's relay of HTTP calls never competes with anonymous TCP clients for
/// the TCP port's connections. On loopback a client is not one IP (any process may bind
/// 127.0.0.2, 127.0.0.3, ...), so per-IP shares there could not keep the gateway's room (red
/// team round 7: 3 × 100 idle connections from three loopback addresses made the gateway's
/// fast-path calls 502).
pub fn unix_accept_loop(srv: Arc<Server>, listener: std::os::unix::net::UnixListener) {
    let open = Arc::new(AtomicUsize::new(0));
    for s in listener.incoming() {
        let Ok(s) = s else { continue };
        if open.fetch_add(1, Ordering::AcqRel) >= UNIX_MAX_CONNS {
            open.fetch_sub(1, Ordering::AcqRel);
            inc(&srv.g.conns_refused);
            continue;
        }
        let (srv2, open2) = (srv.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("unix-conn".into())
            .stack_size(CONN_STACK)
            .spawn(move || {
                tcp_conn(&srv2, s);
                open2.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn release_peer(srv: &Server, peer: std::net::IpAddr) {
    let mut peers = srv.tcp_peers.lock().unwrap();
    if let Some(n) = peers.get_mut(&peer) {
        *n -= 1;
        if *n == 0 {
            peers.remove(&peer);
        }
    }
    drop(peers);
    srv.tcp_conns.fetch_sub(1, Ordering::AcqRel);
}

/// Read a frame's 4-byte length into `lb`. The socket's read timeout is `--tcp-idle-ms`: when
/// it passes with nothing read and no request of the connection unanswered (`idle()`), the
/// connection is closed (false), so idle connections do not hold the pool (issue 39); with a
/// request in flight it keeps waiting. Bytes already read are kept across timeouts.
fn read_head(r: &mut impl Read, lb: &mut [u8; 4], idle: impl Fn() -> bool) -> Result<(), bool> {
    let mut got = 0;
    while got < 4 {
        match r.read(&mut lb[got..]) {
            Ok(0) => return Err(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if got == 0 && idle() {
                    return Err(true);
                }
                if got > 0 {
                    return Err(false); // half a header, then silence for --tcp-idle-ms: not a client
                }
            }
            Err(_) => return Err(false),
        }
    }
    Ok(())
}

/// Read `len` bytes into `buf`, growing it only as bytes arrive (at most 64 KiB ahead of them,
/// never past `len`): a peer that declares a large frame and sends nothing costs nothing.
fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>, len: usize) -> bool {
    const STEP: usize = 64 << 10;
    buf.clear();
    while buf.len() < len {
        let have = buf.len();
        let want = (len - have).min(STEP);
        if have + want > buf.capacity() {
            // Double as usual, but never past the frame's length.
            let target = (buf.capacity() * 2).max(have + want).min(len);
            buf.reserve_exact(target - have);
        }
        buf.resize(have + want, 0);
        match r.read(&mut buf[have..]) {
            Ok(0) => return false,
            Ok(n) => buf.truncate(have + n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => buf.truncate(have),
            Err(_) => return false,
        }
    }
    true
}

fn tcp_conn<S: Duplex>(srv: &Arc<Server>, stream: S) {
    stream.read_timeout(Some(srv.tcp_idle));
    let Ok(wstream) = stream.dup() else {
        return;
    };
    let (tx, rx) = mpsc::channel::<(u64, Vec<u8>, usize)>();
    // Requests in flight and replies not yet written stay under `soft` before a new request is
    // read (TCP pushes back on the client); replies to requests already admitted may add up to
    // another `max_frame` before the connection is dropped as not reading its replies.
    let soft = srv.max_frame;
    let state = Arc::new(TcpState {
        pending: AtomicUsize::new(0),
        limit: soft + srv.max_frame + (64 << 10),
        overflow: AtomicBool::new(false),
    });
    let conn = Arc::new(TcpConn {
        tx,
        state: state.clone(),
    });
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (written, conn, srv) = (written.clone(), state.clone(), srv.clone());
        match std::thread::Builder::new()
            .name("tcp-writer".into())
            .stack_size(CONN_STACK)
            .spawn(move || tcp_writer(&srv, wstream, rx, written, &conn))
        {
            Ok(h) => h,
            Err(_) => return,
        }
    };
    let mut r = std::io::BufReader::with_capacity(1 << 16, stream);
    let mut seq = 0u64;
    let mut buf = Vec::new();
    let mut scratch = Vec::with_capacity(256);
    loop {
        let mut lb = [0u8; 4];
        let idle = || written.load(Ordering::Acquire) == seq;
        match read_head(&mut r, &mut lb, idle) {
            Ok(()) => {}
            Err(true) => {
                inc(&srv.g.conns_idle_closed);
                break;
            }
            Err(false) => break,
        }
        let len = u32::from_be_bytes(lb) as usize;
        if len > srv.max_frame {
            inc(&srv.g.frames_too_large);
            break; // over the limit (or not this protocol): drop the connection
        }
        if !read_frame(&mut r, &mut buf, len) {
            break;
        }
        inc(&srv.g.packets);
        if len < ID_LEN {
            inc(&srv.g.malformed_short);
            continue;
        }
        // A client that sends without reading its replies must not make them pile up here
        // without bound: stop reading (TCP pushes back on it) until the writer catches up.
        while seq - written.load(Ordering::Acquire) >= TCP_MAX_UNANSWERED
            || state.pending.load(Ordering::Acquire) >= soft
        {
            if writer.is_finished() {
                return;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        state.pending.fetch_add(len, Ordering::AcqRel);
        let to = ReplyTo::Tcp {
            conn: conn.clone(),
            seq,
            req_len: len,
        };
        seq += 1;
        srv.dispatch(&buf, to, &mut scratch);
        if buf.capacity() > (256 << 10) {
            buf = Vec::new(); // an idle connection does not keep a large frame's buffer
        }
    }
}

/// Replies of one TCP connection not yet written back before its reader stops reading.
const TCP_MAX_UNANSWERED: u64 = 4096;
/// A client that reads none of its replies for this long is dropped (its writer would block
/// holding its replies forever).
const TCP_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

fn tcp_writer<S: Duplex>(
    srv: &Server,
    stream: S,
    rx: Receiver<(u64, Vec<u8>, usize)>,
    written: Arc<AtomicU64>,
    conn: &TcpState,
) {
    stream.write_timeout(TCP_WRITE_TIMEOUT);
    let closer = stream.dup().ok();
    write_replies(srv, stream, rx, written, conn);
    // Whatever ended the writer, the reader must not go on admitting requests nobody answers:
    // shut the socket so its blocking read returns.
    if let Some(s) = closer {
        s.shut();
    }
}

fn write_replies<S: Duplex>(
    srv: &Server,
    stream: S,
    rx: Receiver<(u64, Vec<u8>, usize)>,
    written: Arc<AtomicU64>,
    conn: &TcpState,
) {
    let mut w = BufWriter::with_capacity(1 << 16, stream);
    let mut next = 0u64;
    let mut held: BTreeMap<u64, (Vec<u8>, usize)> = BTreeMap::new();
    while let Ok(first) = rx.recv() {
        let mut item = Some(first);
        loop {
            if let Some((seq, bytes, req_len)) = item.take() {
                held.insert(seq, (bytes, req_len));
                while let Some((b, req_len)) = held.remove(&next) {
                    if b.is_empty() && conn.overflow.load(Ordering::Acquire) {
                        inc(&srv.g.frames_too_large);
                        let _ = w.flush();
                        return;
                    }
                    if w.write_all(&b).is_err() {
                        return;
                    }
                    conn.pending.fetch_sub(b.len() + req_len, Ordering::AcqRel);
                    next += 1;
                    written.store(next, Ordering::Release);
                }
            }
            match rx.try_recv() {
                Ok(x) => item = Some(x),
                Err(_) => break,
            }
        }
        if w.flush().is_err() {
            return;
        }
    }
}

/// The largest memfd mapped (input plus room for the reply). Mappings of queued requests are
/// address space until touched, but the bound keeps a client from parking huge ones there.
const MAX_SHM_MAP: usize = 64 << 20;

pub fn unix_loop(srv: Arc<Server>) {
    let Some(sock) = srv.unix.as_ref() else {
        return;
    };
    let fd = sock.as_raw_fd();
    let mut scratch = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        let Some((n, fds, from)) = recv_with_fds(fd, &mut buf) else {
            continue;
        };
        inc(&srv.g.packets);
        let Some(path) = from else { continue }; // unnamed client: cannot answer
        if n < crate::wire::MEMFD_REQ {
            inc(&srv.g.malformed_short);
            continue;
        }
        let id = LambdaId::from_be_bytes(buf[..ID_LEN].try_into().unwrap());
        let len = u32::from_be_bytes(buf[ID_LEN..ID_LEN + 4].try_into().unwrap()) as usize;
        let Some(shm) = srv.map_memfd(&path, id, len, fds) else {
            continue;
        };
        srv.enqueue_shm(id, ReplyTo::Unix { path, shm }, &mut scratch);
    }
}

/// One datagram from the Unix socket into `buf`: (length, the descriptors it carried, the
/// sender's path if it has one); `None` when the receive failed.
fn recv_with_fds(fd: i32, buf: &mut [u8]) -> Option<(usize, Vec<OwnedFd>, Option<PathBuf>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};
    use std::io::IoSliceMut;
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg =
        recvmsg::<UnixAddr>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC).ok()?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    if let Ok(cm) = msg.cmsgs() {
        for c in cm {
            if let ControlMessageOwned::ScmRights(v) = c {
                for raw in v {
                    fds.push(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
                }
            }
        }
    }
    let from = msg.address.and_then(|a| a.path().map(|p| p.to_path_buf()));
    Some((msg.bytes, fds, from))
}

impl Server {
    /// Map the request's memfd (the first descriptor it carried) with `len` bytes of input.
    /// A request without one, over the limits, or unsealed is answered here and gives `None`.
    fn map_memfd(
        &self,
        path: &PathBuf,
        id: LambdaId,
        len: usize,
        fds: Vec<OwnedFd>,
    ) -> Option<Shm> {
        let Some(memfd) = fds.into_iter().next() else {
            self.unix_answer(path, id, BAD_REQUEST, 0);
            return None;
        };
        // Bounded like a TCP frame: an input over --max-frame, or a memfd larger than
        // MAX_SHM_MAP, is refused before it is mapped.
        if len > self.max_frame {
            inc(&self.g.frames_too_large);
            self.unix_answer(path, id, TOO_LARGE, 0);
            return None;
        }
        let shm = match Shm::map(&memfd, len, MAX_SHM_MAP) {
            Ok(s) => s,
            Err(e) => {
                let status = if matches!(e, crate::shm::MapError::Unsealed) {
                    BAD_REQUEST
                } else {
                    TOO_LARGE
                };
                self.unix_answer(path, id, status, 0);
                return None;
            }
        };
        drop(memfd);
        Some(shm)
    }

    /// Match stage for a memfd request: queue it on lambda `id`, or answer UNKNOWN/OVERLOADED.
    fn enqueue_shm(&self, id: LambdaId, reply: ReplyTo, scratch: &mut Vec<u8>) {
        match self.lookup(id) {
            Some(l) => {
                inc(&l.stats.calls);
                if let Err(job) = self.sched.push(
                    Job {
                        lambda: l,
                        kind: JobKind::ShmRequest,
                        reply,
                    },
                    false,
                ) {
                    inc(&job.lambda.stats.overloaded);
                    self.reply_simple(&job.reply, id, OVERLOADED, b"", scratch);
                }
            }
            None => {
                inc(&self.g.unknown);
                self.reply_simple(&reply, id, UNKNOWN, b"", scratch);
            }
        }
    }
}
