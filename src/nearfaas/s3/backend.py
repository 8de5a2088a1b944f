"""The storage contract behind the S3 front end.

One S3 protocol layer (``s3.frontend``) serves two worlds: a storage node, whose backend is
its own durable on-disk store, and the gateway, whose backend routes every call to the nodes
that hold the object. Both implement :class:`StorageBackend`, so parsing, authentication,
XML and error bodies are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from collections.abc import AsyncIterator


@dataclass(frozen=True)
class BucketInfo:
    name: str
    created: float  # unix seconds
    # Per-bucket options, e.g. {"dscs_replica": True}: one replica of every object must sit on a
    # dscs-class node (DSCS-Serverless section 5.2).
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ObjectInfo:
    bucket: str
    key: str
    size: int
    etag: str  # without quotes; MD5 hex, or "<md5-of-md5s>-<n>" for multipart
    last_modified: float  # unix seconds
    content_type: str = "binary/octet-stream"
    metadata: dict = field(default_factory=dict)  # user metadata, names lower-case, no prefix
    # The write's place in the key's total order (replication/version.py); "" before versions.
    version: str = ""
    # Stored system headers, lower-case names: Cache-Control, Content-Encoding, ... and the
    # object's x-amz-checksum-<kind> / x-amz-checksum-type (s3/checksums.py).
    headers: dict = field(default_factory=dict)
    # Its S3 version id (x-amz-version-id): ``version`` when written while the bucket's versioning
    # was Enabled, "null" for any other write in a bucket that has had versioning, "" otherwise.
    version_id: str = ""


@dataclass(frozen=True)
class ListResult:
    contents: list[ObjectInfo]
    common_prefixes: list[str]
    is_truncated: bool
    # The last key or common prefix returned; the next page starts strictly after it.
    next_marker: str | None


@dataclass(frozen=True)
class UploadInfo:
    """A multipart upload in progress (ListMultipartUploads)."""

    bucket: str
    key: str
    upload_id: str
    initiated: float  # unix seconds


@dataclass(frozen=True)
class PartInfo:
    """One uploaded part of a multipart upload (ListParts)."""

    part_number: int
    etag: str  # MD5 hex, no quotes
    size: int
    last_modified: float


@dataclass(frozen=True)
class PartListResult:
    parts: list[PartInfo]
    is_truncated: bool
    next_part_number_marker: int  # the last part number on this page
    initiated: float = 0.0


@dataclass(frozen=True)
class UploadListResult:
    # Uploads in (key, upload id) order; keys that roll up under the delimiter are common prefixes.
    uploads: list[UploadInfo]
    common_prefixes: list[str]
    is_truncated: bool
    # Where the next page starts: after this key (a whole common prefix when it is one), and
    # within it after this upload id ("" when the page ended on a common prefix).
    next_key_marker: str | None = None
    next_upload_id_marker: str | None = None


@dataclass(frozen=True)
class VersionEntry:
    """One entry of ListObjectVersions: a version of an object, or a delete marker."""

    key: str
    # What clients name it by: the write's version (replication/version.py) when the bucket's
    # versioning was Enabled at the write, "null" when it was off or Suspended.
    version_id: str
    is_latest: bool
    last_modified: float  # unix seconds
    delete_marker: bool = False
    info: ObjectInfo | None = None  # size, ETag, ... of an object version (None for a marker)
    # The write's place in the key's order (a "null" version has one too): newest first.
    version: str = ""


@dataclass(frozen=True)
class VersionListResult:
    # (key ascending, newest version first) order; keys under the delimiter roll up.
    versions: list[VersionEntry]
    common_prefixes: list[str]
    is_truncated: bool
    # Where the next page starts: after this key (a whole common prefix when it is one), and
    # within it after this version id ("" when the page ended on a common prefix).
    next_key_marker: str | None = None
    next_version_id_marker: str | None = None


@dataclass(frozen=True)
class DeleteResult:
    """What a DeleteObject did, for its x-amz-version-id / x-amz-delete-marker answer."""

    version_id: str | None = None  # the delete marker made, or the version removed
    delete_marker: bool = False  # a marker was made (or the version removed was one)


@dataclass(frozen=True)
class ObjectStream:
    """A GET result: the object's info, the byte range served, and the bytes."""

    info: ObjectInfo
    start: int  # first byte served (inclusive)
    end: int  # last byte served (inclusive); end < start for an empty object
    body: AsyncIterator[bytes]
    # Set when the bytes live in a local file: (path, offset of byte 0 of the object in it).
    # Lets a server use sendfile and a co-located worker mmap the object without a copy.
    local_file: tuple[str, int] | None = None

    @property
    def length(self) -> int:
        return max(0, self.end - self.start + 1)


@dataclass(frozen=True)
class SelectResult:
    """A SelectObjectContent answer: response headers and the event-stream bytes (s3.eventstream).

    Backends that can run queries (a storage node on its own objects; the gateway, by sending the
    query to a node that holds the object or by fetching the object) have ``select_object(bucket,
    key, request_xml) -> SelectResult``; it raises S3Error for a request or query that cannot run,
    before any byte of the stream, so the client gets a plain 4xx."""

    headers: dict
    body: AsyncIterator[bytes]


class StorageBackend(Protocol):
    async def list_buckets(self) -> list[BucketInfo]: ...

    async def create_bucket(self, name: str, options: dict | None = None) -> BucketInfo: ...

    async def head_bucket(self, name: str) -> BucketInfo: ...

    async def delete_bucket(self, name: str) -> None: ...

    async def put_object(
        self,
        bucket: str,
        key: str,
        body: AsyncIterator[bytes],
        *,
        content_md5: bytes | None = None,  # raw 16-byte digest from Content-MD5, if sent
        content_type: str | None = None,
        metadata: dict | None = None,
        options: dict | None = None,  # e.g. {"dscs_replica": True}
    ) -> ObjectInfo: ...

    async def get_object(
        self, bucket: str, key: str, byte_range: tuple[int | None, int | None] | None = None
    ) -> ObjectStream: ...

    async def head_object(self, bucket: str, key: str) -> ObjectInfo: ...

    async def delete_object(self, bucket: str, key: str) -> None: ...

    async def list_objects(
        self,
        bucket: str,
        prefix: str = "",
        delimiter: str = "",
        max_keys: int = 1000,
        start_after: str = "",
    ) -> ListResult: ...

    async def create_multipart_upload(
        self,
        bucket: str,
        key: str,
        *,
        content_type: str | None = None,
        metadata: dict | None = None,
        upload_id: str | None = None,  # the gateway passes one id to every replica
    ) -> str: ...

    async def upload_part(
        self,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        body: AsyncIterator[bytes],
        *,
        content_md5: bytes | None = None,
    ) -> str: ...  # part ETag (MD5 hex)

    async def complete_multipart_upload(
        self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]]
    ) -> ObjectInfo: ...

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None: ...

    async def list_multipart_uploads(
        self,
        bucket: str,
        prefix: str = "",
        delimiter: str = "",
        max_uploads: int = 1000,
        key_marker: str = "",
        upload_id_marker: str = "",
    ) -> UploadListResult: ...


async def aclose(body) -> None:
    """Release an object body (an async generator) that may not have been read to its end."""
    close = getattr(body, "aclose", None)
    if close is not None:
        await close()
