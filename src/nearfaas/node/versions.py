"""S3 bucket versioning on one node: the noncurrent versions of each key, kept beside its file.

A key's *current* entry stays where it always was (``objects/<h>``, an object or a delete's
tombstone), so every read path, sendfile and the workers' mmap are unchanged. Its older
entries, when versioning keeps them, live under ``buckets/<bucket>/versions/<h>/``::

    <version>            an older object or delete marker, in the object file format
    <version>.gone       that version was deleted for good (DELETE ?versionId=): never again
    null-<stamp>.gone    the "null" version written before <stamp> was deleted for good

Every entry is named by its version (replication/version.py), the total order of the key's
writes; the current entry is always the newest one held. Its S3 version id is that version when
the write was made while versioning was Enabled (``versioned``), else "null".

Rule (what S3 specifies, made independent of arrival order so replicas converge): a key holds
every versioned entry it was sent, plus at most one "null" entry, the newest null one sent; an
entry deleted for good never comes back. So a write newer than the current entry makes the old
one noncurrent, unless both are null writes (a null write replaces the null version: buckets
never versioned keep exactly one entry per key, as before); a write older than the current one
(a retry, a replica catching up) is filed among the noncurrent versions, or dropped when it is
a null write and a newer null one is held.

Worked example: versioning Enabled; PUT k@v3, PUT k@v5 (v3 becomes noncurrent, a hard link
into versions/, then the new file replaces objects/<h>: no moment without a current entry);
Suspended; PUT k@v7 (a null write: v5 kept, k's current is null@v7); DELETE k?versionId=null
(stamped v8): null@v7 goes, v5 is promoted back into objects/<h> by one rename, and
``null-v8.gone`` keeps a late copy of null@v7 from coming back.

Known caveats:
- ``.gone`` records are never collected (a few bytes per version deleted for good).
- ListObjectVersions walks the bucket's keys in memory (live, tombstones and noncurrent ones
  merged per call): fine for millions of keys, not for billions.
- The first noncurrent version of a key in a bucket whose versioning this node has not been
  told about makes its directory (an fsync) under the store's lock.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

from sortedcontainers import SortedDict

from nearfaas import atomic
from nearfaas.node.objectfile import (PAGE, AtomicObjectFile, CorruptObjectFile, bucket_dir, fsync_dir_unless_gone,
                                      info_from_header, is_tombstone, key_digest, make_subdir, make_versions_dir, object_path,
                                      read_file_header, read_header, tombstone_header)
from nearfaas.s3.backend import DeleteResult, ObjectInfo, VersionEntry, VersionListResult
from nearfaas.s3.errors import S3Error
from nearfaas.s3.versioning import check_version_id
from nearfaas.s3.xml import rfc1123

VERSIONING_OPTION = "versioning"  # bucket option: "Enabled" | "Suspended"; absent: never configured


class Tomb(NamedTuple):
    """A key's current entry when it is deleted: a tombstone, or a delete marker."""

    version: str
    deleted_at: float
    versioned: bool = False


@dataclass(frozen=True)
class Entry:
    """One entry of a key: an object version or a delete marker."""

    version: str
    versioned: bool
    deleted: bool
    last_modified: float
    info: ObjectInfo | None = None  # an object's; None for a delete marker

    @property
    def version_id(self) -> str:
        return self.version if self.versioned else "null"


@dataclass
class _Gone:
    versions: set = field(default_factory=set)  # S3 version ids
    null_before: str = ""  # null entries older than this were deleted for good


def _unversioned(bucket: str, version_id: str) -> S3Error:
    # S3's answer: a bucket that never had versioning has only "null" versions
    return S3Error("InvalidArgument", f"Invalid version id specified: {version_id!r}; bucket {bucket!r} has never had "
                   "versioning, so its only version id is \"null\".", status=400)


def _no_version(key: str, version_id: str) -> S3Error:
    return S3Error("NoSuchVersion", f"The key {key!r} has no version {version_id!r}; ListObjectVersions shows its "
                   "versions.", resource=key, status=404)


