"""nearfaas's fast path: λ-NIC's Match+Lambda in software (docs/fastpath.md).

The executor is a Rust binary (`fastpath/`, `nearfaas-fastpath`); this package holds its Python
side: the wire format, one module for every speaker of it (`wire`: status codes, frame layouts,
packing), the clients (`client`), starting and controlling the executor (`executor`), the control
port's challenge-response (`auth`), and the bare-metal baselines it is measured against
(`baselines`). The gateway's side (`nearfaas.gateway.fastpath`) builds on this package; nothing
here imports the gateway."""

from nearfaas.fastpath.client import MemfdClient, TcpClient, UdpClient, memfd_call
from nearfaas.fastpath.wire import (
    STATUS,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    status_name,
)

__all__ = ["STATUS", "MemfdClient", "TcpClient", "UdpClient", "decode_reply", "decode_request", "encode_reply", "encode_request",
           "memfd_call", "status_name"]
