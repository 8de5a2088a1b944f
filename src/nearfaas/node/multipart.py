"""Multipart uploads for the ObjectStore.

An upload is a directory ``uploads/<upload_id>/`` holding ``upload.json`` (bucket, key,
content type, metadata) and one durable file per part, ``part-00001`` ..., in the object file
format (objectfile.py). Everything is on disk, so uploads survive a restart. Completing copies
the chosen parts (copy_file_range where the kernel can) into one new object, written like any
other; only then is the upload directory removed.

Uploads nobody completes or aborts (a client that died, a replica that was down when the
gateway completed the upload elsewhere) would hold their parts forever, so an upload older than
the node's expiry age (``nearfaas-node --multipart-expiry``, default 24 h, counted from its
creation as S3's AbortIncompleteMultipartUpload rule counts) is aborted by a periodic sweep
(:func:`sweep_expired_uploads`). At start-up, upload directories whose ``upload.json`` is
missing or unreadable, and uploads of a bucket that no longer exists, are removed. The bytes
reclaimed either way are counted in the store's counters.
"""

from __future__ import annotations

import asyncio
import itertools
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from nearfaas import atomic
from nearfaas.node.objectfile import (
    DIR_MODE,
    FILE_MODE,
    AtomicObjectFile,
    CorruptObjectFile,
    data_offset_for,
    fsync_dir,
    read_header,
    remove_tree_atomically,
)
from nearfaas.s3 import checksums
from nearfaas.s3.backend import ObjectInfo, PartInfo, PartListResult, UploadInfo, UploadListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.parts import PART_SIZES, encode_sizes
from nearfaas.s3.validation import (
    validate_bucket_name,
    validate_header_value,
    validate_key,
    validate_metadata,
    validate_new_key,
    validate_part_number,
    validate_upload_id,
)

if TYPE_CHECKING:
    from nearfaas.node.objectstore import ObjectStore

log = logging.getLogger(__name__)