def entry_hash(key: str, version: str, deleted: bool) -> int:
    """One entry's share of a bucket's anti-entropy digest (XORed: order-independent)."""
    raw = hashlib.blake2b(f"{key}\0{version}\0{int(deleted)}".encode("utf-8", "surrogateescape"), digest_size=8)
    return int.from_bytes(raw.digest(), "little")


class VersionedStore:
    """Versioning for ObjectStore (mixed in). It relies on the store's ``_lock``, ``_index``
    (bucket -> key -> live ObjectInfo), ``_tombs`` (bucket -> key -> Tomb), ``_buckets``,
    ``_forget``, ``_add_current`` and ``_digests``; it adds ``_shelf`` (bucket -> key -> noncurrent
    entries, oldest first) and ``_gone``."""

    def _versions_dir(self, bucket: str, key: str) -> Path:
        return bucket_dir(self.root, bucket) / "versions" / key_digest(key)

    def versioning(self, bucket: str) -> str:
        return str(self._buckets[bucket].options.get(VERSIONING_OPTION, "")) if bucket in self._buckets else ""

    def public(self, info: ObjectInfo) -> ObjectInfo:
        """The info as clients see it: a null write in a bucket that has had versioning is "null"."""
        if not info.version_id and self.versioning(info.bucket):
            return replace(info, version_id="null")
        return info

    # -- the key's entries (all under _lock) ---------------------------------------------------

    def _current(self, bucket: str, key: str) -> Entry | None:
        live = self._index[bucket].get(key)
        if live is not None:
            return Entry(live.version, bool(live.version_id), False, live.last_modified, live)
        tomb = self._tombs[bucket].get(key)
        return Entry(tomb.version, tomb.versioned, True, tomb.deleted_at) if tomb is not None else None

    def _entries_of(self, bucket: str, key: str) -> list[Entry]:
        """Newest first."""
        current = self._current(bucket, key)
        return ([current] if current is not None else []) + self._shelf[bucket].get(key, [])[::-1]

    def _versions_of(self, bucket: str, key: str) -> list[Entry]:
        """What S3 shows of the key's entries, newest first: in a bucket that never had
        versioning a delete leaves nothing (its tombstone is the replicas' business only)."""
        entries = self._entries_of(bucket, key)
        return entries if self.versioning(bucket) else [e for e in entries if not e.deleted]

    def _is_gone(self, bucket: str, key: str, entry: Entry) -> bool:
        records = self._gone[bucket]
        gone = records.get(key_digest(key)) if records else None  # no SHA-256 per write where nothing was ever deleted for good
        if gone is None:
            return False
        return entry.version in gone.versions if entry.versioned else entry.version < gone.null_before

    def _placement(self, bucket: str, key: str, new: Entry) -> str | None:
        """Where a write or delete goes: "current", "shelf" (noncurrent) or None (dropped)."""
        if self._is_gone(bucket, key, new):
            return None
        current = self._current(bucket, key)
        if current is None or new.version > current.version:
            return "current"
        held = self._entries_of(bucket, key)
        if any(e.version == new.version for e in held):
            return None
        if not new.versioned and any(not e.versioned and e.version > new.version for e in held):
            return None
        return "shelf"

    def _shelve(self, bucket: str, key: str, entry: Entry, source: Path, *, link: bool) -> Path:
        """File ``source`` as the noncurrent ``entry`` (a hard link, or a rename). Returns the
        directory to fsync."""
        vdir = self._versions_dir(bucket, key)
        if not vdir.is_dir():
            make_versions_dir(vdir)  # rare: a node not yet told of the bucket's versioning
        target = vdir / entry.version
        target.unlink(missing_ok=True)  # a copy left by a crash between link and replace
        (os.link if link else atomic.move)(source, target)
        shelf = self._shelf[bucket].setdefault(key, [])
        bisect.insort(shelf, entry, key=lambda e: e.version)
        self._digests[bucket] ^= entry_hash(key, entry.version, entry.deleted)
        return vdir

    def _drop_null(self, bucket: str, key: str) -> list[Path]:
        """Forget the key's noncurrent null entry, if any (a newer null write replaces it)."""
        shelf = self._shelf[bucket].get(key, [])
        for entry in [e for e in shelf if not e.versioned]:
            self._unshelve(bucket, key, entry)
        return [self._versions_dir(bucket, key)] if shelf else []

    def _unshelve(self, bucket: str, key: str, entry: Entry, *, into: Path | None = None) -> None:
        shelf = self._shelf[bucket][key]
        shelf.remove(entry)
        if not shelf:
            del self._shelf[bucket][key]
        self._digests[bucket] ^= entry_hash(key, entry.version, entry.deleted)
        path = self._versions_dir(bucket, key) / entry.version
        if into is None:
            path.unlink(missing_ok=True)
        else:
            atomic.publish(path, into, durable=False)  # back in place: the caller fsyncs

    def _install_entry(self, bucket: str, key: str, new: Entry, file: AtomicObjectFile, path: Path) -> list[Path] | None:
        """Put a committed write or delete where it belongs; the dirs to fsync, or None when it
        was dropped (stale or deleted for good). Under _lock."""
        place = self._placement(bucket, key, new)
        if place is None:
            file.discard()
            return None
        dirs = [] if new.versioned else self._drop_null(bucket, key)
        if place == "shelf":
            vdir = self._shelve(bucket, key, new, file.tmp_path, link=False)
            return dirs + [vdir, self.tmp_dir]
        old = self._current(bucket, key)
        if old is not None and (old.versioned or new.versioned):
            dirs.append(self._shelve(bucket, key, old, path, link=True))
        try:
            file.install(path)
        except FileNotFoundError:  # the bucket was deleted and re-created meanwhile
            make_subdir(path.parent)
            file.install(path)
        self._forget(bucket, key)
        self._add_current(bucket, key, new)
        return dirs + [path.parent]

    # -- reads and deletes of one version ------------------------------------------------------

    def _find(self, bucket: str, key: str, version_id: str) -> tuple[Entry, bool]:
        """(entry, is it the current one). Under _lock."""
        if version_id != "null" and not self.versioning(bucket):
            raise _unversioned(bucket, version_id)
        for entry in self._versions_of(bucket, key):
            if entry.version_id == version_id:
                current = self._current(bucket, key)
                return entry, current is not None and current.version == entry.version
        raise _no_version(key, version_id)

    def head_version(self, bucket: str, key: str, version_id: str) -> ObjectInfo:
        check_version_id(version_id)
        with self._lock:
            self._require_bucket(bucket)
            entry, _ = self._find(bucket, key, version_id)
        if entry.deleted:
            raise S3Error("MethodNotAllowed", f"Version {version_id!r} of {key!r} is a delete marker; a delete marker has "
                          "no body or headers.", resource=key, status=405,
                          headers={"x-amz-delete-marker": "true", "x-amz-version-id": version_id,
                                   "Last-Modified": rfc1123(entry.last_modified)})
        return self.public(entry.info)

    def open_version(self, bucket: str, key: str, version_id: str):
        """An OpenObject on one version of the key (the current one or an older one)."""
        from nearfaas.node.objectio import OpenObject

        info = self.head_version(bucket, key, version_id)
        with self._lock:  # renames happen under it: the file opened is the entry found
            entry, current = self._find(bucket, key, version_id)
            path = object_path(self.root, bucket, key) if current else self._versions_dir(bucket, key) / entry.version
            fd = os.open(path, os.O_RDONLY)
        try:
            data_offset, fields = read_header(fd)
            if fields.get("version") != entry.version:
                raise CorruptObjectFile(f"{path} holds version {fields.get('version')!r}, not {entry.version!r}")
        except (CorruptObjectFile, OSError):
            os.close(fd)
            raise S3Error("InternalError", f"Version {version_id!r} of {key!r} is unreadable.") from None
        return OpenObject(fd, path, data_offset, info, self.counters)

    def delete_version(self, bucket: str, key: str, version_id: str, stamp: str = "") -> DeleteResult:
        """Delete one version for good (S3 DeleteObject with a versionId); deleting one that is
        not there succeeds. ``stamp`` (the gateway's clock) bounds which "null" version goes: the
        one written before it. Deleting the current entry promotes the next newest."""
        check_version_id(version_id)
        if version_id != "null" and not self.versioning(bucket):
            raise _unversioned(bucket, version_id)
        stamp = stamp or self.clock.now()
        path = object_path(self.root, bucket, key)
        vdir = self._versions_dir(bucket, key)
        make_versions_dir(vdir)
        with self._lock:
            self._require_bucket(bucket)
            gone = self._gone[bucket].setdefault(key_digest(key), _Gone())
            target = None
            for i, entry in enumerate(self._entries_of(bucket, key)):
                if entry.version_id == version_id and (entry.versioned or entry.version < stamp):
                    target = (entry, i == 0)
                    break
            if version_id == "null":
                gone.null_before = max(gone.null_before, stamp)
                record = vdir / f"null-{stamp}.gone"
            else:
                gone.versions.add(version_id)
                record = vdir / f"{version_id}.gone"
            record.touch()
            if target is not None:
                entry, current = target
                if not current:
                    self._unshelve(bucket, key, entry)
                else:
                    self._forget(bucket, key)
                    shelf = self._shelf[bucket].get(key)
                    if shelf:
                        promoted = shelf[-1]
                        self._unshelve(bucket, key, promoted, into=path)
                        self._add_current(bucket, key, promoted, written=False)
                    else:
                        path.unlink(missing_ok=True)
        for d in (vdir, path.parent):
            fsync_dir_unless_gone(d)
        deleted = target is not None and target[0].deleted
        return DeleteResult(version_id=version_id, delete_marker=deleted)

    def list_versions(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                      key_marker: str = "", version_id_marker: str = "") -> VersionListResult:
        """ListObjectVersions: (key, newest first) order, after (key_marker, version_id_marker)."""
        if version_id_marker:
            check_version_id(version_id_marker)
        with self._lock:
            self._require_bucket(bucket)
            keys = sorted({*self._index[bucket].irange(minimum=prefix or None), *self._tombs[bucket],
                           *self._shelf[bucket].irange(minimum=prefix or None)})
            pages = _VersionPager(self, bucket, prefix, delimiter, max(0, max_keys))
            return pages.page(keys, key_marker, version_id_marker)

    # -- start-up ------------------------------------------------------------------------------

    def _load_versions(self, bucket: str) -> None:
        """Read versions/ into memory; settle what a crash between two renames left."""
        self._shelf[bucket], self._gone[bucket] = SortedDict(), {}
        root = bucket_dir(self.root, bucket) / "versions"
        if not root.is_dir():
            return
        for vdir in root.iterdir():
            entries, gone = [], _Gone()
            for path in vdir.iterdir() if vdir.is_dir() else ():
                name = path.name
                if name.endswith(".gone"):
                    stem = name[:-5]
                    if stem.startswith("null-"):
                        gone.null_before = max(gone.null_before, stem[5:])
                    else:
                        gone.versions.add(stem)
                    continue
                entry = _read_entry(bucket, path, vdir.name)
                if entry is not None:
                    entries.append(entry)
            if gone.versions or gone.null_before:
                self._gone[bucket][vdir.name] = gone  # by the key's digest: the records may outlive every entry
            for key, entry in sorted(entries, key=lambda ke: ke[1].version):
                self._settle_loaded(bucket, key, entry)

    def _settle_loaded(self, bucket: str, key: str, entry: Entry) -> None:
        current = self._current(bucket, key)
        path = self._versions_dir(bucket, key) / entry.version
        if current is not None and entry.version == current.version:
            path.unlink(missing_ok=True)  # the link made just before a crash replaced the current file
            return
        self._shelf[bucket].setdefault(key, []).append(entry)
        self._digests[bucket] ^= entry_hash(key, entry.version, entry.deleted)
        self.clock.observe(entry.version)
        if current is None or entry.version > current.version:  # defensive: keep "current is the newest"
            self._forget(bucket, key)
            self._unshelve(bucket, key, entry, into=object_path(self.root, bucket, key))
            self._add_current(bucket, key, entry, written=False)


