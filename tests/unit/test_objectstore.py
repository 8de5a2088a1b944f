"""The node's durable object store: format, durability, index, listing, multipart, validation."""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedDict

from nearfaas.node.objectfile import DATA_OFFSET, MAGIC, locate_object, object_path
from nearfaas.node.objectstore import ObjectStore, _list_page
from nearfaas.s3.backend import ObjectInfo
from nearfaas.s3.errors import S3Error
from nearfaas.s3.validation import (
    parse_range_header,
    resolve_range,
    validate_bucket_name,
    validate_key,
)

from store_fixtures import *  # noqa: F403  (the store fixture)

pytestmark = pytest.mark.timeout(60)




def reopen(store: ObjectStore, **kwargs) -> ObjectStore:
    store.close()
    return ObjectStore(store.root, min_part_size=5, **kwargs)


def tmp_entries(store: ObjectStore) -> list[str]:
    return sorted(os.listdir(store.root / "tmp"))


def error_code(excinfo) -> str:
    return excinfo.value.code


# -- format and reads ---------------------------------------------------------------------------


def test_put_get_head_roundtrip(store):
    info = store.put_object("bkt", "dir/a.txt", b"hello", content_type="text/plain", metadata={"Owner": "me"})
    assert info.etag == hashlib.md5(b"hello").hexdigest()
    assert (info.size, info.content_type, info.metadata) == (5, "text/plain", {"owner": "me"})
    assert store.get_object("bkt", "dir/a.txt") == b"hello"
    assert store.get_object("bkt", "dir/a.txt", 1, 3) == b"ell"
    assert store.head_object("bkt", "dir/a.txt") == info
    assert store.counters.snapshot() == {"bytes_in": 5, "bytes_out": 8, "objects": 1, "uploads_expired": 0,
                                         "upload_bytes_reclaimed": 0}


