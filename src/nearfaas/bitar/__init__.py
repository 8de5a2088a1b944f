"""Bitar: compression offload for (de)serialization (issue 19; the thesis's §5.2).

* ``codecs``: the DEFLATE engines — ISA-L, libdeflate, zlib (measured) and a modelled
  BlueField-2 engine — each turning a <= 64 KiB segment into one complete raw DEFLATE stream.
* ``pool``: pre-allocated op buffers, recycled after every op (the device's window).
* ``device``: a device = one engine + N worker threads, each with its own queue pair;
  synchronous and asynchronous (futures) compress/decompress.
* ``frame``: the segment table + concatenated raw DEFLATE streams Bitar writes; stock zlib
  (``wbits=-15``) reads the payload.
* ``arrow``: Arrow IPC with inner (per-buffer LZ4/Zstd) or outer (whole-buffer Bitar)
  compression.

    >>> from nearfaas.bitar import Device
    >>> with Device("zlib", threads=2) as dev:
    ...     bytes(dev.decompress(dev.compress(b"particles " * 10000))) == b"particles " * 10000
    True
"""

from nearfaas.bitar.codecs import ENGINES, MAX_SEGMENT, CodecError, EngineModel
from nearfaas.bitar.device import Device, Run
from nearfaas.bitar.frame import FrameError, inflate_concatenated, payload

__all__ = ["ENGINES", "MAX_SEGMENT", "CodecError", "Device", "EngineModel", "FrameError", "Run",
           "inflate_concatenated", "payload"]
