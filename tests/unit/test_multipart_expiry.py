"""Multipart leftovers on a storage node: expiry, start-up cleanup and ListMultipartUploads."""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.node.multipart import list_upload_page, sweep_expired_uploads
from nearfaas.node.objectstore import ObjectStore
from nearfaas.s3.backend import UploadInfo
from nearfaas.s3.errors import S3Error

from store_fixtures import *  # noqa: F403  (the store fixture)

pytestmark = pytest.mark.timeout(60)




def reopen(store: ObjectStore) -> ObjectStore:
    store.close()
    return ObjectStore(store.root, min_part_size=5)


def backdate(store: ObjectStore, upload_id: str, seconds: float) -> None:
    """Make an upload `seconds` older, on disk and in the store's index of uploads."""
    path = store.root / "uploads" / upload_id / "upload.json"
    record = json.loads(path.read_text())
    record["created"] -= seconds
    path.write_text(json.dumps(record))
    store.uploads._records[upload_id]["created"] -= seconds


def test_expire_aborts_only_old_uploads_and_counts_their_bytes(store):
    old = store.create_multipart_upload("bkt", "old")
    store.upload_part("bkt", "old", old, 1, b"x" * 1000)
    store.upload_part("bkt", "old", old, 2, b"y" * 500)
    young = store.create_multipart_upload("bkt", "young")
    store.upload_part("bkt", "young", young, 1, b"z" * 10)
    removed, reclaimed = store.uploads.expire(60, now=time.time() + 30)
    assert (removed, reclaimed) == (0, 0)
    backdate(store, old, 120)
    removed, reclaimed = store.uploads.expire(60)
    # Two part files, each a 4 KiB header page plus its bytes, and upload.json.
    assert removed == 1 and reclaimed >= 2 * 4096 + 1500
    assert store.counters.snapshot()["uploads_expired"] == 1
    assert store.counters.snapshot()["upload_bytes_reclaimed"] == reclaimed
    assert not (store.root / "uploads" / old).exists() and os.listdir(store.root / "tmp") == []
    with pytest.raises(S3Error) as e:
        store.upload_part("bkt", "old", old, 3, b"late")
    assert e.value.code == "NoSuchUpload"
    assert [u.key for u in store.list_multipart_uploads("bkt").uploads] == ["young"]
    etag = store.upload_part("bkt", "young", young, 2, b"w")
    assert store.complete_multipart_upload("bkt", "young", young, [(2, etag)]).size == 1


def test_a_part_streaming_in_when_its_upload_expires_is_refused_and_leaves_nothing(store):
    upload = store.create_multipart_upload("bkt", "k")
    with store.open_part_writer("bkt", "k", upload, 1) as writer:
        writer.write(b"partial")
        assert store.uploads.expire(0) == (1, store.counters.snapshot()["upload_bytes_reclaimed"])
        with pytest.raises(S3Error) as e:
            writer.commit()
    assert e.value.code == "NoSuchUpload"
    assert os.listdir(store.root / "tmp") == [] and os.listdir(store.root / "uploads") == []


def test_the_sweep_leaves_an_upload_being_completed_alone(store, monkeypatch):
    upload = store.create_multipart_upload("bkt", "k")
    etag = store.upload_part("bkt", "k", upload, 1, b"data")
    real_complete = store.uploads._complete
    swept = []

    def complete_while_the_sweep_runs(*args, **kwargs):
        swept.append(store.uploads.expire(0))  # every upload is past an age of 0
        return real_complete(*args, **kwargs)

    monkeypatch.setattr(store.uploads, "_complete", complete_while_the_sweep_runs)
    assert store.complete_multipart_upload("bkt", "k", upload, [(1, etag)]).size == 4
    assert swept == [(0, 0)] and store.get_object("bkt", "k") == b"data"
    assert store.list_multipart_uploads("bkt").uploads == []


def test_start_up_removes_uploads_whose_record_is_gone_torn_or_orphaned(store, caplog):
    good = store.create_multipart_upload("bkt", "keep")
    store.upload_part("bkt", "keep", good, 1, b"kept")
    store.create_bucket("gone")
    orphan = store.create_multipart_upload("gone", "k")
    store.upload_part("gone", "k", orphan, 1, b"o" * 100)
    uploads = store.root / "uploads"
    # A create that crashed before its upload.json, one whose upload.json is torn, one that
    # names another upload, and a stray file.
    (uploads / "norecord").mkdir()
    (uploads / "norecord" / "part-00001").write_bytes(b"p" * 5000)
    (uploads / "torn").mkdir()
    (uploads / "torn" / "upload.json").write_bytes(b'{"upload_id": "torn", "buck')
    (uploads / "torn" / "part-00001").write_bytes(b"t" * 3000)
    (uploads / "other").mkdir()
    (uploads / "other" / "upload.json").write_text(json.dumps({"upload_id": "x", "bucket": "bkt", "key": "k",
                                                              "created": time.time()}))
    (uploads / "stray").write_bytes(b"s" * 10)
    store.delete_bucket("gone")  # deleting a bucket aborts its uploads: put one back by hand
    (uploads / orphan).mkdir()
    (uploads / orphan / "upload.json").write_text(json.dumps({"upload_id": orphan, "bucket": "gone", "key": "k",
                                                             "created": time.time()}))
    store2 = reopen(store)
    try:
        assert sorted(os.listdir(uploads)) == [good]
        stats = store2.counters.snapshot()
        assert stats["uploads_expired"] == 5 and stats["upload_bytes_reclaimed"] >= 8010
        assert "torn" in caplog.text and "no longer exists" in caplog.text
        assert [u.upload_id for u in store2.list_multipart_uploads("bkt").uploads] == [good]
        etag = store2.upload_part("bkt", "keep", good, 2, b"!")
        parts = [(1, store2.uploads._open_part(good, 1)[2]["etag"]), (2, etag)]
        with pytest.raises(S3Error):
            store2.complete_multipart_upload("bkt", "keep", good, [(2, etag), (1, parts[0][1])])
        assert store2.complete_multipart_upload("bkt", "keep", good, [(2, etag)]).size == 1
    finally:
        store2.close()