def test_object_file_layout_is_page_aligned_and_mmappable(store):
    payload = os.urandom(10_000)
    store.put_object("bkt", "k", payload)
    path, offset, info = store.locate("bkt", "k")
    assert offset == DATA_OFFSET == 4096
    digest = hashlib.sha256(b"k").hexdigest()
    assert Path(path) == store.root / "buckets" / "bkt" / "objects" / digest[:2] / digest
    raw = Path(path).read_bytes()
    assert raw.startswith(MAGIC) and raw[offset:] == payload
    # A worker process needs no ObjectStore: the module-level lookup reads only the header.
    path2, offset2, info2 = locate_object(store.root, "bkt", "k")
    assert (path2, offset2, info2) == (str(path), offset, info)
    with open(path2, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert m[offset2:offset2 + info2.size] == payload


def test_locate_object_errors(store):
    with pytest.raises(S3Error) as e:
        locate_object(store.root, "bkt", "missing")
    assert error_code(e) == "NoSuchKey"
    with pytest.raises(S3Error) as e:
        locate_object(store.root, "nobucket", "k")
    assert error_code(e) == "NoSuchBucket"
    with pytest.raises(S3Error) as e:
        locate_object(store.root, "bkt", "../../etc/passwd")
    assert error_code(e) == "InvalidObjectName"


def test_large_header_moves_data_to_next_page(store):
    metadata = {f"m{i}": "\"\\" * 40 for i in range(20)}  # JSON escaping doubles these bytes
    store.put_object("bkt", "k" * 1000, b"data", metadata=metadata, content_type="x/" + "y" * 1500)
    _, offset, info = store.locate("bkt", "k" * 1000)
    assert offset % 4096 == 0 and offset >= 4096
    assert info.metadata == metadata
    assert store.get_object("bkt", "k" * 1000) == b"data"


def test_streaming_writer_in_chunks(store):
    md5 = hashlib.md5()
    with store.open_writer("bkt", "big", content_type="application/x-test") as writer:
        for i in range(64):
            chunk = bytes([i]) * 65536
            md5.update(chunk)
            writer.write(chunk)
        info = writer.commit(md5.digest())
    assert info.size == 64 * 65536 and info.etag == md5.hexdigest()
    with store.open_object("bkt", "big") as obj:
        assert obj.read(65536 * 3, 4) == b"\x03" * 4


def test_overwrite_replaces_and_keeps_count(store):
    store.put_object("bkt", "k", b"one")
    store.put_object("bkt", "k", b"two!")
    assert store.get_object("bkt", "k") == b"two!"
    assert store.counters.objects == 1
    assert store.head_object("bkt", "k").size == 4


def test_reader_keeps_consistent_snapshot_across_overwrite(store):
    store.put_object("bkt", "k", b"old-bytes")
    with store.open_object("bkt", "k") as obj:
        store.put_object("bkt", "k", b"new")
        store.delete_object("bkt", "k")
        assert obj.info.size == 9 and obj.read(0, 9) == b"old-bytes"


# -- durability ---------------------------------------------------------------------------------


def test_bad_digest_discards_the_write(store):
    with pytest.raises(S3Error) as e:
        store.put_object("bkt", "k", b"hello", content_md5=hashlib.md5(b"other").digest())
    assert error_code(e) == "BadDigest"
    assert tmp_entries(store) == []
    with pytest.raises(S3Error) as e:
        store.head_object("bkt", "k")
    assert error_code(e) == "NoSuchKey"


def test_writer_aborted_midway_leaves_nothing(store):
    writer = store.open_writer("bkt", "partial")
    writer.write(b"x" * 100_000)
    assert len(tmp_entries(store)) == 1  # the data only ever lives in tmp/
    assert store.list_objects("bkt").contents == []
    writer.abort()
    assert tmp_entries(store) == []
    with pytest.raises(RuntimeError):
        writer.write(b"more")
    with pytest.raises(S3Error):
        store.get_object("bkt", "partial")


def test_exception_inside_writer_context_aborts(store):
    with pytest.raises(ValueError), store.open_writer("bkt", "k") as writer:
        writer.write(b"abc")
        raise ValueError("client went away")
    assert tmp_entries(store) == [] and store.list_objects("bkt").contents == []


def test_crash_before_commit_leaves_no_object_and_tmp_is_cleared(store):
    store.put_object("bkt", "kept", b"durable")
    writer = store.open_writer("bkt", "in-flight")  # the "crash": never committed nor aborted
    writer.write(b"y" * 5000)
    (store.root / "tmp" / "stray.deleted").mkdir()  # a half-finished delete
    store2 = reopen(store)
    try:
        assert tmp_entries(store2) == []
        assert [o.key for o in store2.list_objects("bkt").contents] == ["kept"]
        assert store2.get_object("bkt", "kept") == b"durable"
    finally:
        store2.close()


def test_restart_rebuilds_index_and_counters(store):
    keys = ["a", "b/c", "b/d", "ü/ñ", "z" * 300]
    for i, key in enumerate(keys):
        store.put_object("bkt", key, b"v" * i, metadata={"i": str(i)}, content_type="t/x")
    store.create_bucket("other", {"dscs_replica": True})
    before = store.list_objects("bkt").contents
    store2 = reopen(store)
    try:
        assert store2.list_objects("bkt").contents == before
        assert store2.head_bucket("other").options == {"dscs_replica": True}
        assert store2.counters.objects == len(keys)
        assert store2.head_object("bkt", "b/c").metadata == {"i": "1"}
    finally:
        store2.close()


def test_corrupt_object_file_is_skipped_at_startup(store, caplog):
    store.put_object("bkt", "good", b"fine")
    store.put_object("bkt", "bad", b"will be truncated")
    with open(object_path(store.root, "bkt", "bad"), "r+b") as f:
        f.truncate(4100)
    store2 = reopen(store)
    try:
        assert [o.key for o in store2.list_objects("bkt").contents] == ["good"]
        assert "skipping unreadable object file" in caplog.text
    finally:
        store2.close()


def test_one_store_per_root(store):
    with pytest.raises(RuntimeError, match="already holds"):
        ObjectStore(store.root)


def test_concurrent_writers_from_threads(store):
    errors = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                store.put_object("bkt", f"t{n}/{i}", f"{n}-{i}".encode())
                store.put_object("bkt", "shared", f"{n}-{i}".encode())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.counters.objects == 6 * 20 + 1
    shared = store.get_object("bkt", "shared")
    assert store.head_object("bkt", "shared").etag == hashlib.md5(shared).hexdigest()
    store2 = reopen(store)
    try:
        assert store2.counters.objects == 121 and tmp_entries(store2) == []
    finally:
        store2.close()


# -- buckets ------------------------------------------------------------------------------------


def test_bucket_lifecycle(store):
    info, created = store.create_bucket("bk2", {"dscs_replica": True})
    assert created and info.options == {"dscs_replica": True}
    again, created = store.create_bucket("bk2", {})
    assert not created and again == info  # idempotent: the original options stay
    assert [b.name for b in store.list_buckets()] == ["bk2", "bkt"]
    store.put_object("bk2", "k", b"x")
    with pytest.raises(S3Error) as e:
        store.delete_bucket("bk2")
    assert error_code(e) == "BucketNotEmpty" and e.value.status == 409
    upload = store.create_multipart_upload("bk2", "mp")
    store.delete_object("bk2", "k")
    store.delete_bucket("bk2")
    assert not (store.root / "uploads" / upload).exists()  # its uploads went with it
    for call in (lambda: store.head_bucket("bk2"), lambda: store.put_object("bk2", "k", b""),
                 lambda: store.list_objects("bk2"), lambda: store.delete_object("bk2", "k"),
                 lambda: store.delete_bucket("bk2")):
        with pytest.raises(S3Error) as e:
            call()
        assert error_code(e) == "NoSuchBucket" and e.value.status == 404


def test_write_racing_a_bucket_delete_leaves_no_trace(store):
    store.create_bucket("racy")
    writer = store.open_writer("racy", "k")
    writer.write(b"data")
    store.delete_bucket("racy")
    with pytest.raises(S3Error) as e:
        writer.commit()
    assert error_code(e) == "NoSuchBucket"
    assert not (store.root / "buckets" / "racy").exists() and tmp_entries(store) == []
    store.create_bucket("racy")  # the name is free again
    assert store.put_object("racy", "k", b"x").size == 1


@pytest.mark.parametrize("name", ["abc", "a-b.c", "x" * 63, "0bucket", "my.bucket.1"])
def test_valid_bucket_names(name):
    validate_bucket_name(name)


@pytest.mark.parametrize("name", ["ab", "x" * 64, "Upper", "under_score", "-start", "end-", ".dot",
                                  "a..b", "192.168.1.1", "a/b", "", "xn--abc", "a.-b", "bkt-s3alias"])
def test_invalid_bucket_names(tmp_path, name):
    with pytest.raises(S3Error) as e:
        validate_bucket_name(name)
    assert error_code(e) == "InvalidBucketName"


# -- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["a", "a/b/c", "..a", "a..b", "a/.../b", ".hidden", "/leading", "a//b",
                                 "ü" * 512, "k" * 1024, "sp ace+plus%percent"])
def test_valid_keys(store, key):
    store.put_object("bkt", key, b"x")
    assert store.get_object("bkt", key) == b"x"


@pytest.mark.parametrize("key,code", [
    ("", "InvalidArgument"),
    ("k" * 1025, "KeyTooLongError"),
    ("ü" * 513, "KeyTooLongError"),
    ("a\x00b", "InvalidObjectName"),
    ("a\nb", "InvalidObjectName"),
    ("a\x7fb", "InvalidObjectName"),
    (".", "InvalidObjectName"),
    ("..", "InvalidObjectName"),
    ("a/../b", "InvalidObjectName"),
    ("a/./b", "InvalidObjectName"),
    ("a/..", "InvalidObjectName"),
    ("\ud800", "InvalidArgument"),
    ("a\uffffb", "InvalidArgument"),
    ("\ufffe", "InvalidArgument"),
    ("x\ufdd0", "InvalidArgument"),
    ("x\U0001fffe", "InvalidArgument"),
    ("x\U0010ffff", "InvalidArgument"),
])
def test_invalid_keys(store, key, code):
    with pytest.raises(S3Error) as e:
        store.put_object("bkt", key, b"x")
    assert error_code(e) == code and e.value.status == 400
    assert tmp_entries(store) == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=1100))
def test_key_validation_property(key):
    try:
        validate_key(key)
    except S3Error as exc:
        assert exc.code in {"InvalidArgument", "KeyTooLongError", "InvalidObjectName"} and exc.status == 400
        return
    encoded = key.encode("utf-8")
    assert 1 <= len(encoded) <= 1024
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in key)
    assert not {".", ".."} & set(key.split("/"))
    # The file name is a hash: whatever the key, the path stays inside the bucket directory.
    path = object_path(Path("/r"), "bkt", key)
    assert path.parent.parent == Path("/r/buckets/bkt/objects")


def test_entity_too_large_and_metadata_too_large(tmp_path):
    store = ObjectStore(tmp_path / "n", max_object_size=10)
    try:
        store.create_bucket("bkt")
        with pytest.raises(S3Error) as e:
            store.put_object("bkt", "k", b"x" * 11)
        assert error_code(e) == "EntityTooLarge"
        assert store.put_object("bkt", "k", b"x" * 10).size == 10
        with pytest.raises(S3Error) as e:
            store.put_object("bkt", "m", b"", metadata={"big": "v" * 2100})
        assert error_code(e) == "MetadataTooLarge"
        for metadata, content_type in (({"bad name": "v"}, None), ({"n": "line\nbreak"}, None), ({}, "text/\x00")):
            with pytest.raises(S3Error) as e:
                store.put_object("bkt", "m", b"", metadata=metadata, content_type=content_type)
            assert error_code(e) == "InvalidArgument"
        assert tmp_entries(store) == []
    finally:
        store.close()


# -- listing ------------------------------------------------------------------------------------


def test_list_prefix_delimiter_start_after(store):
    for key in ["a/1", "a/2", "a/b/3", "b", "c/x/1", "c/y", "d"]:
        store.put_object("bkt", key, b"")
    page = store.list_objects("bkt", delimiter="/")
    assert [o.key for o in page.contents] == ["b", "d"]
    assert page.common_prefixes == ["a/", "c/"] and not page.is_truncated
    page = store.list_objects("bkt", prefix="a/", delimiter="/")
    assert [o.key for o in page.contents] == ["a/1", "a/2"] and page.common_prefixes == ["a/b/"]
    page = store.list_objects("bkt", prefix="c/", start_after="c/x/1")
    assert [o.key for o in page.contents] == ["c/y"]
    page = store.list_objects("bkt", delimiter="/", max_keys=2)
    assert page.common_prefixes == ["a/"] and [o.key for o in page.contents] == ["b"]
    assert page.is_truncated and page.next_marker == "b"
    page = store.list_objects("bkt", delimiter="/", max_keys=1, start_after="a/")
    assert [o.key for o in page.contents] == ["b"]  # the whole a/ group is skipped
    assert store.list_objects("bkt", max_keys=0).contents == []
    assert store.list_objects("bkt", prefix="zzz").contents == []


def _paginate(index: SortedDict, prefix: str, delimiter: str, max_keys: int) -> list[str]:
    seen: list[str] = []
    marker = ""
    for _ in range(10_000):
        page = _list_page(index, prefix, delimiter, max_keys, marker)
        assert len(page.contents) + len(page.common_prefixes) <= max_keys
        seen += [o.key for o in page.contents] + page.common_prefixes
        if not page.is_truncated:
            return seen
        assert page.next_marker is not None and page.next_marker > marker
        marker = page.next_marker
    raise AssertionError("pagination did not terminate")


def _expected_entries(keys: set[str], prefix: str, delimiter: str) -> list[str]:
    out = set()
    for key in keys:
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if delimiter and delimiter in rest:
            out.add(prefix + rest[: rest.index(delimiter) + len(delimiter)])
        else:
            out.add(key)
    return sorted(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.sets(st.text(alphabet="ab/-\u00fc", min_size=1, max_size=6), max_size=40),
       prefix=st.sampled_from(["", "a", "a/", "b/", "\u00fc"]),
       delimiter=st.sampled_from(["", "/", "-", "b/"]),
       max_keys=st.integers(min_value=1, max_value=7))
def test_pagination_returns_every_entry_exactly_once(keys, prefix, delimiter, max_keys):
    index = SortedDict({k: ObjectInfo("bkt", k, 0, "", 0.0) for k in keys})
    got = _paginate(index, prefix, delimiter, max_keys)
    assert len(got) == len(set(got)), "an entry was returned twice"
    assert sorted(got) == _expected_entries(keys, prefix, delimiter)


# -- ranges -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(size=st.integers(0, 50), a=st.one_of(st.none(), st.integers(0, 60)), b=st.one_of(st.none(), st.integers(0, 60)))
def test_range_parsing_matches_slicing(size, a, b):
    header = f"bytes={'' if a is None else a}-{'' if b is None else b}"
    parsed = parse_range_header(header)
    data = bytes(range(size))
    if (a is None and b is None) or (a is not None and b is not None and b < a):
        assert parsed is None  # syntactically invalid: ignored, the whole object is served
        return
    if a is None:
        expected = data[-b:] if b else b""
    else:
        expected = data[a:] if b is None else data[a:b + 1]
    try:
        start, end = resolve_range(parsed, size)
    except S3Error as exc:
        assert exc.code == "InvalidRange" and exc.status == 416 and expected == b""
        return
    assert data[start:end + 1] == expected != b""


@pytest.mark.parametrize("header", ["bytes=1-2,4-5", "items=0-1", "bytes=x-1", "bytes=-", "", "bytes=١-٢"])
def test_unusable_range_headers_are_ignored(header):
    assert parse_range_header(header) is None


# -- multipart ----------------------------------------------------------------------------------


def test_multipart_complete(store):
    upload = store.create_multipart_upload("bkt", "mp", content_type="video/x", metadata={"a": "1"})
    parts = [b"p" * 7, b"q" * 6, b"r" * 2]
    etags = [store.upload_part("bkt", "mp", upload, i + 1, data) for i, data in enumerate(parts)]
    assert etags == [hashlib.md5(p).hexdigest() for p in parts]
    info = store.complete_multipart_upload("bkt", "mp", upload, [(i + 1, f'"{e}"') for i, e in enumerate(etags)])
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    assert info.etag == expected and info.size == 15
    assert (info.content_type, info.metadata) == ("video/x", {"a": "1"})
    assert store.get_object("bkt", "mp") == b"".join(parts)
    assert not (store.root / "uploads" / upload).exists() and tmp_entries(store) == []
    with pytest.raises(S3Error) as e:
        store.complete_multipart_upload("bkt", "mp", upload, [(1, etags[0])])
    assert error_code(e) == "NoSuchUpload"


def test_multipart_subset_of_parts_and_replaced_part(store):
    upload = store.create_multipart_upload("bkt", "mp")
    store.upload_part("bkt", "mp", upload, 1, b"first")
    e1 = store.upload_part("bkt", "mp", upload, 1, b"FIRST")  # re-upload replaces the part
    store.upload_part("bkt", "mp", upload, 2, b"unused")
    e3 = store.upload_part("bkt", "mp", upload, 3, b"last")
    store.complete_multipart_upload("bkt", "mp", upload, [(1, e1), (3, e3)])
    assert store.get_object("bkt", "mp") == b"FIRSTlast"


def test_multipart_errors(store):
    upload = store.create_multipart_upload("bkt", "mp")
    e1 = store.upload_part("bkt", "mp", upload, 1, b"12345")
    e2 = store.upload_part("bkt", "mp", upload, 2, b"678")
    e3 = store.upload_part("bkt", "mp", upload, 3, b"9")

    def complete_code(parts) -> str:
        with pytest.raises(S3Error) as exc:
            store.complete_multipart_upload("bkt", "mp", upload, parts)
        return exc.value.code

    assert complete_code([(2, e2), (1, e1)]) == "InvalidPartOrder"
    assert complete_code([(1, e1), (1, e1)]) == "InvalidPartOrder"
    assert complete_code([(1, e1), (4, e2)]) == "InvalidPart"
    assert complete_code([(1, e2), (2, e2)]) == "InvalidPart"
    assert complete_code([(1, e1), (2, e2), (3, e3)]) == "EntityTooSmall"  # part 2 < 5 bytes
    assert complete_code([]) == "MalformedXML"
    with pytest.raises(S3Error) as e:
        store.upload_part("bkt", "mp", upload, 10_001, b"x")
    assert error_code(e) == "InvalidArgument"
    with pytest.raises(S3Error) as e:
        store.upload_part("bkt", "mp", upload, 1, b"x", content_md5=hashlib.md5(b"y").digest())
    assert error_code(e) == "BadDigest"
    with pytest.raises(S3Error) as e:
        store.upload_part("bkt", "other-key", upload, 1, b"x")
    assert error_code(e) == "NoSuchUpload"
    store.complete_multipart_upload("bkt", "mp", upload, [(1, e1), (3, e3)])  # still completable
    with pytest.raises(S3Error) as e:
        store.abort_multipart_upload("bkt", "mp", upload)
    assert error_code(e) == "NoSuchUpload"


def test_multipart_abort_and_caller_supplied_ids(store):
    assert store.create_multipart_upload("bkt", "mp", upload_id="gw-123") == "gw-123"
    assert store.create_multipart_upload("bkt", "mp", upload_id="gw-123") == "gw-123"  # idempotent
    with pytest.raises(S3Error) as e:
        store.create_multipart_upload("bkt", "other", upload_id="gw-123")
    assert error_code(e) == "InvalidArgument"
    for bad in ["../escape", ".", "a/b", "x" * 200, ""]:
        with pytest.raises(S3Error) as e:
            store.create_multipart_upload("bkt", "mp", upload_id=bad)
        assert error_code(e) == "InvalidArgument"
    store.upload_part("bkt", "mp", "gw-123", 1, b"data")
    store.abort_multipart_upload("bkt", "mp", "gw-123")
    assert os.listdir(store.root / "uploads") == [] and tmp_entries(store) == []
    with pytest.raises(S3Error) as e:
        store.upload_part("bkt", "mp", "gw-123", 1, b"data")
    assert error_code(e) == "NoSuchUpload"
    with pytest.raises(S3Error) as e:
        store.create_multipart_upload("nobucket", "mp")
    assert error_code(e) == "NoSuchBucket"


def test_multipart_state_survives_restart(store):
    upload = store.create_multipart_upload("bkt", "mp", metadata={"x": "y"})
    e1 = store.upload_part("bkt", "mp", upload, 1, b"hello")
    (store.root / "uploads" / "half-created").mkdir()  # a create that crashed before upload.json
    store2 = reopen(store)
    try:
        assert not (store2.root / "uploads" / "half-created").exists()
        e2 = store2.upload_part("bkt", "mp", upload, 2, b" world")
        info = store2.complete_multipart_upload("bkt", "mp", upload, [(1, e1), (2, e2)])
        assert store2.get_object("bkt", "mp") == b"hello world" and info.metadata == {"x": "y"}
    finally:
        store2.close()


def test_a_write_that_would_take_the_disk_below_its_floor_is_refused_and_stores_nothing(store):
    # Red team round 6 (R5): nothing kept a tenant's PUTs from filling the filesystem that every
    # node's store, the gateway's journal and the logs share. A store leaves min_free (5 % of
    # the filesystem, 256 MiB to 2 GiB) free: past it a write is InsufficientStorage (507) and
    # nothing is stored, a plain object, a copy and a multipart part alike.
    st = os.statvfs(store.root)
    free = st.f_bavail * st.f_frsize
    store.put_object("bkt", "before", b"fits")
    store.min_free = free + (1 << 40)  # a floor above what is free: every write refused
    with pytest.raises(S3Error) as refused:
        store.put_object("bkt", "k", b"x" * 100)
    assert refused.value.code == "InsufficientStorage" and refused.value.status == 507
    assert "free" in refused.value.message and "nothing stored" in refused.value.message
    upload = store.create_multipart_upload("bkt", "mp")
    with pytest.raises(S3Error) as part:
        store.upload_part("bkt", "mp", upload, 1, b"y" * 100)
    assert part.value.code == "InsufficientStorage"
    assert tmp_entries(store) == []  # no temp file left behind
    assert store.head_object("bkt", "before").size == 4
    with pytest.raises(S3Error):
        store.head_object("bkt", "k")
    store.min_free = 0  # space again: writes go on
    store.put_object("bkt", "k", b"x" * 100)
    assert store.head_object("bkt", "k").size == 100


def test_the_default_floor_is_five_percent_of_the_filesystem_within_bounds(tmp_path):
    from nearfaas.node.disk_floor import default_min_free

    st = os.statvfs(tmp_path)
    floor = default_min_free(tmp_path)
    assert 256 << 20 <= floor <= 2 << 30
    assert floor == max(256 << 20, min(st.f_blocks * st.f_frsize // 20, 2 << 30))
