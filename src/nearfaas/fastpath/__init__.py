"""nearfaas's fast path: λ-NIC's Match+Lambda in software (docs/fastpath.md).

The executor is a Rust binary (`fastpath/`, `nearfaas-fastpath`); this package holds its Python
side: the wire format and clients (`client`), starting and controlling it (`executor`), the
control port's challenge-response (`auth`), and the bare-metal baselines it is measured against
(`baselines`)."""

from nearfaas.fastpath.client import (
    STATUS,
    MemfdClient,
    TcpClient,
    UdpClient,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    memfd_call,
    status_name,
)

__all__ = ["STATUS", "MemfdClient", "TcpClient", "UdpClient", "decode_reply", "decode_request", "encode_reply", "encode_request",
           "memfd_call", "status_name"]
