"""Reading an S3 request body as a stream of chunks, with every integrity check done before
the stream ends.

The backend commits an object only after its body iterator is exhausted, so all checks that
need the whole body (length, x-amz-content-sha256, x-amz-checksum-*) run just before the last
StopAsyncIteration and raise instead: a bad body never becomes an object, and no body is ever
held in memory whole.

Framing: plain bodies (Content-Length or chunked transfer encoding) and ``aws-chunked``
bodies (``Content-Encoding: aws-chunked`` or ``x-amz-content-sha256: STREAMING-*``), whose
trailers may carry checksums. When the request was verified with a signed streaming payload
(``signing``, from ``AuthContext.streaming``), every chunk's ``chunk-signature`` and the trailer
signature are checked as each chunk ends (``s3/sigv4_streaming.py``); a chunk's data is hashed
as it streams, never held whole. Otherwise (auth off, anonymous, unsigned payload) chunk
signatures are stripped unread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import http_exceptions

from nearfaas.s3.checksums import CHECKSUM_PREFIX, KINDS
from nearfaas.s3.checksums import Checksum as _Checksum
from nearfaas.s3.errors import S3Error
from nearfaas.s3.sigv4_streaming import EMPTY_SHA256, StreamingSeed

READ_CHUNK = 256 * 1024
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
# int(x, 16) alone would also take "0x10", "-1" or "1_0"; a chunk size is plain hex digits.
_HEX_SIZE = re.compile(rb"^[0-9a-fA-F]{1,16}$")
_MAX_CHUNK_HEADER = 4096
_MAX_TRAILERS = 16
# Every flexible checksum S3 has is verified (s3/checksums.py).
_CHECKSUMS = {CHECKSUM_PREFIX + kind: kind for kind in KINDS}
_READ_ERRORS = (
    ConnectionError,
    asyncio.IncompleteReadError,
    aiohttp.ClientPayloadError,
    http_exceptions.HttpProcessingError,
)


def decode_content_md5(value: str | None) -> bytes | None:
    """The raw 16-byte digest of a Content-MD5 header; InvalidDigest unless it is exactly that."""
    if value is None:
        return None
    try:
        digest = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        digest = b""
    if len(digest) != 16:
        raise S3Error("InvalidDigest", f"The Content-MD5 {value!r} is not the base64 of a 16-byte MD5 digest.")
    return digest


def is_aws_chunked(headers) -> bool:
    """Framed as aws-chunked: a STREAMING-* payload hash says so, or Content-Encoding does.
    ``Content-Encoding: gzip, aws-chunked`` on a body signed with its own hex SHA-256, with no
    trailer and no decoded length, is a plain body (the hash is checked against the bytes, so it
    cannot be framing taken for data)."""
    payload_hash = headers.get("x-amz-content-sha256") or ""
    if payload_hash.startswith("STREAMING-"):
        return True
    encodings = [e.strip().lower() for e in headers.get("content-encoding", "").split(",")]
    if "aws-chunked" not in encodings:
        return False
    # Plain only when nothing could go unchecked: the body's own hex hash (so framing bytes stored
    # as data would fail it) and no trailer announced (a trailer's checksum is read only from
    # framing). Otherwise framed, and without its decoded length refused (411), as before.
    plain = _HEX64.match(payload_hash) and not headers.get("x-amz-trailer") and headers.get("x-amz-decoded-content-length") is None
    return not plain


# A body that stops arriving holds a descriptor, a temp file on every replica and a slot of the
# gateway's; S3 gives up on a silent client after about 20 s, and so do we (between two reads).
BODY_PROGRESS_TIMEOUT_S = 20.0


class _ProgressGuard:
    """The request stream, with a deadline on every read: a stalled body is a 400 RequestTimeout
    (what S3 answers), and the caller's clean-up removes whatever it had written."""

    def __init__(self, stream: aiohttp.StreamReader, timeout: float):
        self._stream, self._timeout = stream, timeout

    async def _guarded(self, read):
        try:
            async with asyncio.timeout(self._timeout):
                return await read
        except TimeoutError:
            raise S3Error("RequestTimeout", f"Your socket connection to the server was not read from or written to within the "
                          f"timeout period ({self._timeout:g} s without a byte of the body); idle connections are closed.") from None

    def read(self, n: int):
        return self._guarded(self._stream.read(n))

    def readexactly(self, n: int):
        return self._guarded(self._stream.readexactly(n))

    def readuntil(self, separator: bytes, max_size: int):
        return self._guarded(self._stream.readuntil(separator, max_size=max_size))

    def at_eof(self) -> bool:
        return self._stream.at_eof()


