"""The on-disk format of one stored object, and the atomic, durable way it is written.

Every object (and every multipart part) is ONE file::

    offset  size  field
    0       8     magic b"NFOBJ\\r\\n\\x1a"
    8       2     format version (1), little-endian
    10      2     flags (0)
    12      4     data_offset: where the object's bytes start; a multiple of 4096
    16      4     length of the JSON header in bytes
    20      4     CRC-32 of the JSON header
    24      n     JSON header (UTF-8): kind, key, size, etag, content_type, metadata,
                  last_modified, version, headers (stored system headers and checksums;
                  may be absent) and versioned (true: written while the bucket's
                  versioning was Enabled, so its S3 version id is its version)
    24+n    ...   zero padding up to data_offset
    data_offset   the object's bytes, exactly `size` of them

``kind`` is "object", or "tombstone" for a deleted key: a tombstone is a header with size 0
that remembers the delete's version, so that an older write arriving late (a retry, a replica
catching up) cannot bring the key back (replication/version.py). Readers treat a tombstone as
a missing key (``live_fields``).

`data_offset` is 4096 (one page) for every object whose header fits in a page, which S3's
limits (1 KiB key, 2 KiB user metadata) make the normal case; it is page-aligned so that a
worker can mmap the data directly. Readers must take it from the header, never assume it.

A file is written under ``<root>/tmp/``, fsynced, renamed into place and its directory
fsynced. The rename is the commit point: a crash before it leaves only a temp file (removed at
start-up); a crash after it leaves the complete object. Nothing partial is ever visible.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import struct
import uuid
import zlib
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from nearfaas import atomic
from nearfaas.atomic import fsync_dir  # the store's modules import it from here
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import validate_bucket_name, validate_key

MAGIC = b"NFOBJ\r\n\x1a"
FORMAT_VERSION = 1
PAGE = 4096
DATA_OFFSET = PAGE  # the usual offset; see the module docstring
_PREFIX = struct.Struct("<8sHHIII")
# Room left in the header for the fields only known at commit (size, etag, timestamp, checksums).
_HEADER_SLACK = 400
COPY_CHUNK = 1 << 20


class CorruptObjectFile(Exception):
    """A file under objects/ or uploads/ that is not a complete object file."""


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bucket_dir(root: Path, bucket: str) -> Path:
    return root / "buckets" / bucket


def object_path(root: Path, bucket: str, key: str) -> Path:
    """The file of `key`: named by the SHA-256 of the key, so no key can leave the bucket."""
    digest = key_digest(key)
    return root / "buckets" / bucket / "objects" / digest[:2] / digest


# Objects are readable by the node's user only (issue 39 finding 5: a local user read another
# bucket's objects from 0644 files in 0755 folders). A function gets its objects as file
# descriptors the node opens for it (node/objectfds.py), never by path.
FILE_MODE, DIR_MODE = 0o600, 0o700


def make_dir_durable(path: Path) -> None:
    """mkdir `path` (and missing parents) so that the new entries survive a crash."""
    if path.is_dir():
        return
    make_dir_durable(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    fsync_dir(path.parent)


def make_subdir(path: Path) -> None:
    """Create ``path`` durably, but never its parents: if the bucket directory is gone (deleted
    meanwhile), leave it gone and let the caller report NoSuchBucket."""
    try:
        os.mkdir(path, DIR_MODE)
    except (FileExistsError, FileNotFoundError):
        return
    fsync_dir(path.parent)


def make_versions_dir(path: Path) -> None:
    """Create a key's ``versions/<h>`` directory (and ``versions/``) durably."""
    if path.is_dir():
        return
    make_subdir(path.parent)
    make_subdir(path)


def fsync_dir_unless_gone(path: Path) -> None:
    """fsync a directory that a concurrent bucket deletion may have removed: then nothing is left
    to make durable."""
    try:
        fsync_dir(path)
    except FileNotFoundError:
        pass


