"""Multipart uploads for the ObjectStore.

An upload is a directory ``uploads/<upload_id>/`` holding ``upload.json`` (bucket, key,
content type, metadata) and one durable file per part, ``part-00001`` ..., in the object file
format (objectfile.py). Everything is on disk, so uploads survive a restart. Completing copies
the chosen parts (copy_file_range where the kernel can) into one new object, written like any
other; only then is the upload directory removed.
"""

from __future__ import annotations

import itertools
import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from nearfaas.node.objectfile import (
    AtomicObjectFile,
    CorruptObjectFile,
    data_offset_for,
    fsync_dir,
    read_header,
    remove_tree_atomically,
)
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import (
    validate_bucket_name,
    validate_header_value,
    validate_key,
    validate_metadata,
    validate_part_number,
    validate_upload_id,
)

if TYPE_CHECKING:
    from nearfaas.node.objectstore import ObjectStore


def normalize_etag(etag: str) -> str:
    return etag.strip().strip('"').strip().lower()


class PartWriter:
    """Streams one part into tmp/; commit() installs it in the upload directory."""

    def __init__(self, uploads: MultipartUploads, upload_id: str, part_number: int):
        self._uploads = uploads
        self.upload_id, self.part_number = upload_id, part_number
        self._file = AtomicObjectFile(uploads.store.tmp_dir, data_offset_for({"upload_id": upload_id}))
        self._md5 = hashlib.md5()
        self._done = False

    @property
    def size(self) -> int:
        return self._file.size

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if self._done:
            raise RuntimeError("this part writer was already committed or aborted")
        limit = self._uploads.store.max_object_size
        if self._file.size + len(chunk) > limit:
            self.abort()
            raise S3Error("EntityTooLarge", f"A part may not exceed {limit} bytes.")
        self._md5.update(chunk)
        self._file.write(chunk)

    def commit(self, expected_md5: bytes | None = None) -> str:
        """Make the part durable; returns its ETag (MD5 hex). BadDigest on a Content-MD5 mismatch."""
        if self._done:
            raise RuntimeError("this part writer was already committed or aborted")
        try:
            digest = self._md5.digest()
            if expected_md5 is not None and expected_md5 != digest:
                raise S3Error(
                    "BadDigest",
                    f"The Content-MD5 you specified ({expected_md5.hex()}) does not match the MD5 "
                    f"of part {self.part_number} as received ({digest.hex()}).",
                )
            fields = {"kind": "part", "upload_id": self.upload_id, "part_number": self.part_number,
                      "size": self._file.size, "etag": digest.hex(), "last_modified": time.time()}
            self._file.finish(fields)
            self._uploads._install_part(self.upload_id, self.part_number, self._file)
        except BaseException:
            self.abort()
            raise
        self._done = True
        return digest.hex()

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._file.discard()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.abort()


