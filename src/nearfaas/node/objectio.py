"""Handles on one object of a node's store: a writer that streams a new object into a temp file
and commits it atomically and durably (objectfile.py), and a consistent reader."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nearfaas.node.objectfile import AtomicObjectFile, data_offset_for, header_from_info
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error

if TYPE_CHECKING:
    from nearfaas.node.objectstore import ObjectStore, StoreCounters


class ObjectWriter:
    """Streams one object into a temp file; commit() makes it visible atomically and durably.

    Use as a context manager (or call abort()) so that a failure leaves nothing behind.
    """

    def __init__(self, store: ObjectStore, bucket: str, key: str, content_type: str, metadata: dict,
                 *, compute_md5: bool = True, version: str = "", headers: dict | None = None):
        self._store = store
        self.bucket, self.key, self.version = bucket, key, version
        # Written while the bucket's versioning was Enabled (the gateway says): its S3 version id
        # is its version, and the write it replaces is kept as a noncurrent version (versions.py).
        self.versioned = False
        # Stored system headers; the checksums among them may be set until commit (s3/checksums.py).
        self.content_type, self.metadata, self.headers = content_type, metadata, dict(headers or {})
        sizing = {"key": key, "content_type": content_type, "metadata": metadata, "headers": self.headers}
        self._file = AtomicObjectFile(store.tmp_dir, data_offset_for(sizing))
        self._md5 = hashlib.md5() if compute_md5 else None
        self._done = False

    @property
    def size(self) -> int:
        return self._file.size

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        self._check_open()
        if self._file.size + len(chunk) > self._store.max_object_size:
            self.abort()
            raise S3Error(
                "EntityTooLarge",
                f"The object exceeds the maximum object size of {self._store.max_object_size} bytes.",
                resource=self.key,
            )
        self._reserve(len(chunk))
        if self._md5 is not None:
            self._md5.update(chunk)
        self._file.write(chunk)

    def _reserve(self, size: int) -> None:
        try:
            self._store.reserve(size)
        except S3Error:
            self.abort()
            raise

    def copy_from(self, src_fd: int, src_offset: int, count: int) -> None:
        self._check_open()
        self._reserve(count)
        self._file.copy_from(src_fd, src_offset, count)

    def commit(self, expected_md5: bytes | None = None, *, etag: str | None = None,
               last_modified: float | None = None) -> ObjectInfo:
        """Make the object durable and visible. `expected_md5` (raw 16 bytes, from Content-MD5)
        is checked first: a mismatch discards the upload and raises BadDigest. `etag` overrides
        the MD5 ETag (multipart objects). A write whose version is older than what the key
        holds is a no-op (last-writer-wins); it still returns the info it would have stored."""
        self._check_open()
        try:
            digest = self._md5.digest() if self._md5 is not None else None
            if expected_md5 is not None and digest is not None and expected_md5 != digest:
                raise S3Error(
                    "BadDigest",
                    f"The Content-MD5 you specified ({expected_md5.hex()}) does not match the MD5 "
                    f"of the {self.size} bytes received ({digest.hex()}).",
                    resource=self.key,
                )
            if etag is None:
                assert digest is not None, "an ETag is needed when MD5 is not computed"
                etag = digest.hex()
            version = self.version or self._store.clock.now()
            info = ObjectInfo(
                bucket=self.bucket, key=self.key, size=self._file.size, etag=etag,
                last_modified=last_modified or time.time(), content_type=self.content_type, metadata=self.metadata,
                version=version, headers=dict(self.headers), version_id=version if self.versioned else "",
            )
            self._file.finish(header_from_info(info))
            self._store._install(info, self._file)
        except BaseException:
            self.abort()
            raise
        self._done = True
        return info

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._file.discard()

    def _check_open(self) -> None:
        if self._done:
            raise RuntimeError("this object writer was already committed or aborted")

    def __enter__(self) -> ObjectWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.abort()


class OpenObject:
    """A consistent read handle: the header and data come from the same inode, even if the key
    is overwritten or deleted while it is read."""

    def __init__(self, fd: int, path: Path, data_offset: int, info: ObjectInfo, counters: StoreCounters):
        self.fd, self.path, self.data_offset, self.info = fd, path, data_offset, info
        self._counters = counters

    def read(self, start: int, length: int) -> bytes:
        """Up to `length` bytes from object offset `start`."""
        length = max(0, min(length, self.info.size - start))
        data = os.pread(self.fd, length, self.data_offset + start) if length else b""
        self._counters.add(bytes_out=len(data))
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenObject:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
