//! External calls (memcached text protocol), non-blocking for workers: a lambda returning
//! NF_EXTERNAL hands its bytes to a connection's writer thread and the worker moves on; the
//! reader thread queues the continuation when the reply is complete.

use super::*;

pub struct Cont {
    pub lambda: Arc<Lambda>,
    pub reply: ReplyTo,
    pub t: Instant,
}

/// Bytes to send and the continuation that gets the reply.
type ExtReq = (Vec<u8>, Cont);

pub struct ExtIo {
    conns: Mutex<HashMap<SocketAddr, Sender<ExtReq>>>,
}

impl Default for ExtIo {
    fn default() -> ExtIo {
        ExtIo::new()
    }
}

impl ExtIo {
    pub fn new() -> ExtIo {
        ExtIo {
            conns: Mutex::new(HashMap::new()),
        }
    }
}

struct Pending {
    q: std::collections::VecDeque<Cont>,
    dead: bool,
}

impl ExtIo {
    pub(super) fn submit(
        &self,
        srv: &Server,
        addr: SocketAddr,
        bytes: Vec<u8>,
        cont: Cont,
        _scratch: &mut Vec<u8>,
    ) {
        let _ = srv;
        let mut conns = self.conns.lock().unwrap();
        let tx = conns.entry(addr).or_insert_with(|| {
            let (tx, rx) = mpsc::channel();
            let srv_ptr = SrvRef::get();
            std::thread::spawn(move || ext_writer(srv_ptr, addr, rx));
            tx
        });
        if let Err(mpsc::SendError((_, cont))) = tx.send((bytes, cont)) {
            drop(conns);
            fail_cont(srv, cont, "external I/O thread is gone");
        }
    }
}

/// The server, reachable from the external I/O threads (set once at start).
pub struct SrvRef;
static SERVER: std::sync::OnceLock<Arc<Server>> = std::sync::OnceLock::new();
impl SrvRef {
    pub fn set(s: Arc<Server>) {
        let _ = SERVER.set(s);
    }
    fn get() -> Arc<Server> {
        SERVER.get().expect("server registered").clone()
    }
}

fn fail_cont(srv: &Server, c: Cont, msg: &str) {
    inc(&c.lambda.stats.external_errors);
    let mut scratch = Vec::new();
    srv.reply_simple(
        &c.reply,
        c.lambda.id,
        EXTERNAL_ERROR,
        msg.as_bytes(),
        &mut scratch,
    );
}

fn ext_writer(srv: Arc<Server>, addr: SocketAddr, rx: Receiver<ExtReq>) {
    let mut conn: Option<(BufWriter<TcpStream>, Arc<Mutex<Pending>>)> = None;
    while let Ok(first) = rx.recv() {
        let mut item = Some(first);
        while let Some((bytes, cont)) = item.take() {
            if conn.as_ref().is_none_or(|(_, p)| p.lock().unwrap().dead) {
                conn = match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        let pending = Arc::new(Mutex::new(Pending {
                            q: Default::default(),
                            dead: false,
                        }));
                        match s.try_clone() {
                            Ok(rs) => {
                                let (srv2, p2) = (srv.clone(), pending.clone());
                                std::thread::spawn(move || ext_reader(srv2, rs, p2));
                                Some((BufWriter::with_capacity(1 << 16, s), pending))
                            }
                            Err(_) => None,
                        }
                    }
                    Err(_) => None,
                };
            }
            match &mut conn {
                None => fail_cont(&srv, cont, &format!("cannot connect to external {addr}")),
                Some((w, pending)) => {
                    {
                        let mut p = pending.lock().unwrap();
                        if p.dead {
                            drop(p);
                            fail_cont(&srv, cont, "external connection closed");
                            item = rx.try_recv().ok();
                            continue;
                        }
                        p.q.push_back(cont);
                    }
                    if w.write_all(&bytes).is_err() {
                        let _ = w.get_ref().shutdown(std::net::Shutdown::Both);
                    }
                }
            }
            item = rx.try_recv().ok();
        }
        if let Some((w, _)) = &mut conn {
            if w.flush().is_err() {
                let _ = w.get_ref().shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

fn ext_reader(srv: Arc<Server>, mut s: TcpStream, pending: Arc<Mutex<Pending>>) {
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    let why = loop {
        match s.read(&mut chunk) {
            Ok(0) => break "external connection closed",
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                let mut start = 0;
                while let Some(len) = lambda::memcached_reply_len(&buf[start..]) {
                    let c = pending.lock().unwrap().q.pop_front();
                    if let Some(c) = c {
                        let job = Job {
                            lambda: c.lambda,
                            kind: JobKind::Resume(buf[start..start + len].to_vec()),
                            reply: c.reply,
                        };
                        let _ = srv.sched.push(job, true);
                    }
                    start += len;
                }
                buf.drain(..start);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                let p = pending.lock().unwrap();
                if p.q
                    .front()
                    .is_some_and(|c| c.t.elapsed() > EXTERNAL_TIMEOUT)
                {
                    break "external call timed out";
                }
            }
            Err(_) => break "external connection failed",
        }
    };
    let _ = s.shutdown(std::net::Shutdown::Both);
    let drained: Vec<Cont> = {
        let mut p = pending.lock().unwrap();
        p.dead = true;
        p.q.drain(..).collect()
    };
    for c in drained {
        fail_cont(&srv, c, why);
    }
}