class MultipartUploads:
    def __init__(self, store: ObjectStore, uploads_dir: Path, *, min_part_size: int):
        self.store = store
        self.dir = uploads_dir
        self.min_part_size = min_part_size
        # Orders upload creation, part installation and removal (never the store's index lock).
        self._lock = threading.Lock()
        self._drop_incomplete_creations()

    def _drop_incomplete_creations(self) -> None:
        # upload.json is the commit point of a create; a directory without it is debris.
        for entry in self.dir.iterdir():
            if entry.is_dir() and not (entry / "upload.json").exists():
                remove_tree_atomically(entry, self.store.tmp_dir)

    def create(self, bucket: str, key: str, *, content_type: str | None = None,
               metadata: dict | None = None, upload_id: str | None = None) -> str:
        """Start an upload. A caller-supplied id (the gateway gives every replica the same one)
        is idempotent for the same bucket and key."""
        validate_bucket_name(bucket)
        validate_key(key)
        metadata = validate_metadata(metadata)
        if content_type:
            validate_header_value("Content-Type", content_type)
        if upload_id is None:
            upload_id = uuid.uuid4().hex
        else:
            validate_upload_id(upload_id)
        self.store.head_bucket(bucket)
        record = {"upload_id": upload_id, "bucket": bucket, "key": key, "created": time.time(),
                  "content_type": content_type, "metadata": metadata}
        with self._lock:
            existing = self._read_record(upload_id)
            if existing is not None:
                if existing["bucket"] == bucket and existing["key"] == key:
                    return upload_id
                raise S3Error(
                    "InvalidArgument",
                    f"The upload id {upload_id!r} is already in use for another object; pick a new one.",
                )
            staging = self.store.tmp_dir / f"{uuid.uuid4().hex}.upload"
            os.mkdir(staging)
            fd = os.open(staging / "upload.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogateescape"))
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(staging)
            os.rename(staging, self.dir / upload_id)
            fsync_dir(self.dir)
        return upload_id

    def open_part_writer(self, bucket: str, key: str, upload_id: str, part_number: int) -> PartWriter:
        validate_part_number(part_number)
        self._require(bucket, key, upload_id)
        return PartWriter(self, upload_id, part_number)

    def _install_part(self, upload_id: str, part_number: int, file: AtomicObjectFile) -> None:
        updir = self.dir / upload_id
        with self._lock:
            if not (updir / "upload.json").exists():
                raise _no_such_upload(upload_id)
            file.install(updir / f"part-{part_number:05d}")
            self.store.counters.add(bytes_in=file.size)
        try:
            fsync_dir(updir)
        except FileNotFoundError:  # aborted meanwhile: the part went with the upload
            pass

    def complete(self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]) -> ObjectInfo:
        """Join the listed parts into one object with ETag md5(md5_1 || ... || md5_n)-n."""
        record = self._require(bucket, key, upload_id)
        if not parts:
            raise S3Error("MalformedXML", "CompleteMultipartUpload must list at least one part.")
        numbers = [number for number, _ in parts]
        for number in numbers:
            validate_part_number(number)
        if any(b <= a for a, b in itertools.pairwise(numbers)):
            raise S3Error("InvalidPartOrder", f"Parts must be listed in ascending order without repeats; got {numbers}.")
        # Open every part before copying: a concurrent abort then cannot pull one from under us.
        opened: list[tuple[int, int, int]] = []  # (fd, data_offset, size)
        digests: list[bytes] = []
        try:
            for number, etag in parts:  # every listed part must exist and match first
                fd, data_offset, fields = self._open_part(upload_id, number)
                opened.append((fd, data_offset, fields["size"]))
                if normalize_etag(etag) != fields["etag"]:
                    raise S3Error(
                        "InvalidPart",
                        f"Part {number} has ETag \"{fields['etag']}\", not {etag!r}; list the ETags "
                        "that UploadPart returned.",
                    )
                digests.append(bytes.fromhex(fields["etag"]))
            for (number, _), (_, _, size) in zip(parts[:-1], opened[:-1], strict=True):
                if size < self.min_part_size:
                    raise S3Error(
                        "EntityTooSmall",
                        f"Part {number} is {size} bytes; every part but the last must be "
                        f"at least {self.min_part_size} bytes.",
                    )
            total = sum(size for _, _, size in opened)
            if total > self.store.max_object_size:
                raise S3Error("EntityTooLarge", f"The parts add up to {total} bytes; the maximum object "
                              f"size is {self.store.max_object_size}.")
            etag = f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(parts)}"
            with self.store.open_writer(bucket, key, content_type=record.get("content_type"),
                                        metadata=record.get("metadata"), compute_md5=False) as writer:
                for fd, data_offset, size in opened:
                    writer.copy_from(fd, data_offset, size)
                info = writer.commit(etag=etag)
        finally:
            for fd, _, _ in opened:
                os.close(fd)
        remove_tree_atomically(self.dir / upload_id, self.store.tmp_dir, self._lock)
        return info

    def abort(self, bucket: str, key: str, upload_id: str) -> None:
        self._require(bucket, key, upload_id)
        remove_tree_atomically(self.dir / upload_id, self.store.tmp_dir, self._lock)

    def abort_all_in_bucket(self, bucket: str) -> None:
        for entry in list(self.dir.iterdir()):
            record = self._read_record(entry.name)
            if record is not None and record.get("bucket") == bucket:
                remove_tree_atomically(entry, self.store.tmp_dir, self._lock)

    def _read_record(self, upload_id: str) -> dict | None:
        try:
            return json.loads((self.dir / upload_id / "upload.json").read_bytes().decode("utf-8", "surrogateescape"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None

    def _require(self, bucket: str, key: str, upload_id: str) -> dict:
        validate_bucket_name(bucket)
        validate_key(key)
        validate_upload_id(upload_id)
        record = self._read_record(upload_id)
        if record is None or record.get("bucket") != bucket or record.get("key") != key:
            self.store.head_bucket(bucket)  # NoSuchBucket is the more useful answer if it applies
            raise _no_such_upload(upload_id)
        return record

    def _open_part(self, upload_id: str, number: int) -> tuple[int, int, dict]:
        path = self.dir / upload_id / f"part-{number:05d}"
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            raise S3Error("InvalidPart", f"Part {number} of upload {upload_id} was never uploaded.") from None
        try:
            data_offset, fields = read_header(fd)
        except CorruptObjectFile as exc:
            os.close(fd)
            raise S3Error("InvalidPart", f"Part {number} is unreadable ({exc}); upload it again.") from None
        return fd, data_offset, fields


def _no_such_upload(upload_id: str) -> S3Error:
    return S3Error(
        "NoSuchUpload",
        f"The multipart upload {upload_id!r} does not exist for this key; it may have been aborted "
        "or completed.",
        resource=upload_id,
    )
