"""Arrow IPC serialization with compression: Arrow's own per-buffer ("inner") LZ4/Zstd, and
Bitar's whole-buffer ("outer") DEFLATE — the two approaches the thesis compares (§5.2.3).

* inner: ``pyarrow.ipc`` writes each column buffer compressed (LZ4 frame or Zstd), using
  ``threads`` CPU threads; reading decompresses per buffer.
* outer: the table is written as an uncompressed IPC stream, then the whole buffer goes through
  a Bitar device (segments over its queue pairs); reading inflates it, then opens the stream
  zero-copy.

Known caveats:
- Outer compression needs the whole IPC buffer before the first segment goes out (fine for a
  network transfer, which is what it is for; a random-access file wants inner compression).
"""

from __future__ import annotations

import pyarrow as pa

from nearfaas.bitar.device import Device

INNER_CODECS = ("lz4", "zstd")


def serialize(table: pa.Table, codec: str | None = None, threads: int = 1) -> pa.Buffer:
    """An IPC stream of ``table``; ``codec`` lz4/zstd compresses per buffer (inner)."""
    if codec not in (None, *INNER_CODECS):
        raise ValueError(f"inner codec must be one of {', '.join(INNER_CODECS)} or None, got {codec!r}")
    # threads > 1: Arrow's CPU pool (its size is the caller's to set, e.g. pa.set_cpu_count)
    opts = pa.ipc.IpcWriteOptions(compression=codec, use_threads=threads > 1)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return sink.getvalue()


def deserialize(buf, threads: int = 1) -> pa.Table:
    """Read an IPC stream (inner-compressed or not)."""
    opts = pa.ipc.IpcReadOptions(use_threads=threads > 1)
    return pa.ipc.open_stream(pa.py_buffer(buf) if not isinstance(buf, pa.Buffer) else buf, options=opts).read_all()


def serialize_outer(table: pa.Table, device: Device) -> bytearray:
    """Bitar's outer compression: an uncompressed IPC stream, then one Bitar frame of it."""
    return device.compress(serialize(table))


def deserialize_outer(frame, device: Device) -> pa.Table:
    return deserialize(pa.py_buffer(device.decompress(frame)))
