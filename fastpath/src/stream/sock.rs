//! A stream connection's socket: TCP from anyone, or the gateway's private unix socket
//! (`--stream-unix`, mode 0600 in the state dir). The loop serves both alike; only TCP
//! connections count against a peer's share (`serve`), because on loopback a client is not one
//! IP (any process may bind 127.0.0.2, 127.0.0.3, ...: red team round 7 held every TCP slot
//! from two such addresses), so the gateway's calls come in on a socket no one else can open.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The peer a unix connection counts as (none: it is the gateway's, uncapped by peer).
pub const GATEWAY_PEER: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl Sock {
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.shutdown(how),
            Sock::Unix(s) => s.shutdown(how),
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.flush(),
            Sock::Unix(s) => s.flush(),
        }
    }
}

impl Source for Sock {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.register(r, t, i),
            Sock::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.reregister(r, t, i),
            Sock::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.deregister(r),
            Sock::Unix(s) => s.deregister(r),
        }
    }
}