def _read_entry(bucket: str, path: Path, digest: str) -> tuple[str, Entry] | None:
    try:
        fields = read_file_header(path)
        if key_digest(fields["key"]) != digest or fields.get("version") != path.name:
            raise CorruptObjectFile("file name does not match its key or version")
    except (OSError, CorruptObjectFile, KeyError, TypeError) as exc:
        import logging

        logging.getLogger(__name__).error("skipping unreadable version file %s: %s", path, exc)
        return None
    versioned = bool(fields.get("versioned"))
    if is_tombstone(fields):
        return fields["key"], Entry(fields["version"], versioned, True, float(fields["last_modified"]))
    info = info_from_header(bucket, fields)
    return info.key, Entry(info.version, versioned, False, info.last_modified, info)


def marker_file(tmp_dir: Path, key: str, version: str, versioned: bool) -> AtomicObjectFile:
    """A finished (fsynced) tombstone / delete-marker file in tmp/, ready to install."""
    tomb = AtomicObjectFile(tmp_dir, PAGE)
    try:
        tomb.finish(tombstone_header(key, version, time.time(), versioned=versioned))
    except BaseException:
        tomb.discard()
        raise
    return tomb


class _VersionPager:
    """One page of ListObjectVersions over a sorted key list (see list_versions)."""

    def __init__(self, store: VersionedStore, bucket: str, prefix: str, delimiter: str, max_keys: int):
        self.store, self.bucket, self.prefix, self.delimiter, self.max_keys = store, bucket, prefix, delimiter, max_keys

    def _group(self, key: str) -> str | None:
        if not self.delimiter:
            return None
        cut = key.find(self.delimiter, len(self.prefix))
        return None if cut < 0 else key[: cut + len(self.delimiter)]

    def page(self, keys: list[str], key_marker: str, version_id_marker: str) -> VersionListResult:
        out: list[VersionEntry] = []
        groups: list[str] = []
        last: tuple[str, str] | None = None
        start = bisect.bisect_left(keys, max(key_marker, self.prefix)) if version_id_marker or key_marker < self.prefix \
            else bisect.bisect_right(keys, key_marker)
        for key in keys[start:]:
            if not key.startswith(self.prefix):
                break  # sorted: past the prefix, nothing more matches
            group = self._group(key)
            if group is not None:
                # one entry per group; a marker that is the group (or inside it) resumes after it
                if (groups and groups[-1] == group) or key_marker.startswith(group):
                    continue
                if len(out) + len(groups) >= self.max_keys:
                    return self._result(out, groups, True, last)
                groups.append(group)
                last = (group, "")
                continue
            entries = self.store._versions_of(self.bucket, key)
            newest = entries[0].version if entries else ""
            if key == key_marker and version_id_marker:
                ids = [e.version_id for e in entries]
                entries = entries[ids.index(version_id_marker) + 1:] if version_id_marker in ids else []
            for entry in entries:
                if len(out) + len(groups) >= self.max_keys:
                    return self._result(out, groups, True, last)
                out.append(VersionEntry(key=key, version_id=entry.version_id, is_latest=entry.version == newest,
                                        last_modified=entry.last_modified, delete_marker=entry.deleted,
                                        info=self.store.public(entry.info) if entry.info is not None else None,
                                        version=entry.version))
                last = (key, entry.version_id)
        return self._result(out, groups, False, last)

    @staticmethod
    def _result(out, groups, truncated: bool, last) -> VersionListResult:
        if not truncated or last is None:
            return VersionListResult(out, groups, truncated)
        return VersionListResult(out, groups, True, next_key_marker=last[0], next_version_id_marker=last[1])