class RequestBody:
    """One request's body. `declared_length` is the length the client promised (decoded
    length for aws-chunked), or None for a chunked-transfer body of unknown length."""

    def __init__(self, stream: aiohttp.StreamReader, headers, *, max_body: int, require_length: bool = True,
                 signing: StreamingSeed | None = None, progress_timeout: float | None = None):
        self._stream = _ProgressGuard(stream, progress_timeout or BODY_PROGRESS_TIMEOUT_S)
        self._signing = signing
        self._require_length = require_length
        self._headers = headers
        self.max_body = max_body
        # A signed streaming payload is aws-chunked whatever Content-Encoding says.
        self.aws_chunked = signing is not None or is_aws_chunked(headers)
        self.declared_length = self._declared_length()
        if self.declared_length is not None and self.declared_length > max_body:
            raise S3Error("EntityTooLarge", f"The body of {self.declared_length} bytes exceeds the maximum of "
                          f"{max_body} bytes; use a multipart upload for large objects.")
        payload_hash = headers.get("x-amz-content-sha256") or ""
        # A hex payload hash covers the bytes on the wire; for aws-chunked it is a STREAMING-* token.
        self._expected_sha256 = payload_hash.lower() if _HEX64.match(payload_hash) else None
        self._checksums: dict[str, tuple[_Checksum, bytes | None]] = {}
        # Once the body has ended: the checksums verified, x-amz-checksum-<kind> -> base64.
        self.verified: dict[str, str] = {}
        for header, kind in _CHECKSUMS.items():
            value = headers.get(header)
            if value is not None:
                self._checksums[header] = (_Checksum(kind), _decode_checksum(header, value))
        if self.aws_chunked:
            for name in (headers.get("x-amz-trailer") or "").split(","):
                name = name.strip().lower()
                if name in _CHECKSUMS and name not in self._checksums:
                    self._checksums[name] = (_Checksum(_CHECKSUMS[name]), None)  # value comes in the trailer

    def _declared_length(self) -> int | None:
        if self.aws_chunked:
            value = self._headers.get("x-amz-decoded-content-length")
            if value is None:
                raise S3Error("MissingContentLength", "An aws-chunked body needs the x-amz-decoded-content-length header.")
        else:
            value = self._headers.get("content-length")
            if value is None:
                if "chunked" in self._headers.get("transfer-encoding", "").lower():
                    return None
                if not self._require_length:
                    return 0  # e.g. an XML request sent with no body and no Content-Length
                raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.")
        if not value.strip().isdigit():
            raise S3Error("InvalidArgument", f"The content length {value!r} is not a non-negative integer.")
        return int(value)

    async def chunks(self, decode=None) -> AsyncIterator[bytes]:
        """The decoded body; raises S3Error at the end if any check fails. ``decode`` turns the
        wire bytes into the content (a compressed transfer, bitar/transfer.py): lengths and the
        payload hash are of the wire bytes, x-amz-checksum-* and Content-MD5 of the content."""
        trailers: dict[str, str] = {}
        wire = self._wire(trailers)
        async for item in (decode(wire) if decode is not None else wire):
            for checksum, _ in self._checksums.values():
                checksum.update(item)
            yield item
        for name, (checksum, expected) in self._checksums.items():
            if expected is None:
                value = trailers.get(name)
                if value is None:
                    raise S3Error("InvalidRequest", f"The trailer {name} announced in x-amz-trailer never came.")
                expected = _decode_checksum(name, value)
            if checksum.digest() != expected:
                raise S3Error("BadDigest", f"The {checksum.kind.upper()} you specified in {name} did not match the "
                              f"checksum of the body received ({base64.b64encode(checksum.digest()).decode()}).")
            self.verified[name] = checksum.b64()

    def verified_kinds(self) -> set[str]:
        """The x-amz-checksum-<kind> headers this body verifies (a header's or a trailer's value)."""
        return set(self._checksums)

    async def _wire(self, trailers: dict) -> AsyncIterator[bytes]:
        """The body's bytes as sent (aws-chunked framing removed), length and hash checked."""
        wire_hash = hashlib.sha256() if self._expected_sha256 else None
        source = self._aws_chunked_data(wire_hash) if self.aws_chunked else self._plain_data(wire_hash)
        received = 0
        async for item in source:
            if isinstance(item, dict):
                trailers.update(item)
                continue
            received += len(item)
            if received > self.max_body:
                raise S3Error("EntityTooLarge", f"The body exceeds the maximum of {self.max_body} bytes.")
            if self.declared_length is not None and received > self.declared_length:
                raise S3Error("InvalidRequest", f"The body is longer than its declared {self.declared_length} bytes.")
            yield item
        if self.declared_length is not None and received != self.declared_length:
            raise S3Error("IncompleteBody", f"Received {received} of the {self.declared_length} bytes declared.")
        if wire_hash is not None and wire_hash.hexdigest() != self._expected_sha256:
            raise S3Error("XAmzContentSHA256Mismatch", "The x-amz-content-sha256 you sent does not match the "
                          f"SHA-256 of the body ({wire_hash.hexdigest()}).")

    async def read_all(self, limit: int) -> bytes:
        """The whole (small) body, for XML requests; EntityTooLarge/MalformedXML beyond `limit`."""
        parts = []
        size = 0
        async for chunk in self.chunks():
            size += len(chunk)
            if size > limit:
                raise S3Error("MalformedXML", f"The request body exceeds {limit} bytes; this request carries "
                              "a small XML document.")
            parts.append(chunk)
        return b"".join(parts)

    async def _plain_data(self, wire_hash) -> AsyncIterator[bytes]:
        try:
            while True:
                data = await self._stream.read(READ_CHUNK)
                if not data:
                    return
                if wire_hash is not None:
                    wire_hash.update(data)
                yield data
        except _READ_ERRORS as exc:
            raise S3Error("IncompleteBody", f"The connection ended before the body was complete ({exc!r}).") from None

    async def _aws_chunked_data(self, wire_hash) -> AsyncIterator[bytes | dict]:
        # A chunk's data is yielded before its signature can be checked (it follows the data),
        # which is safe: nothing is committed until this generator has ended without raising.
        chain = self._signing.chain() if self._signing is not None else None
        try:
            while True:
                line = await self._read_line(wire_hash)
                size_text, _, extensions = line.partition(b";")
                if not _HEX_SIZE.match(size_text.strip()):
                    raise _bad_chunking(f"bad chunk header {line[:40]!r}")
                size = int(size_text, 16)
                if size == 0:  # the final chunk, signed too: without it a body could be cut short
                    if chain is not None:
                        chain.check_chunk(_chunk_signature(extensions), EMPTY_SHA256, 0)
                    trailers = await self._read_trailers(wire_hash)
                    if chain is not None:
                        chain.check_trailers(trailers)
                    yield trailers
                    return
                data_hash = hashlib.sha256() if chain is not None else None
                remaining = size
                while remaining:
                    data = await self._stream.readexactly(min(remaining, READ_CHUNK))
                    if wire_hash is not None:
                        wire_hash.update(data)
                    if data_hash is not None:
                        data_hash.update(data)
                    remaining -= len(data)
                    yield data
                crlf = await self._stream.readexactly(2)
                if wire_hash is not None:
                    wire_hash.update(crlf)
                if crlf != b"\r\n":
                    raise _bad_chunking("chunk data not followed by CRLF")
                if chain is not None:
                    chain.check_chunk(_chunk_signature(extensions), data_hash.hexdigest(), size)
        except _READ_ERRORS as exc:
            raise S3Error("IncompleteBody", f"The aws-chunked body ended early ({exc!r}).") from None

    async def _read_line(self, wire_hash) -> bytes:
        try:
            line = await self._stream.readuntil(b"\n", max_size=_MAX_CHUNK_HEADER)
        except http_exceptions.LineTooLong:
            raise _bad_chunking("chunk header or trailer line too long") from None
        if wire_hash is not None:
            wire_hash.update(line)
        if not line.endswith(b"\n"):
            raise asyncio.IncompleteReadError(line, None)
        return line.rstrip(b"\r\n")

    async def _read_trailers(self, wire_hash) -> dict[str, str]:
        trailers: dict[str, str] = {}
        for _ in range(_MAX_TRAILERS + 1):
            if self._stream.at_eof():
                return trailers  # some clients end right after the last chunk
            line = await self._read_line(wire_hash)
            if not line:
                return trailers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise _bad_chunking(f"bad trailer line {line[:40]!r}")
            name = name.strip().lower()
            if name in trailers:  # which copy would count is ambiguous, and only one was signed
                raise _bad_chunking(f"trailer {name} sent twice")
            trailers[name] = value.strip()
        raise _bad_chunking("too many trailers")


def _chunk_signature(extensions: bytes) -> str | None:
    """The chunk-signature=<hex> among a chunk header's extensions (after its size)."""
    for extension in extensions.split(b";"):
        name, _, value = extension.partition(b"=")
        if name.strip() == b"chunk-signature":
            return value.strip().decode("latin-1")
    return None


def _decode_checksum(header: str, value: str) -> bytes:
    try:
        return base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise S3Error("InvalidRequest", f"Value for {header} is not valid base64.") from None


def _bad_chunking(detail: str) -> S3Error:
    return S3Error("InvalidRequest", f"Malformed aws-chunked body: {detail}.")