# The sweep runs a few times per expiry age (an upload outlives its age by at most a quarter of
# it), but at least every 10 minutes and at most twice a second: it only scans memory.
_SWEEP_MIN_S, _SWEEP_MAX_S = 0.5, 600.0


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
        try:
            self._uploads.store.reserve(len(chunk))
        except S3Error:
            self.abort()
            raise
        self._md5.update(chunk)
        self._file.write(chunk)

    def commit(self, expected_md5: bytes | None = None, *, checksums: dict | None = None) -> str:
        """Make the part durable; returns its ETag (MD5 hex). BadDigest on a Content-MD5 mismatch.
        ``checksums``: the part's verified x-amz-checksum-<kind> values, kept for the completion."""
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
            if checksums:
                fields["checksums"] = dict(checksums)
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
        # Every upload on disk, upload id -> its upload.json record; changed under _lock together
        # with the directory, so a listing or a lookup never sees one without the other.
        self._records: dict[str, dict] = {}
        # Uploads being completed right now (id -> how many completions): the sweep leaves them be.
        self._completing: dict[str, int] = {}
        self._load_records()

    def _load_records(self) -> None:
        """Index the uploads on disk; remove what no upload can ever use again."""
        buckets = {b.name for b in self.store.list_buckets()}
        for entry in sorted(self.dir.iterdir()):
            record = self._read_record(entry.name) if entry.is_dir() and not entry.is_symlink() else None
            problem = _record_problem(entry.name, record)
            if problem is None and record["bucket"] not in buckets:
                problem = f"its bucket {record['bucket']!r} no longer exists"
            if problem is None:
                self._records[entry.name] = record
                continue
            # upload.json is the commit point of a create: without a sound one (a crash before
            # it, a torn file) the parts belong to no upload and can never be completed.
            size = _tree_bytes(entry)
            if entry.is_dir() and not entry.is_symlink():
                remove_tree_atomically(entry, self.store.tmp_dir)
            else:
                entry.unlink(missing_ok=True)
            self.store.counters.add(uploads_expired=1, upload_bytes_reclaimed=size)
            log.warning("removed leftover multipart upload %s (%d bytes): %s", entry, size, problem)

    def create(self, bucket: str, key: str, *, content_type: str | None = None,
               metadata: dict | None = None, upload_id: str | None = None, headers: dict | None = None) -> str:
        """Start an upload. A caller-supplied id (the gateway gives every replica the same one)
        is idempotent for the same bucket and key."""
        validate_bucket_name(bucket)
        validate_new_key(key)
        metadata = validate_metadata(metadata)
        if content_type:
            validate_header_value("Content-Type", content_type)
        for name, value in (headers or {}).items():
            validate_header_value(name, value)
        if upload_id is None:
            upload_id = uuid.uuid4().hex
        else:
            validate_upload_id(upload_id)
        self.store.head_bucket(bucket)
        record = {"upload_id": upload_id, "bucket": bucket, "key": key, "created": time.time(),
                  "content_type": content_type, "metadata": metadata, "headers": dict(headers or {})}
        with self._lock:
            existing = self._records.get(upload_id)
            if existing is not None:
                if existing["bucket"] == bucket and existing["key"] == key:
                    return upload_id
                raise S3Error(
                    "InvalidArgument",
                    f"The upload id {upload_id!r} is already in use for another object; pick a new one.",
                )
            staging = self.store.tmp_dir / f"{uuid.uuid4().hex}.upload"
            os.mkdir(staging, DIR_MODE)
            atomic.write_bytes(staging / "upload.json", json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogateescape"),
                               FILE_MODE)  # fsyncs staging too
            atomic.publish(staging, self.dir / upload_id)
            self._records[upload_id] = record
        return upload_id

    def open_part_writer(self, bucket: str, key: str, upload_id: str, part_number: int) -> PartWriter:
        validate_part_number(part_number)
        self._require(bucket, key, upload_id)
        return PartWriter(self, upload_id, part_number)

    def _install_part(self, upload_id: str, part_number: int, file: AtomicObjectFile) -> None:
        updir = self.dir / upload_id
        with self._lock:
            if upload_id not in self._records:  # aborted or expired while the part streamed in
                raise _no_such_upload(upload_id)
            file.install(updir / f"part-{part_number:05d}")
            self.store.counters.add(bytes_in=file.size)
        try:
            fsync_dir(updir)
        except FileNotFoundError:  # aborted meanwhile: the part went with the upload
            pass

    def complete(self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]], *,
                 version: str = "", part_checksums: dict | None = None, versioned: bool = False) -> ObjectInfo:
        """Join the listed parts into one object with ETag md5(md5_1 || ... || md5_n)-n."""
        record = self._require(bucket, key, upload_id)
        with self._lock:
            if upload_id not in self._records:  # expired or aborted since _require
                raise _no_such_upload(upload_id)
            self._completing[upload_id] = self._completing.get(upload_id, 0) + 1
        try:
            return self._complete(bucket, key, upload_id, record, parts, version, part_checksums or {}, versioned)
        finally:
            with self._lock:
                left = self._completing.pop(upload_id) - 1
                if left:
                    self._completing[upload_id] = left

    def _complete(self, bucket: str, key: str, upload_id: str, record: dict,
                  parts: list[tuple[int, str]], version: str, part_checksums: dict, versioned: bool = False) -> ObjectInfo:
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
        part_fields: list[dict] = []
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
                part_fields.append(fields)
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
            headers = checksums.multipart_headers(record.get("headers") or {}, parts, part_fields, part_checksums)
            headers[PART_SIZES] = encode_sizes([size for _, _, size in opened])  # GET ?partNumber (s3/parts.py)
            with self.store.open_writer(bucket, key, content_type=record.get("content_type"), metadata=record.get("metadata"),
                                        compute_md5=False, version=version, headers=headers) as writer:
                writer.versioned = versioned
                for fd, data_offset, size in opened:
                    writer.copy_from(fd, data_offset, size)
                info = writer.commit(etag=etag)
        finally:
            for fd, _, _ in opened:
                os.close(fd)
        self._remove(upload_id)
        return info

    def abort(self, bucket: str, key: str, upload_id: str) -> None:
        self._require(bucket, key, upload_id)
        self._remove(upload_id)

    def list_parts(self, bucket: str, key: str, upload_id: str, max_parts: int = 1000,
                   part_number_marker: int = 0) -> PartListResult:
        """ListParts: the upload's parts after ``part_number_marker``, in part-number order."""
        record = self._require(bucket, key, upload_id)
        numbers = sorted(int(p.name[5:]) for p in (self.dir / upload_id).glob("part-*") if p.name[5:].isdigit())
        after = [n for n in numbers if n > part_number_marker]
        page = after[:max_parts]
        parts = []
        for number in page:
            try:
                fd, _, fields = self._open_part(upload_id, number)
            except S3Error:  # aborted or replaced while we looked: not a part any more
                continue
            os.close(fd)
            parts.append(PartInfo(number, fields["etag"], int(fields["size"]), float(fields.get("last_modified", 0.0))))
        return PartListResult(parts, len(after) > len(page), page[-1] if page else part_number_marker,
                              record.get("created", 0.0))

    def abort_all_in_bucket(self, bucket: str) -> None:
        with self._lock:
            doomed = [uid for uid, record in self._records.items() if record["bucket"] == bucket]
        for upload_id in doomed:
            self._remove(upload_id)

    def list_uploads(self, bucket: str, prefix: str = "", delimiter: str = "", max_uploads: int = 1000,
                     key_marker: str = "", upload_id_marker: str = "") -> UploadListResult:
        """One page of ListMultipartUploads: uploads in (key, upload id) order after the markers."""
        self.store.head_bucket(bucket)
        with self._lock:
            uploads = [UploadInfo(bucket, r["key"], uid, float(r["created"]))
                       for uid, r in self._records.items() if r["bucket"] == bucket and r["key"].startswith(prefix)]
        return list_upload_page(uploads, prefix, delimiter, max_uploads, key_marker, upload_id_marker)

    def expire(self, max_age: float, now: float | None = None) -> tuple[int, int]:
        """Abort every upload created more than `max_age` seconds before `now`, and every upload
        whose bucket is gone; returns (uploads removed, bytes reclaimed). An upload being
        completed at this moment is left alone: its completion decides its fate."""
        cutoff = (time.time() if now is None else now) - max_age
        buckets = {b.name for b in self.store.list_buckets()}
        with self._lock:
            due = [uid for uid, r in self._records.items() if float(r["created"]) <= cutoff or r["bucket"] not in buckets]
        removed = reclaimed = 0
        for upload_id in due:
            size = self._remove(upload_id, unless_completing=True)
            if size is None:
                continue
            removed, reclaimed = removed + 1, reclaimed + size
            self.store.counters.add(uploads_expired=1, upload_bytes_reclaimed=size)
        if removed:
            log.info("multipart expiry: aborted %d upload(s) older than %.0f s, reclaiming %d bytes",
                     removed, max_age, reclaimed)
        return removed, reclaimed

    def _remove(self, upload_id: str, *, unless_completing: bool = False) -> int | None:
        """Make the upload disappear in one step (record and directory together), then delete
        its files; returns the bytes freed, or None when it was gone or (with
        `unless_completing`) being completed."""
        path = self.dir / upload_id
        graveyard = self.store.tmp_dir / f"{uuid.uuid4().hex}.deleted"
        with self._lock:
            if unless_completing and upload_id in self._completing:
                return None
            self._records.pop(upload_id, None)
            try:
                atomic.move(path, graveyard)
            except FileNotFoundError:
                return None
        # A crash from here on leaves the files in tmp/, which start-up empties.
        fsync_dir(self.dir)
        size = _tree_bytes(graveyard)
        shutil.rmtree(graveyard, ignore_errors=True)
        return size

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
        with self._lock:
            record = self._records.get(upload_id)
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


