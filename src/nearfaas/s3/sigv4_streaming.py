"""The chunk-signature chain of a streaming SigV4 upload (``aws-chunked`` bodies).

A client that signs ``x-amz-content-sha256: STREAMING-AWS4-HMAC-SHA256-PAYLOAD`` does not hash
the body up front; instead every chunk carries a signature over its own data, chained to the
signature before it, and the chain starts at the request's own (seed) signature::

    <hex size>;chunk-signature=<sig>\\r\\n<data>\\r\\n ... 0;chunk-signature=<sig>\\r\\n\\r\\n

    sig(n) = hex HMAC-SHA256(signing key,
        "AWS4-HMAC-SHA256-PAYLOAD\\n<timestamp>\\n<scope>\\n<sig(n-1)>\\n<sha256("")>\\n<sha256(data n)>")

The final, empty chunk is signed too, so a body cannot be cut short or have chunks dropped,
reordered or swapped without breaking the chain. ``STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER``
adds trailing headers after the final chunk, signed by ``x-amz-trailer-signature``::

    sig(trailer) = hex HMAC-SHA256(signing key,
        "AWS4-HMAC-SHA256-TRAILER\\n<timestamp>\\n<scope>\\n<sig(final chunk)>\\n<sha256(canonical trailers)>")

where the canonical trailers are ``name:value\\n`` per trailer (lower-case names, sorted,
values trimmed, the signature itself left out). Reference: AWS's "Signature Calculations for
the Authorization Header: Transferring Payload in Multiple Chunks" (sigv4-streaming) and
"Signature calculations for trailing headers" (sigv4-streaming-trailers); the unit tests check
this module against the signatures AWS publishes there.

This module only does the arithmetic; ``s3/body.py`` parses the framing and calls
:class:`ChunkSignatureChain` as each chunk ends, and ``s3/sigv4.py`` makes the
:class:`StreamingSeed` once the request's own signature has been verified.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from nearfaas.s3.errors import S3Error

STREAMING_PAYLOAD = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_PAYLOAD_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
SIGNED_STREAMING = frozenset({STREAMING_PAYLOAD, STREAMING_PAYLOAD_TRAILER})
KNOWN_STREAMING = SIGNED_STREAMING | {STREAMING_UNSIGNED_TRAILER}
TRAILER_SIGNATURE = "x-amz-trailer-signature"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_CHUNK_ALGORITHM = "AWS4-HMAC-SHA256-PAYLOAD"
_TRAILER_ALGORITHM = "AWS4-HMAC-SHA256-TRAILER"


def signing_key(secret_key: str, date: str, region: str, service: str = "s3") -> bytes:
    """SigV4's derived key: HMAC chain over the date, region and service, then aws4_request."""
    key = hmac.new(f"AWS4{secret_key}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def canonical_trailers(trailers: dict[str, str]) -> bytes:
    """The bytes the trailer signature covers: ``name:value\\n`` per trailer, sorted by name."""
    lines = [f"{name.strip().lower()}:{value.strip()}\n" for name, value in trailers.items()
             if name.strip().lower() != TRAILER_SIGNATURE]
    return "".join(sorted(lines)).encode()


@dataclass(frozen=True)
class StreamingSeed:
    """What a verified streaming request hands its body: the key and scope that signed it and
    its own signature, the first link of the chunk chain. `trailer` is True for
    STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER (a signed trailer must follow the last chunk)."""

    key: bytes = field(repr=False)
    timestamp: str
    scope: str  # <yyyymmdd>/<region>/s3/aws4_request, as in the request's Credential
    signature: str
    trailer: bool = False

    def sign_chunk(self, previous: str, data_sha256: str) -> str:
        string_to_sign = "\n".join((_CHUNK_ALGORITHM, self.timestamp, self.scope, previous, EMPTY_SHA256, data_sha256))
        return hmac.new(self.key, string_to_sign.encode(), hashlib.sha256).hexdigest()

    def sign_trailer(self, previous: str, trailers: dict[str, str]) -> str:
        trailer_hash = hashlib.sha256(canonical_trailers(trailers)).hexdigest()
        string_to_sign = "\n".join((_TRAILER_ALGORITHM, self.timestamp, self.scope, previous, trailer_hash))
        return hmac.new(self.key, string_to_sign.encode(), hashlib.sha256).hexdigest()

    def chain(self) -> ChunkSignatureChain:
        return ChunkSignatureChain(self)


class ChunkSignatureChain:
    """Checks one body's chunk signatures in order; raises SignatureDoesNotMatch (403) at the
    first one that is missing or wrong. One chain per body: it remembers the previous link."""

    def __init__(self, seed: StreamingSeed):
        self.seed = seed
        self.previous = seed.signature
        self.chunks = 0
        self.offset = 0  # decoded bytes covered by the chunks checked so far
        self.finished = False

    def check_chunk(self, provided: str | None, data_sha256: str, size: int) -> None:
        """Check the chunk just read (`size` bytes hashing to `data_sha256`); size 0 is the last."""
        where = ("the final (empty) chunk" if size == 0 else
                 f"chunk {self.chunks + 1} (decoded bytes {self.offset}-{self.offset + size - 1})")
        if not provided:
            raise S3Error("SignatureDoesNotMatch", f"The streaming upload is signed ({self._mode}) but {where} has no "
                          "chunk-signature; every chunk, the last empty one included, must be signed.")
        expected = self.seed.sign_chunk(self.previous, data_sha256)
        if not hmac.compare_digest(expected.encode(), provided.encode()):
            raise S3Error("SignatureDoesNotMatch", f"The chunk-signature of {where} does not match its data: the body "
                          "is not the one that was signed. Nothing was stored.")
        self.previous = provided
        self.chunks += 1
        self.offset += size
        self.finished = size == 0

    def check_trailers(self, trailers: dict[str, str]) -> None:
        """After the final chunk: the trailer signature when the mode has one, else no trailers."""
        if not self.seed.trailer:
            if trailers:
                raise S3Error("InvalidRequest", f"Trailing headers ({', '.join(sorted(trailers))}) are not signed "
                              f"with {STREAMING_PAYLOAD}; sign them with {STREAMING_PAYLOAD_TRAILER} instead.")
            return
        provided = trailers.get(TRAILER_SIGNATURE)
        if not provided:
            raise S3Error("SignatureDoesNotMatch", f"The upload is signed with {STREAMING_PAYLOAD_TRAILER} but its "
                          f"trailer carries no {TRAILER_SIGNATURE}.")
        expected = self.seed.sign_trailer(self.previous, trailers)
        if not hmac.compare_digest(expected.encode(), provided.encode()):
            raise S3Error("SignatureDoesNotMatch", f"The {TRAILER_SIGNATURE} does not match the trailing headers: they "
                          "are not the ones that were signed. Nothing was stored.")

    @property
    def _mode(self) -> str:
        return STREAMING_PAYLOAD_TRAILER if self.seed.trailer else STREAMING_PAYLOAD