def remove_tree_atomically(path: Path, tmp_dir: Path, lock: AbstractContextManager | None = None) -> None:
    """Make `path` disappear in one step (rename into tmp/, under `lock` if given), then delete
    it at leisure. A crash midway leaves it in tmp/, which start-up empties."""
    graveyard = tmp_dir / f"{uuid.uuid4().hex}.deleted"
    try:
        with lock or nullcontext():
            atomic.move(path, graveyard)
    except FileNotFoundError:
        return
    fsync_dir(path.parent)
    shutil.rmtree(graveyard, ignore_errors=True)


def encode_header(fields: dict, data_offset: int) -> bytes:
    body = json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogateescape")
    header = _PREFIX.pack(MAGIC, FORMAT_VERSION, 0, data_offset, len(body), zlib.crc32(body)) + body
    if len(header) > data_offset:
        raise ValueError(f"object header of {len(header)} bytes does not fit in {data_offset}")
    return header + b"\0" * (data_offset - len(header))


def data_offset_for(fields: dict) -> int:
    """The page-aligned data offset for a header holding `fields` plus commit-time fields."""
    needed = _PREFIX.size + len(json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    needed += _HEADER_SLACK
    return max(DATA_OFFSET, -(-needed // PAGE) * PAGE)


def read_header(fd: int) -> tuple[int, dict]:
    """Return (data_offset, header fields) of the open object file `fd`."""
    head = os.pread(fd, PAGE, 0)
    if len(head) < _PREFIX.size:
        raise CorruptObjectFile("file shorter than the header prefix")
    magic, version, _flags, data_offset, json_len, crc = _PREFIX.unpack_from(head)
    if magic != MAGIC:
        raise CorruptObjectFile("bad magic")
    if version != FORMAT_VERSION:
        raise CorruptObjectFile(f"unknown format version {version}")
    if data_offset % PAGE or _PREFIX.size + json_len > data_offset:
        raise CorruptObjectFile("inconsistent header lengths")
    end = _PREFIX.size + json_len
    if end > len(head):
        head = os.pread(fd, end, 0)
    body = head[_PREFIX.size:end]
    if len(body) != json_len or zlib.crc32(body) != crc:
        raise CorruptObjectFile("header checksum mismatch")
    try:
        fields = json.loads(body.decode("utf-8", "surrogateescape"))
    except ValueError as exc:
        raise CorruptObjectFile(f"header is not JSON: {exc}") from None
    if not isinstance(fields, dict) or not isinstance(fields.get("size"), int):
        raise CorruptObjectFile("header lacks a size")
    if os.fstat(fd).st_size != data_offset + fields["size"]:
        raise CorruptObjectFile("file length does not match the size in its header")
    return data_offset, fields


def read_file_header(path: Path) -> dict:
    """The header fields of the object file at ``path`` (start-up scans)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_header(fd)[1]
    finally:
        os.close(fd)


def info_from_header(bucket: str, fields: dict) -> ObjectInfo:
    return ObjectInfo(
        bucket=bucket,
        key=fields["key"],
        size=fields["size"],
        etag=fields["etag"],
        last_modified=fields["last_modified"],
        content_type=fields.get("content_type") or "binary/octet-stream",
        metadata=dict(fields.get("metadata") or {}),
        version=str(fields.get("version") or ""),
        headers=dict(fields.get("headers") or {}),  # absent in files written before issue 22
        version_id=str(fields.get("version") or "") if fields.get("versioned") else "",
    )


def header_from_info(info: ObjectInfo) -> dict:
    return {
        "kind": "object",
        "key": info.key,
        "size": info.size,
        "etag": info.etag,
        "content_type": info.content_type,
        "metadata": info.metadata,
        "last_modified": info.last_modified,
        "version": info.version,
        **({"headers": info.headers} if info.headers else {}),
        **({"versioned": True} if is_versioned_id(info.version_id) else {}),
    }


def is_versioned_id(version_id: str) -> bool:
    """Whether an S3 version id names the write itself (not "null", not "" for none)."""
    return version_id not in ("", "null")


def tombstone_header(key: str, version: str, deleted_at: float, *, versioned: bool = False) -> dict:
    """A delete's record; ``versioned``: a delete marker made while versioning was Enabled."""
    return {"kind": "tombstone", "key": key, "size": 0, "etag": "", "last_modified": deleted_at, "version": version,
            **({"versioned": True} if versioned else {})}


def is_tombstone(fields: dict) -> bool:
    return fields.get("kind") == "tombstone"


def live_fields(fd: int, key: str) -> tuple[int, dict] | None:
    """(data_offset, header) of the open object file ``fd`` if it holds a live object named
    ``key``; None for a tombstone or another key (a SHA-256 collision, a file placed by hand)."""
    data_offset, fields = read_header(fd)
    if fields.get("key") != key or is_tombstone(fields):
        return None
    return data_offset, fields


def locate_object(root: str | Path, bucket: str, key: str) -> tuple[str, int, ObjectInfo]:
    """Find an object without an ObjectStore (for a worker process on the same node).

    Returns (path, data_offset, info): the object's bytes are ``info.size`` bytes at
    ``data_offset`` in ``path``, ready to mmap. Raises NoSuchBucket / NoSuchKey.
    """
    validate_bucket_name(bucket)
    validate_key(key)
    root = Path(root)
    path = object_path(root, bucket, key)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if not (bucket_dir(root, bucket) / ".bucket.json").exists():
            raise S3Error("NoSuchBucket", f"The bucket {bucket!r} does not exist.", resource=bucket) from None
        raise S3Error("NoSuchKey", f"The key {key!r} does not exist in bucket {bucket!r}.", resource=key) from None
    try:
        live = live_fields(fd, key)
    except CorruptObjectFile as exc:
        raise S3Error("InternalError", f"The stored object {key!r} is unreadable: {exc}.") from None
    finally:
        os.close(fd)
    if live is None:
        raise S3Error("NoSuchKey", f"The key {key!r} does not exist in bucket {bucket!r}.", resource=key)
    data_offset, fields = live
    return str(path), data_offset, info_from_header(bucket, fields)


class AtomicObjectFile:
    """A new object file being written in tmp/; it becomes visible only through install()."""

    def __init__(self, tmp_dir: Path, data_offset: int):
        self.data_offset = data_offset
        self.size = 0
        self.tmp_path = tmp_dir / f"{uuid.uuid4().hex}.tmp"
        self._fd: int | None = os.open(self.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        self._finished = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        assert self._fd is not None, "write after finish/discard"
        while view:
            written = os.pwrite(self._fd, view, self.data_offset + self.size)
            self.size += written
            view = view[written:]

    def copy_from(self, src_fd: int, src_offset: int, count: int) -> None:
        """Append `count` bytes of another file, in the kernel where it can (copy_file_range)."""
        assert self._fd is not None, "copy after finish/discard"
        while count > 0:
            dst = self.data_offset + self.size
            try:
                copied = os.copy_file_range(src_fd, self._fd, min(count, 1 << 30), src_offset, dst)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                copied = 0
            if copied == 0:  # unsupported here, or a short source: fall back to user space
                chunk = os.pread(src_fd, min(count, COPY_CHUNK), src_offset)
                if not chunk:
                    raise CorruptObjectFile("source file ended early")
                self.write(chunk)
                copied = len(chunk)
            else:
                self.size += copied
            src_offset += copied
            count -= copied

    def finish(self, header_fields: dict) -> None:
        """Write the header, fsync, close. After this only install() or discard() remain."""
        assert self._fd is not None and not self._finished
        os.pwrite(self._fd, encode_header(header_fields, self.data_offset), 0)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        self._finished = True

    def install(self, final_path: Path) -> None:
        """Atomically replace `final_path` with this file. The caller fsyncs the directory."""
        assert self._finished
        atomic.publish(self.tmp_path, final_path, durable=False)

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass
