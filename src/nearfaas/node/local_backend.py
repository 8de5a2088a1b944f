"""The StorageBackend of a storage node: its own ObjectStore on local disk.

Disk work that can block (file writes, fsync, renames, reads) runs in a thread executor so the
event loop never waits on the disk. Index lookups (HEAD, listing) are in-memory and run inline.
Incoming bodies are gathered into ~1 MiB batches and written while the next batch arrives, so a
64 MB upload costs a few dozen executor hops and never sits in memory.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from typing import TypeVar
from collections.abc import AsyncIterator, Callable

from nearfaas.node.objectstore import ObjectStore, OpenObject
from nearfaas.s3.bucket_policy_api import POLICY_OPTION
from nearfaas.s3.checksums import CHECKSUM_PREFIX, COMPUTE_HEADER
from nearfaas.s3.backend import (BucketInfo, DeleteResult, ListResult, ObjectInfo, ObjectStream, SelectResult, UploadListResult,
                                 VersionListResult)
from nearfaas.s3.validation import resolve_range

T = TypeVar("T")

READ_CHUNK = 256 * 1024
WRITE_BATCH = 1024 * 1024


class _FileChunks:
    """Async iterator over [start, end] of an open object; closes the file when done, on
    aclose(), or when dropped unconsumed."""

    def __init__(self, backend: LocalBackend, obj: OpenObject, start: int, end: int, chunk_size: int):
        self._backend, self._obj = backend, obj
        self._pos, self._end, self._chunk_size = start, end, chunk_size

    def __aiter__(self) -> _FileChunks:
        return self

    async def __anext__(self) -> bytes:
        if self._pos > self._end:
            self._obj.close()
            raise StopAsyncIteration
        want = min(self._chunk_size, self._end - self._pos + 1)
        try:
            data = await self._backend._run(self._obj.read, self._pos, want)
        except BaseException:
            self._obj.close()
            raise
        if len(data) != want:
            self._obj.close()
            raise OSError(f"object file {self._obj.path} is shorter than its header says")
        self._pos += len(data)
        return data

    async def aclose(self) -> None:
        self._obj.close()

    def __del__(self) -> None:
        self._obj.close()


class LocalBackend:
    def __init__(self, store: ObjectStore, *, executor: Executor | None = None,
                 read_chunk: int = READ_CHUNK, write_batch: int = WRITE_BATCH,
                 on_written: Callable[[str, str], None] | None = None):
        self.store = store
        # Told (bucket, key) after every committed write: the node sketches tabular objects.
        self.on_written = on_written
        self._executor = executor  # None: the event loop's default executor
        self._read_chunk = read_chunk
        self._write_batch = write_batch

    async def _run(self, fn: Callable[..., T], *args, **kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    # -- buckets --------------------------------------------------------------------------------

    async def list_buckets(self) -> list[BucketInfo]:
        return self.store.list_buckets()

    async def create_bucket(self, name: str, options: dict | None = None) -> BucketInfo:
        info, _created = await self._run(self.store.create_bucket, name, options)
        return info

    async def head_bucket(self, name: str) -> BucketInfo:
        return self.store.head_bucket(name)

    async def delete_bucket(self, name: str) -> None:
        await self._run(self.store.delete_bucket, name)

    async def get_bucket_versioning(self, name: str) -> str:
        self.store.head_bucket(name)
        return self.store.versioning(name)

    async def put_bucket_versioning(self, name: str, status: str) -> None:
        await self._run(self.store.set_versioning, name, status)

    async def put_bucket_policy(self, name: str, text: str | None) -> None:
        await self._run(self.store.set_option, name, POLICY_OPTION, text)

    # -- objects --------------------------------------------------------------------------------

    async def put_object(self, bucket: str, key: str, body: AsyncIterator[bytes], *,
                         content_md5: bytes | None = None, content_type: str | None = None,
                         metadata: dict | None = None, options: dict | None = None,
                         version: str | Callable[[], str] = "", copy_of: tuple[str, float] | None = None,
                         headers: dict | None = None, versioned: bool = False) -> ObjectInfo:
        """`options` (e.g. dscs_replica) steer placement in the gateway; a node stores as asked.
        `version` orders the write (the gateway's); a callable is asked once the body has been
        read, for a version that travels at the end of the body. `copy_of` (etag, last_modified):
        a repair copy of another replica's object, which keeps both. `headers`: the stored system
        headers (s3/checksums.py), whose checksums are filled in as the body ends: read then.
        `versioned`: made while the bucket's versioning was Enabled (node/versions.py)."""
        writer = await self._run(self.store.open_writer, bucket, key, content_type=content_type, metadata=metadata,
                                 headers=headers)
        await self._stream_into(writer, body)
        writer.version = version() if callable(version) else version
        writer.versioned = versioned
        writer.headers = _stored(headers)
        if copy_of is not None:
            info = await self._run(writer.commit, content_md5, etag=copy_of[0], last_modified=copy_of[1])
        else:
            info = await self._run(writer.commit, content_md5)
        return self._written(info)

    def _written(self, info: ObjectInfo) -> ObjectInfo:
        if self.on_written is not None:
            self.on_written(info.bucket, info.key)
        return self.store.public(info)

    async def _stream_into(self, writer, body: AsyncIterator[bytes]) -> None:
        """Write the body through the executor, one batch on the disk while the next arrives.
        On any failure (bad body, disconnect, cancellation) the writer is aborted."""
        pending: asyncio.Future | None = None
        batch = bytearray()
        try:
            async for chunk in body:
                batch += chunk
                if len(batch) >= self._write_batch:
                    if pending is not None:
                        await pending
                    pending = asyncio.ensure_future(self._run(writer.write, batch))
                    batch = bytearray()
            if pending is not None:
                await pending
                pending = None
            if batch:
                await self._run(writer.write, batch)
        except BaseException:
            if pending is not None and not pending.done():
                # Let the write in flight finish so the temp file is gone before the error
                # response goes out; its own failure is beside the point now.
                try:
                    await asyncio.shield(pending)
                except BaseException:
                    pass
            if pending is not None and not pending.done():
                # Cancelled again while waiting: the thread still owns the file descriptor, so
                # abort only once it is done with it.
                pending.add_done_callback(lambda _f: self._abort_in_executor(writer))
            else:
                writer.abort()  # close + unlink of a temp file: no fsync, fine on the loop
            raise

    def _abort_in_executor(self, writer) -> None:
        asyncio.get_running_loop().run_in_executor(self._executor, writer.abort)

    async def get_object(self, bucket: str, key: str,
                         byte_range: tuple[int | None, int | None] | None = None, *,
                         version_id: str | None = None) -> ObjectStream:
        if version_id is not None:
            obj = await self._run(self.store.open_version, bucket, key, version_id)
        else:
            obj = await self._run(self.store.open_object, bucket, key)
        try:
            start, end = resolve_range(byte_range, obj.info.size)
        except BaseException:
            obj.close()
            raise
        return ObjectStream(
            info=self.store.public(obj.info), start=start, end=end,
            body=_FileChunks(self, obj, start, end, self._read_chunk),
            local_file=(str(obj.path), obj.data_offset),
        )

    async def select_object(self, bucket: str, key: str, request_xml: bytes) -> SelectResult:
        """S3 Select on this node's own copy: the query runs next to the data."""
        from nearfaas.dataservices.select import parse_request, select_object_stream

        parse_request(request_xml)  # a bad request is refused before the object is opened
        return await select_object_stream(await self.get_object(bucket, key), request_xml, key, "near-data")

    async def head_object(self, bucket: str, key: str, *, version_id: str | None = None) -> ObjectInfo:
        if version_id is not None:
            return self.store.head_version(bucket, key, version_id)
        return self.store.public(self.store.head_object(bucket, key))

    async def delete_object(self, bucket: str, key: str, version: str | None = None, *, versioned: bool = False,
                            version_id: str | None = None) -> DeleteResult | None:
        """A delete (a tombstone or delete marker with the gateway's ``version``), or, with
        ``version_id``, the removal of that one version for good (``version``: the gateway's clock)."""
        if version_id is not None:
            return await self._run(self.store.delete_version, bucket, key, version_id, version or "")
        await self._run(self.store.delete_object, bucket, key, version, versioned=versioned)
        if version is not None and self.store.versioning(bucket):
            return DeleteResult(version_id=version if versioned else "null", delete_marker=True)
        return None

    async def list_object_versions(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                                   key_marker: str = "", version_id_marker: str = "") -> VersionListResult:
        return self.store.list_versions(bucket, prefix, delimiter, max_keys, key_marker, version_id_marker)

    async def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", max_keys: int = 1000,
                           start_after: str = "") -> ListResult:
        return self.store.list_objects(bucket, prefix, delimiter, max_keys, start_after)

    # -- multipart ------------------------------------------------------------------------------

    async def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None,
                                      metadata: dict | None = None, upload_id: str | None = None,
                                      headers: dict | None = None) -> str:
        return await self._run(self.store.create_multipart_upload, bucket, key, content_type=content_type,
                               metadata=metadata, upload_id=upload_id, headers=headers)

    async def upload_part(self, bucket: str, key: str, upload_id: str, part_number: int,
                          body: AsyncIterator[bytes], *, content_md5: bytes | None = None,
                          headers: dict | None = None) -> str:
        """`headers`: the part's checksums, filled in as the body ends (s3/checksums.py)."""
        writer = await self._run(self.store.open_part_writer, bucket, key, upload_id, part_number)
        await self._stream_into(writer, body)
        sums = {k: v for k, v in _stored(headers).items() if k.startswith(CHECKSUM_PREFIX)}
        return await self._run(writer.commit, content_md5, checksums=sums)

    async def complete_multipart_upload(self, bucket: str, key: str, upload_id: str, parts: list[tuple[int, str]],
                                        version: str = "", part_checksums: dict | None = None,
                                        versioned: bool = False) -> ObjectInfo:
        return self._written(await self._run(self.store.complete_multipart_upload, bucket, key, upload_id, parts,
                                             version=version, part_checksums=part_checksums, versioned=versioned))

    async def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._run(self.store.abort_multipart_upload, bucket, key, upload_id)

    async def list_parts(self, bucket: str, key: str, upload_id: str, max_parts: int = 1000, part_number_marker: int = 0):
        return await self._run(self.store.list_parts, bucket, key, upload_id, max_parts, part_number_marker)

    async def list_multipart_uploads(self, bucket: str, prefix: str = "", delimiter: str = "", max_uploads: int = 1000,
                                     key_marker: str = "", upload_id_marker: str = "") -> UploadListResult:
        # In memory (the store indexes its uploads), like list_objects: no executor hop.
        return self.store.list_multipart_uploads(bucket, prefix, delimiter, max_uploads, key_marker, upload_id_marker)


def _stored(headers: dict | None) -> dict:
    """The headers to store, once the body has ended (less the node client's instruction)."""
    return {k: v for k, v in (headers or {}).items() if k != COMPUTE_HEADER}