def test_sweep_task_expires_uploads_in_the_background(store):
    upload = store.create_multipart_upload("bkt", "k")
    store.upload_part("bkt", "k", upload, 1, b"abc")

    async def scenario():
        task = asyncio.ensure_future(sweep_expired_uploads(store.uploads, 0.3, interval=0.05))
        try:
            deadline = time.monotonic() + 10
            while store.list_multipart_uploads("bkt").uploads and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            task.cancel()
        return time.monotonic() - (deadline - 10)

    waited = asyncio.run(scenario())
    assert store.list_multipart_uploads("bkt").uploads == [] and waited >= 0.2
    assert store.counters.snapshot()["uploads_expired"] == 1


# -- ListMultipartUploads paging ----------------------------------------------------------------


def test_list_uploads_prefix_delimiter_and_markers(store):
    ids = {}
    for key in ("a/1", "a/2", "b", "b", "c/d/e", "z"):
        ids.setdefault(key, []).append(store.create_multipart_upload("bkt", key))
    page = store.list_multipart_uploads("bkt")
    assert [u.key for u in page.uploads] == ["a/1", "a/2", "b", "b", "c/d/e", "z"] and not page.is_truncated
    b_ids = sorted(ids["b"])
    assert [u.upload_id for u in page.uploads if u.key == "b"] == b_ids
    top = store.list_multipart_uploads("bkt", delimiter="/")
    assert [u.key for u in top.uploads] == ["b", "b", "z"] and top.common_prefixes == ["a/", "c/"]
    assert [u.key for u in store.list_multipart_uploads("bkt", prefix="a/").uploads] == ["a/1", "a/2"]
    first = store.list_multipart_uploads("bkt", max_uploads=3)
    assert first.is_truncated and (first.next_key_marker, first.next_upload_id_marker) == ("b", b_ids[0])
    rest = store.list_multipart_uploads("bkt", key_marker="b", upload_id_marker=b_ids[0])
    assert [(u.key, u.upload_id) for u in rest.uploads] == [("b", b_ids[1]), ("c/d/e", ids["c/d/e"][0]),
                                                             ("z", ids["z"][0])]
    assert [u.key for u in store.list_multipart_uploads("bkt", key_marker="b").uploads] == ["c/d/e", "z"]
    grouped = store.list_multipart_uploads("bkt", delimiter="/", max_uploads=1)
    assert grouped.common_prefixes == ["a/"] and (grouped.next_key_marker, grouped.next_upload_id_marker) == ("a/", "")
    after = store.list_multipart_uploads("bkt", delimiter="/", key_marker="a/", max_uploads=1)
    assert [u.key for u in after.uploads] == ["b"]
    with pytest.raises(S3Error) as e:
        store.list_multipart_uploads("nobucket")
    assert e.value.code == "NoSuchBucket"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text("ab/", min_size=1, max_size=4), st.sampled_from("uvwxyz")), max_size=25),
       st.sampled_from(["", "a", "b/"]), st.sampled_from(["", "/"]), st.integers(1, 4))
def test_paging_returns_every_upload_exactly_once(pairs, prefix, delimiter, max_uploads):
    uploads = [UploadInfo("bkt", key, uid, 0.0) for key, uid in set(pairs)]
    seen: list[tuple[str, str]] = []
    key_marker = upload_id_marker = ""
    for _ in range(100):
        page = list_upload_page(uploads, prefix, delimiter, max_uploads, key_marker, upload_id_marker)
        assert len(page.uploads) + len(page.common_prefixes) <= max_uploads
        seen += sorted([(u.key, u.upload_id) for u in page.uploads] + [(p, "") for p in page.common_prefixes])
        if not page.is_truncated:
            break
        key_marker, upload_id_marker = page.next_key_marker, page.next_upload_id_marker
    expected = set()
    for u in uploads:
        if not u.key.startswith(prefix):
            continue
        cut = u.key.find(delimiter, len(prefix)) if delimiter else -1
        expected.add((u.key[: cut + len(delimiter)], "") if cut >= 0 else (u.key, u.upload_id))
    assert seen == sorted(expected)