def _record_problem(name: str, record) -> str | None:
    """Why an upload.json cannot be used, or None when it is sound."""
    if record is None:
        return "it has no readable upload.json"
    if not isinstance(record, dict) or record.get("upload_id") != name:
        return "its upload.json does not describe this upload"
    if not isinstance(record.get("bucket"), str) or not isinstance(record.get("key"), str):
        return "its upload.json names no bucket and key"
    if not isinstance(record.get("created"), (int, float)) or isinstance(record.get("created"), bool):
        return "its upload.json has no creation time"
    return None


def _tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` (or of `path` itself), as far as they can be read."""
    if not path.is_dir() or path.is_symlink():
        try:
            return path.lstat().st_size
        except OSError:
            return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def list_upload_page(uploads: list[UploadInfo], prefix: str, delimiter: str, max_uploads: int,
                     key_marker: str = "", upload_id_marker: str = "") -> UploadListResult:
    """One ListMultipartUploads page of `uploads` (any order): those whose key starts with
    `prefix`, in (key, upload id) order, after the markers as S3 defines them — keys after
    `key_marker`, and of key `key_marker` itself the uploads whose id sorts after
    `upload_id_marker` (ignored without a key marker). With a delimiter, keys that share
    `prefix` + text + delimiter roll up into one common prefix, which counts as one entry; a
    key marker that is such a prefix skips its whole group."""
    from nearfaas.node.objectstore import _after_group, _group_of  # the same rules as ListObjects

    if max_uploads <= 0:
        return UploadListResult([], [], False)
    entries = sorted((u for u in uploads if u.key.startswith(prefix)), key=lambda u: (u.key, u.upload_id))
    if key_marker and _group_of(key_marker, prefix, delimiter) == key_marker:
        resume = _after_group(key_marker)
        entries = [u for u in entries if u.key >= resume]
    elif key_marker:
        entries = [u for u in entries if u.key > key_marker
                   or (upload_id_marker and u.key == key_marker and u.upload_id > upload_id_marker)]
    found: list[UploadInfo] = []
    groups: list[str] = []
    last: tuple[str, str] | None = None
    truncated = False
    i = 0
    while i < len(entries):
        upload = entries[i]
        if len(found) + len(groups) >= max_uploads:
            truncated = True
            break
        group = _group_of(upload.key, prefix, delimiter)
        if group is None:
            found.append(upload)
            last = (upload.key, upload.upload_id)
            i += 1
            continue
        groups.append(group)
        last = (group, "")
        while i < len(entries) and entries[i].key.startswith(group):
            i += 1
    if not truncated:
        return UploadListResult(found, groups, False)
    assert last is not None
    return UploadListResult(found, groups, True, next_key_marker=last[0], next_upload_id_marker=last[1])


async def sweep_expired_uploads(uploads: MultipartUploads, max_age: float, *, interval: float | None = None) -> None:
    """Run :meth:`MultipartUploads.expire` now and then every `interval` seconds, until cancelled.
    The storage node agent runs this for its store."""
    if interval is None:
        interval = min(max(max_age / 4, _SWEEP_MIN_S), _SWEEP_MAX_S)
    loop = asyncio.get_running_loop()
    while True:
        try:
            await loop.run_in_executor(None, uploads.expire, max_age)
        except Exception:  # a disk error must not end the sweeps for good
            log.exception("multipart expiry sweep failed; the next one runs in %.0f s", interval)
        await asyncio.sleep(interval)
