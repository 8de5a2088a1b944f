"""A durable object store on one node's local disk (synchronous API).

Layout under ``root``::

    .lock                               flock: one ObjectStore per root at a time
    store_id                            this store's identity, made with it (a replaced disk has a new one)
    tmp/                                files being written; emptied at start-up
    buckets/<bucket>/.bucket.json       {"name", "created", "options"}
    buckets/<bucket>/objects/<h[:2]>/<h>  one file per object, h = sha256(key) (objectfile.py)
    uploads/<upload_id>/upload.json     a multipart upload in progress (multipart.py)
    uploads/<upload_id>/part-00001      its parts, in the object file format

Replication (replication/version.py): every object and tombstone carries a version; a write or
delete is applied only if its version is newer than what the key holds (last-writer-wins), so
replicas that see the same writes in any order converge. A versioned delete leaves a tombstone
file in the object's place; an unversioned one (node-local data that is never replicated)
removes the file. Tombstones are dropped only when told (``purge_tombstones``), once the
gateway's anti-entropy pass has seen every replica hold them. Per bucket the store keeps an
order-independent digest of its (key, version, live|deleted) entries, for anti-entropy.

Every mutation is made durable (fsync of the file, rename, fsync of the directory) before the
call returns. An in-memory index per bucket (key -> ObjectInfo, sorted) is rebuilt at start-up
from the object headers alone and serves HEAD and listing without touching the disk.

Thread-safety: the methods may be called from several threads at once (the async backend runs
them in an executor). One lock orders renames and index updates; fsyncs run outside it.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import secrets
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sortedcontainers import SortedDict

from nearfaas import atomic
from nearfaas.node import disk_floor
from nearfaas.node.objectfile import (
    DIR_MODE,
    FILE_MODE,
    AtomicObjectFile,
    CorruptObjectFile,
    bucket_dir,
    info_from_header,
    is_tombstone,
    key_digest,
    live_fields,
    locate_object,
    make_dir_durable,
    make_subdir,
    make_versions_dir,
    fsync_dir_unless_gone,
    object_path,
    read_file_header,
    remove_tree_atomically,
)
from nearfaas.node.objectio import ObjectWriter, OpenObject
from nearfaas.node.versions import VERSIONING_OPTION, Entry, Tomb, VersionedStore, entry_hash, marker_file
from nearfaas.replication.version import HybridClock
from nearfaas.s3.versions import DELETED_HEADER, VERSION_HEADER
from nearfaas.s3.backend import BucketInfo, ListResult, ObjectInfo, UploadListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import (validate_bucket_name, validate_header_value, validate_key, validate_metadata,
                                     validate_new_key)

__all__ = ["ObjectStore", "ObjectWriter", "OpenObject", "StoreCounters", "locate_object"]

log = logging.getLogger(__name__)

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MAX_OBJECT_SIZE = 5 * GiB
DEFAULT_MIN_PART_SIZE = 5 * MiB
DEFAULT_CONTENT_TYPE = "binary/octet-stream"


@dataclass
class StoreCounters:
    """Totals since start-up (bytes) and the current object count, for the node's metrics.
    `uploads_expired` / `upload_bytes_reclaimed`: multipart uploads removed by the expiry sweep
    or at start-up (multipart.py), and the disk bytes their parts held."""

    bytes_in: int = 0
    bytes_out: int = 0
    objects: int = 0
    uploads_expired: int = 0
    upload_bytes_reclaimed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, *, bytes_in: int = 0, bytes_out: int = 0, objects: int = 0, uploads_expired: int = 0,
            upload_bytes_reclaimed: int = 0) -> None:
        with self._lock:
            self.bytes_in += bytes_in
            self.bytes_out += bytes_out
            self.objects += objects
            self.uploads_expired += uploads_expired
            self.upload_bytes_reclaimed += upload_bytes_reclaimed

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"bytes_in": self.bytes_in, "bytes_out": self.bytes_out, "objects": self.objects,
                    "uploads_expired": self.uploads_expired, "upload_bytes_reclaimed": self.upload_bytes_reclaimed}


class ObjectStore(VersionedStore):  # bucket versioning: node/versions.py
    def __init__(self, root: str | Path, *, max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
                 min_part_size: int = DEFAULT_MIN_PART_SIZE, clock_origin: str = "local", min_free: int | None = None):
        from nearfaas.node.multipart import MultipartUploads  # multipart builds on this module

        self.root = Path(root)
        self.max_object_size = max_object_size
        self.tmp_dir = self.root / "tmp"
        self.counters = StoreCounters()
        # Stamps the writes that arrive without a version (node-local data); moved past every
        # version found on disk at start-up.
        self.clock = HybridClock(clock_origin)
        # _lock guards the in-memory index and the renames that must agree with it; it is never
        # held across an fsync, because the event loop takes it for HEAD and listing.
        self._lock = threading.RLock()
        # Serialises bucket creation and deletion, which fsync.
        self._bucket_ops_lock = threading.Lock()
        self._buckets: dict[str, BucketInfo] = {}
        self._index: dict[str, SortedDict] = {}  # live objects only: HEAD and listing
        self._tombs: dict[str, dict[str, Tomb]] = {}  # key -> its tombstone or delete marker
        self._shelf: dict[str, SortedDict] = {}  # key -> noncurrent versions, oldest first (versions.py)
        self._gone: dict[str, dict] = {}  # key digest -> versions deleted for good (versions.py)
        self._digests: dict[str, int] = {}  # XOR of _entry_hash over live objects and tombstones
        # Writes stop (InsufficientStorage, 507) rather than take the filesystem below this.
        self.min_free = min_free
        for sub in ("tmp", "buckets", "uploads"):
            make_dir_durable(self.root / sub)
        # A store made by an older version has 0755 folders and 0644 files: closing its root
        # keeps every other local user out of all of them at once.
        os.chmod(self.root, DIR_MODE)
        self._lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RuntimeError(f"another ObjectStore already holds {self.root}; close it first") from None
        self.store_id = self._store_id()
        self._clear_tmp()
        self._load_buckets()
        self.uploads = MultipartUploads(self, self.root / "uploads", min_part_size=min_part_size)

    def _store_id(self) -> str:
        """This store's identity, made once with the store: a node back on an empty (replaced)
        disk shows a new one, so the gateways do not take its empty answers as the truth before it
        is refilled (replication/replaced.py)."""
        path = self.root / "store_id"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            made = secrets.token_hex(8)
            atomic.write_text(path, made + "\n", FILE_MODE)
            return made

    def close(self) -> None:
        """Release the root. Every committed write is already durable; nothing is flushed."""
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- start-up ---------------------------------------------------------------------------

    def _clear_tmp(self) -> None:
        # Whatever is in tmp/ was never committed: a crash hit it before its rename.
        for entry in self.tmp_dir.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def _load_buckets(self) -> None:
        for bdir in sorted((self.root / "buckets").iterdir()):
            try:
                validate_bucket_name(bdir.name)
                meta = json.loads((bdir / ".bucket.json").read_text())
                info = BucketInfo(name=bdir.name, created=float(meta["created"]), options=dict(meta.get("options") or {}))
            except (S3Error, OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring %s: not a valid bucket directory (%s)", bdir, exc)
                continue
            self._buckets[info.name] = info
            self._index[info.name], self._tombs[info.name] = self._scan_objects(info.name)
            self._digests[info.name] = 0
            for entry in self._index[info.name].values():
                self._digests[info.name] ^= entry_hash(entry.key, entry.version, False)
                self.clock.observe(entry.version)
            for key, tomb in self._tombs[info.name].items():
                self._digests[info.name] ^= entry_hash(key, tomb.version, True)
                self.clock.observe(tomb.version)
            self.counters.add(objects=len(self._index[info.name]))
            self._load_versions(info.name)

    def _scan_objects(self, bucket: str) -> tuple[SortedDict, dict]:
        index, tombs = SortedDict(), {}
        objects_dir = bucket_dir(self.root, bucket) / "objects"
        if not objects_dir.is_dir():
            make_dir_durable(objects_dir)
            return index, tombs
        for sub in objects_dir.iterdir():
            for path in sub.iterdir() if sub.is_dir() else ():
                try:
                    fields = read_file_header(path)
                    if key_digest(fields["key"]) != path.name:
                        raise CorruptObjectFile("file name is not the hash of its key")
                    if is_tombstone(fields):
                        tombs[fields["key"]] = Tomb(str(fields["version"]), float(fields["last_modified"]),
                                                    bool(fields.get("versioned")))
                        continue
                    info = info_from_header(bucket, fields)
                except (OSError, CorruptObjectFile, KeyError, TypeError, ValueError) as exc:
                    log.error("skipping unreadable object file %s: %s", path, exc)
                    continue
                index[info.key] = info
        return index, tombs

    # -- buckets ----------------------------------------------------------------------------

    def list_buckets(self) -> list[BucketInfo]:
        with self._lock:
            return [self._buckets[name] for name in sorted(self._buckets)]

    def create_bucket(self, name: str, options: dict | None = None) -> tuple[BucketInfo, bool]:
        """Create a bucket; returns (info, created). Creating a bucket that exists is not an
        error (S3 us-east-1 semantics): created is False and the original options are kept."""
        validate_bucket_name(name)
        with self._bucket_ops_lock:
            with self._lock:
                if name in self._buckets:
                    return self._buckets[name], False
            info = BucketInfo(name=name, created=time.time(), options=dict(options or {}))
            staging = self.tmp_dir / f"{uuid.uuid4().hex}.bucket"
            os.mkdir(staging, DIR_MODE)
            os.mkdir(staging / "objects", DIR_MODE)
            meta = json.dumps({"name": name, "created": info.created, "options": info.options}).encode()
            atomic.write_bytes(staging / ".bucket.json", meta, FILE_MODE)  # fsyncs staging too
            atomic.publish(staging, bucket_dir(self.root, name))
            # Visible only once durable: no write may land in a bucket a crash could undo.
            with self._lock:
                self._buckets[name] = info
                self._index[name], self._tombs[name], self._digests[name] = SortedDict(), {}, 0
                self._shelf[name], self._gone[name] = SortedDict(), {}
            return info, True

    def head_bucket(self, name: str) -> BucketInfo:
        validate_bucket_name(name)
        with self._lock:
            return self._require_bucket(name)

    def delete_bucket(self, name: str) -> None:
        validate_bucket_name(name)
        with self._bucket_ops_lock:
            with self._lock:
                info = self._require_bucket(name)
                held = len(self._index[name]) + sum(len(v) for v in self._shelf[name].values())
                if self.versioning(name):  # its delete markers are versions too (S3)
                    held += len(self._tombs[name])
                if held:
                    raise S3Error(
                        "BucketNotEmpty",
                        f"The bucket {name!r} still holds {held} objects or versions; delete them first "
                        "(ListObjectVersions shows every version and delete marker).",
                        resource=name,
                    )
                # Gone from memory first: a write committing from now on gets NoSuchBucket.
                # Its tombstones go with it: a bucket created again starts empty.
                saved = (self._index.pop(name), self._tombs.pop(name), self._digests.pop(name), self._shelf.pop(name),
                         self._gone.pop(name))
                del self._buckets[name]
            try:
                remove_tree_atomically(bucket_dir(self.root, name), self.tmp_dir)
            except BaseException:
                with self._lock:
                    self._buckets[name] = info
                    self._index[name], self._tombs[name], self._digests[name], self._shelf[name], self._gone[name] = saved
                raise
        self.uploads.abort_all_in_bucket(name)

    def set_versioning(self, name: str, status: str) -> BucketInfo:
        """Record the bucket's versioning status ("Enabled" / "Suspended"), durably."""
        return self.set_option(name, VERSIONING_OPTION, status)

    def set_option(self, name: str, option: str, value) -> BucketInfo:
        """Record one of the bucket's options (its versioning, its policy; None removes it), durably."""
        validate_bucket_name(name)
        with self._bucket_ops_lock:
            with self._lock:
                info = self._require_bucket(name)
            options = {k: v for k, v in {**info.options, option: value}.items() if v is not None}
            meta = json.dumps({"name": name, "created": info.created, "options": options}).encode()
            atomic.write_bytes(bucket_dir(self.root, name) / ".bucket.json", meta, FILE_MODE)
            with self._lock:
                self._buckets[name] = info = BucketInfo(name=name, created=info.created, options=options)
            return info

    def _require_bucket(self, name: str) -> BucketInfo:
        info = self._buckets.get(name)
        if info is None:
            raise S3Error("NoSuchBucket", f"The bucket {name!r} does not exist; create it first.", resource=name)
        return info

    # -- objects ----------------------------------------------------------------------------

    def reserve(self, size: int) -> None:
        """Refuse to write ``size`` more bytes below the filesystem's floor (node/disk_floor.py):
        InsufficientStorage (507), nothing stored. Every object and part writer asks first."""
        if self.min_free is None:
            self.min_free = disk_floor.default_min_free(self.root)
        disk_floor.reserve(self.tmp_dir, self.min_free, size)

    def open_writer(self, bucket: str, key: str, *, content_type: str | None = None, metadata: dict | None = None,
                    compute_md5: bool = True, version: str = "", headers: dict | None = None) -> ObjectWriter:
        """A writer for a new object. ``version`` (from the gateway) orders it against the key's
        other writes; without one the store stamps its own clock's at commit."""
        validate_bucket_name(bucket)
        validate_new_key(key)
        metadata = validate_metadata(metadata)
        if content_type:
            validate_header_value("Content-Type", content_type)
        for name, value in (headers or {}).items():
            validate_header_value(name, value)
        with self._lock:
            self._require_bucket(bucket)
        return ObjectWriter(self, bucket, key, content_type or DEFAULT_CONTENT_TYPE, metadata,
                            compute_md5=compute_md5, version=version, headers=headers)

    def put_object(self, bucket: str, key: str, data: bytes, *, content_type: str | None = None,
                   metadata: dict | None = None, content_md5: bytes | None = None, version: str = "") -> ObjectInfo:
        """Store a small object given in full (convenience; large bodies use open_writer)."""
        with self.open_writer(bucket, key, content_type=content_type, metadata=metadata, version=version) as writer:
            writer.write(data)
            return writer.commit(content_md5)

    def _install(self, info: ObjectInfo, file: AtomicObjectFile, *, deleted: bool = False, versioned: bool = False) -> bool:
        """The commit point of a write or a versioned delete (``deleted``: ``file`` is its
        tombstone): rename into place and index it if its version is newer than what the key
        holds; an older one is kept as a noncurrent version where versioning says so
        (versions.py), else discarded. Returns whether it was kept."""
        path = object_path(self.root, info.bucket, info.key)
        make_subdir(path.parent)  # first object in this subdirectory: fsyncs, so not under the lock
        if self.versioning(info.bucket) and not self._versions_dir(info.bucket, info.key).is_dir():
            make_versions_dir(self._versions_dir(info.bucket, info.key))  # fsyncs: not under the lock
        entry = Entry(info.version, versioned or bool(info.version_id), deleted, info.last_modified, None if deleted else info)
        self.clock.observe(info.version)  # the node's high-water mark, which its health reports to gateways
        with self._lock:
            self._require_bucket(info.bucket)
            dirs = self._install_entry(info.bucket, info.key, entry, file, path)
        for d in dirs or ():
            fsync_dir_unless_gone(d)
        return dirs is not None

    def _add_current(self, bucket: str, key: str, entry: Entry, *, written: bool = True) -> None:
        """Make ``entry`` the key's current one in memory (its file is in place; ``written``: it
        just arrived, rather than an older version promoted back). Under _lock."""
        if entry.deleted:
            self._tombs[bucket][key] = Tomb(entry.version, entry.last_modified, entry.versioned)
        else:
            self._index[bucket][key] = entry.info
            self.counters.add(bytes_in=entry.info.size if written else 0, objects=1)
        self._digests[bucket] ^= entry_hash(key, entry.version, entry.deleted)

    def _version_held(self, bucket: str, key: str) -> str:
        """The version of the key's live object or tombstone, "" if neither. Under _lock."""
        live = self._index[bucket].get(key)
        if live is not None:
            return live.version
        return self._tombs[bucket].get(key, ("", 0.0))[0]

    def _forget(self, bucket: str, key: str) -> None:
        """Drop the key's live object or tombstone from memory (its file is replaced or gone)."""
        live = self._index[bucket].pop(key, None)
        if live is not None:
            self.counters.add(objects=-1)
            self._digests[bucket] ^= entry_hash(key, live.version, False)
        tomb = self._tombs[bucket].pop(key, None)
        if tomb is not None:
            self._digests[bucket] ^= entry_hash(key, tomb.version, True)

    def head_object(self, bucket: str, key: str) -> ObjectInfo:
        validate_bucket_name(bucket)
        validate_key(key)
        with self._lock:
            self._require_bucket(bucket)
            info = self._index[bucket].get(key)
            tomb = self._tombs[bucket].get(key) if info is None else None
        if info is None:
            # A deleted key's 404 says which delete removed it: the gateway compares it with the
            # other replicas' versions, so a replica that missed the delete cannot win a read.
            headers = {VERSION_HEADER: tomb.version, DELETED_HEADER: "true"} if tomb else None
            if tomb and self.versioning(bucket):  # S3: the latest version is a delete marker
                headers |= {"x-amz-delete-marker": "true", "x-amz-version-id": tomb.version if tomb.versioned else "null"}
            raise S3Error("NoSuchKey", f"The key {key!r} does not exist in bucket {bucket!r}.", resource=key,
                          headers=headers)
        return info

    def locate(self, bucket: str, key: str) -> tuple[Path, int, ObjectInfo]:
        """(path, data_offset, info): the object's bytes are info.size bytes at data_offset."""
        with self.open_object(bucket, key) as obj:
            return obj.path, obj.data_offset, obj.info

    def open_object(self, bucket: str, key: str) -> OpenObject:
        self.head_object(bucket, key)  # NoSuchBucket / NoSuchKey (with a tombstone's version) from the index
        path = object_path(self.root, bucket, key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # deleted since the index lookup
            raise S3Error("NoSuchKey", f"The key {key!r} does not exist in bucket {bucket!r}.", resource=key) from None
        try:
            live = live_fields(fd, key)
        except CorruptObjectFile as exc:
            os.close(fd)
            log.error("object file %s is corrupt: %s", path, exc)
            raise S3Error("InternalError", f"The stored object {key!r} is unreadable.") from None
        if live is None:  # deleted since the index lookup: the file is its tombstone now
            os.close(fd)
            return self.open_object(bucket, key)  # answers NoSuchKey with the delete's version
        data_offset, fields = live
        return OpenObject(fd, path, data_offset, info_from_header(bucket, fields), self.counters)

    def get_object(self, bucket: str, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes start..end (inclusive) of a small object (convenience for tests and tools)."""
        with self.open_object(bucket, key) as obj:
            last = obj.info.size - 1 if end is None else min(end, obj.info.size - 1)
            return obj.read(start, last - start + 1)

    def delete_object(self, bucket: str, key: str, version: str | None = None, *, versioned: bool = False) -> bool:
        """Delete a key; deleting a missing key succeeds (S3 semantics). With a ``version`` (from
        the gateway) the delete leaves a tombstone and is ordered against the key's writes like
        one of them; returns whether it was applied (False: the key holds something newer).
        ``versioned``: a delete marker made while versioning was Enabled (versions.py). Without a
        version the file is simply removed (node-local data nobody replicates)."""
        validate_bucket_name(bucket)
        validate_key(key)
        path = object_path(self.root, bucket, key)
        if version is not None:
            with self._lock:
                self._require_bucket(bucket)
                if version <= self._version_held(bucket, key) and not self.versioning(bucket):
                    return False  # checked again at install; this spares a file and an fsync
            tomb = marker_file(self.tmp_dir, key, version, versioned)
            try:
                info = ObjectInfo(bucket=bucket, key=key, size=0, etag="", last_modified=time.time(), version=version)
                return self._install(info, tomb, deleted=True, versioned=versioned)
            except BaseException:
                tomb.discard()
                raise
        with self._lock:
            self._require_bucket(bucket)
            if key not in self._index[bucket]:
                return False
            self._forget(bucket, key)
            path.unlink(missing_ok=True)
        fsync_dir_unless_gone(path.parent)
        return True

    # -- anti-entropy (replication/antientropy.py) --------------------------------------------

    def digest(self, bucket: str) -> dict:
        """An order-independent digest of the bucket's entries: equal on two replicas exactly
        when they hold the same (key, version, live|deleted) set (up to a 64-bit collision)."""
        validate_bucket_name(bucket)
        with self._lock:
            self._require_bucket(bucket)
            tombs = self._tombs[bucket]
            return {"digest": f"{self._digests[bucket]:016x}", "objects": len(self._index[bucket]),
                    "tombstones": len(tombs), "oldest_tombstone": min((t.deleted_at for t in tombs.values()), default=None)}

    def tombstone_count(self) -> int:
        with self._lock:
            return sum(len(t) for t in self._tombs.values())

    def entries(self, bucket: str, after: str = "", limit: int = 10_000) -> list[tuple[str, str, bool]]:
        """Up to ``limit`` (key, version, deleted) entries after ``after``, in key order."""
        validate_bucket_name(bucket)
        with self._lock:
            self._require_bucket(bucket)
            live = self._index[bucket]
            keys = itertools.islice(live.irange(minimum=after, inclusive=(False, True)), limit)
            merged = [(k, live[k].version, False) for k in keys]
            merged += [(k, t.version, True) for k, t in self._tombs[bucket].items() if k > after]
        merged.sort()
        return merged[:limit]

    def purge_tombstones(self, bucket: str, tombstones: list[tuple[str, str]]) -> int:
        """Drop the named tombstones (key, version) that are still the key's newest entry;
        returns how many went. Called once every replica holds them (anti-entropy). In a bucket
        that has had versioning they are delete markers, versions in their own right: kept."""
        validate_bucket_name(bucket)
        purged, dirs = 0, set()
        with self._lock:
            self._require_bucket(bucket)
            for key, version in tombstones:
                tomb = self._tombs[bucket].get(key)
                if tomb is None or tomb.version != version or self.versioning(bucket) or key in self._shelf[bucket]:
                    continue
                path = object_path(self.root, bucket, key)
                path.unlink(missing_ok=True)
                self._forget(bucket, key)
                dirs.add(path.parent)
                purged += 1
        for d in dirs:
            fsync_dir_unless_gone(d)
        return purged

    def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                     start_after: str = "") -> ListResult:
        """One page of keys in UTF-8 order, strictly after `start_after`.

        With a delimiter, keys that share `prefix` + text + delimiter roll up into one common
        prefix, which counts as one entry. When `start_after` is itself such a common prefix
        (the marker of a previous page) its whole group is skipped, so no page repeats one.
        """
        validate_bucket_name(bucket)
        with self._lock:
            self._require_bucket(bucket)
            index = self._index[bucket]
            return _list_page(index, prefix, delimiter, max(0, max_keys), start_after)

    # -- multipart (see multipart.py) -------------------------------------------------------

    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None,
                                metadata: dict | None = None, upload_id: str | None = None, headers: dict | None = None) -> str:
        return self.uploads.create(bucket, key, content_type=content_type, metadata=metadata, upload_id=upload_id,
                                   headers=headers)

    def open_part_writer(self, bucket: str, key: str, upload_id: str, part_number: int):
        return self.uploads.open_part_writer(bucket, key, upload_id, part_number)

    def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int, data: bytes,
                    *, content_md5: bytes | None = None) -> str:
        with self.open_part_writer(bucket, key, upload_id, part_number) as writer:
            writer.write(data)
            return writer.commit(content_md5)

    def complete_multipart_upload(self, bucket: str, key: str, upload_id: str,
                                  parts: list[tuple[int, str]], *, version: str = "", part_checksums: dict | None = None,
                                  versioned: bool = False) -> ObjectInfo:
        return self.uploads.complete(bucket, key, upload_id, parts, version=version, part_checksums=part_checksums,
                                     versioned=versioned)

    def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        self.uploads.abort(bucket, key, upload_id)

    def list_multipart_uploads(self, bucket: str, prefix: str = "", delimiter: str = "", max_uploads: int = 1000,
                               key_marker: str = "", upload_id_marker: str = "") -> UploadListResult:
        return self.uploads.list_uploads(bucket, prefix, delimiter, max_uploads, key_marker, upload_id_marker)

    def list_parts(self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0):
        return self.uploads.list_parts(bucket, key, upload_id, max_parts, part_number_marker)


def _after_group(prefix_group: str) -> str:
    """The smallest string greater than every string that starts with `prefix_group`."""
    last = prefix_group[-1]
    if ord(last) >= 0x10FFFF:
        return prefix_group + "\U0010ffff" * 4  # unreachable with valid UTF-8 keys in practice
    return prefix_group[:-1] + chr(ord(last) + 1)


def _group_of(key: str, prefix: str, delimiter: str) -> str | None:
    """The common prefix `key` rolls up into, or None when it is listed as itself."""
    if not delimiter or not key.startswith(prefix):
        return None
    cut = key.find(delimiter, len(prefix))
    return None if cut < 0 else key[: cut + len(delimiter)]


def _list_page(index: SortedDict, prefix: str, delimiter: str, max_keys: int, start_after: str) -> ListResult:
    if max_keys == 0:  # S3 answers max-keys=0 with an empty, untruncated page
        return ListResult(contents=[], common_prefixes=[], is_truncated=False, next_marker=None)
    keys = index.keys()
    if start_after < prefix:
        pos = index.bisect_left(prefix)
    elif _group_of(start_after, prefix, delimiter) == start_after:
        pos = index.bisect_left(_after_group(start_after))  # resume after a whole group
    else:
        pos = index.bisect_right(start_after)
    contents: list[ObjectInfo] = []
    groups: list[str] = []
    last_entry: str | None = None
    truncated = False
    while pos < len(keys):
        key = keys[pos]
        if not key.startswith(prefix):
            break  # keys are sorted: past the prefix range, nothing more can match
        if len(contents) + len(groups) >= max_keys:
            truncated = True
            break
        group = _group_of(key, prefix, delimiter)
        if group is not None:
            groups.append(group)
            last_entry = group
            pos = index.bisect_left(_after_group(group))
        else:
            contents.append(index[key])
            last_entry = key
            pos += 1
    return ListResult(contents=contents, common_prefixes=groups, is_truncated=truncated,
                      next_marker=last_entry if truncated else None)
