"""Bucket versioning in one node's store (node/versions.py): what S3 specifies, kept across a
restart and a crash between two renames, and independent of the order writes arrive in (the
property that lets replicas converge)."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nearfaas.node.objectstore import ObjectStore
from nearfaas.node.objectfile import object_path
from nearfaas.replication.version import HybridClock
from nearfaas.s3.errors import S3Error
from store_fixtures import *  # noqa: F403


def put(store, data: bytes, *, version: str, versioned: bool, key: str = "k"):
    with store.open_writer("bkt", key, version=version) as writer:
        writer.versioned = versioned
        writer.write(data)
        return writer.commit()


def listing(store, key_filter=None):
    return [(e.key, e.version_id, e.is_latest, e.delete_marker) for e in store.list_versions("bkt").versions
            if key_filter is None or e.key == key_filter]


@pytest.fixture
def clock():
    return HybridClock("gw")


@pytest.fixture
def versioned_store(store):
    store.set_versioning("bkt", "Enabled")
    return store


def test_an_overwrite_keeps_the_old_version_and_both_read_back(versioned_store, clock):
    s = versioned_store
    v1 = put(s, b"one", version=clock.now(), versioned=True)
    v2 = put(s, b"two", version=clock.now(), versioned=True)
    assert s.get_object("bkt", "k") == b"two"
    with s.open_version("bkt", "k", v1.version_id) as old:
        assert old.read(0, 10) == b"one"
    assert listing(s) == [("k", v2.version_id, True, False), ("k", v1.version_id, False, False)]
    assert s.head_version("bkt", "k", v1.version_id).etag == v1.etag


def test_a_delete_makes_a_marker_and_deleting_the_marker_restores(versioned_store, clock):
    s = versioned_store
    v1 = put(s, b"one", version=clock.now(), versioned=True)
    marker = clock.now()
    s.delete_object("bkt", "k", marker, versioned=True)
    with pytest.raises(S3Error) as gone:
        s.head_object("bkt", "k")
    assert gone.value.headers["x-amz-delete-marker"] == "true" and gone.value.headers["x-amz-version-id"] == marker
    with pytest.raises(S3Error) as on_marker:
        s.head_version("bkt", "k", marker)
    assert on_marker.value.status == 405
    assert s.delete_version("bkt", "k", marker).delete_marker is True
    assert s.get_object("bkt", "k") == b"one"
    assert listing(s) == [("k", v1.version_id, True, False)]


def test_deleting_the_current_version_promotes_the_next_and_survives_a_restart(versioned_store, clock, tmp_path):
    s = versioned_store
    v1 = put(s, b"one", version=clock.now(), versioned=True)
    v2 = put(s, b"two", version=clock.now(), versioned=True)
    s.delete_version("bkt", "k", v2.version_id)
    assert s.get_object("bkt", "k") == b"one"
    s.close()
    again = ObjectStore(tmp_path / "node")
    try:
        assert again.get_object("bkt", "k") == b"one"
        assert listing(again) == [("k", v1.version_id, True, False)]
        # deleted for good: a late copy of v2 (a retry, a repair) does not come back
        put(again, b"two", version=v2.version, versioned=True)
        assert again.get_object("bkt", "k") == b"one"
        with pytest.raises(S3Error) as missing:
            again.head_version("bkt", "k", v2.version_id)
        assert missing.value.code == "NoSuchVersion"
    finally:
        again.close()


def test_suspended_writes_replace_the_one_null_version_and_keep_the_rest(versioned_store, clock):
    s = versioned_store
    v1 = put(s, b"one", version=clock.now(), versioned=True)
    s.set_versioning("bkt", "Suspended")
    put(s, b"n1", version=clock.now(), versioned=False)
    put(s, b"n2", version=clock.now(), versioned=False)
    assert listing(s) == [("k", "null", True, False), ("k", v1.version_id, False, False)]
    assert s.get_object("bkt", "k") == b"n2"
    s.delete_version("bkt", "k", "null", clock.now())
    assert s.get_object("bkt", "k") == b"one"


def test_an_object_from_before_versioning_is_the_null_version(store, clock):
    put(store, b"old", version=clock.now(), versioned=False)
    store.set_versioning("bkt", "Enabled")
    v2 = put(store, b"new", version=clock.now(), versioned=True)
    assert listing(store) == [("k", v2.version_id, True, False), ("k", "null", False, False)]
    with store.open_version("bkt", "k", "null") as old:
        assert old.read(0, 10) == b"old"


def test_a_bucket_never_versioned_keeps_one_entry_per_key(store, clock):
    put(store, b"a", version=clock.now(), versioned=False)
    put(store, b"b", version=clock.now(), versioned=False)
    assert [e[1] for e in listing(store)] == ["null"]
    assert not (store.root / "buckets" / "bkt" / "versions").exists()
    assert store.head_object("bkt", "k").version_id == ""


def test_a_late_null_write_loses_to_a_newer_null_one_but_is_kept_behind_a_versioned_one(versioned_store, clock):
    s = versioned_store
    early, late_null, versioned = clock.now(), clock.now(), clock.now()
    put(s, b"v", version=versioned, versioned=True)
    put(s, b"late", version=late_null, versioned=False)  # older than the current entry: noncurrent
    put(s, b"early", version=early, versioned=False)  # an older null write than the one held: dropped
    assert listing(s) == [("k", versioned, True, False), ("k", "null", False, False)]
    with s.open_version("bkt", "k", "null") as null:
        assert null.read(0, 10) == b"late"


def test_a_crash_between_link_and_replace_leaves_no_duplicate(versioned_store, clock, tmp_path):
    s = versioned_store
    v1 = put(s, b"one", version=clock.now(), versioned=True)
    vdir = s._versions_dir("bkt", "k")
    os.link(object_path(s.root, "bkt", "k"), vdir / v1.version)  # the link, then the crash
    s.close()
    again = ObjectStore(tmp_path / "node")
    try:
        assert listing(again) == [("k", v1.version_id, True, False)]
        assert not (vdir / v1.version).exists()
    finally:
        again.close()


def test_listing_pages_through_markers_without_gaps_or_repeats(versioned_store, clock):
    s = versioned_store
    for key in ("a", "b/x", "b/y", "c"):
        for n in range(3):
            put(s, f"{key}{n}".encode(), version=clock.now(), versioned=True, key=key)
    full = [(e.key, e.version_id) for e in s.list_versions("bkt").versions]
    assert len(full) == 12
    paged, marker, vmarker = [], "", ""
    while True:
        page = s.list_versions("bkt", max_keys=5, key_marker=marker, version_id_marker=vmarker)
        paged += [(e.key, e.version_id) for e in page.versions]
        if not page.is_truncated:
            break
        marker, vmarker = page.next_key_marker, page.next_version_id_marker
    assert paged == full
    rolled = s.list_versions("bkt", delimiter="/")
    assert rolled.common_prefixes == ["b/"] and {e.key for e in rolled.versions} == {"a", "c"}


def test_bad_version_ids_are_a_400_and_unknown_ones_a_404(versioned_store, clock):
    put(versioned_store, b"x", version=clock.now(), versioned=True)
    with pytest.raises(S3Error) as bad:
        versioned_store.head_version("bkt", "k", "../../etc")
    assert (bad.value.code, bad.value.status) == ("InvalidArgument", 400)
    with pytest.raises(S3Error) as unknown:
        versioned_store.head_version("bkt", "k", "0000000000000001.gw")
    assert (unknown.value.code, unknown.value.status) == ("NoSuchVersion", 404)


def test_a_versioned_bucket_with_only_markers_is_not_empty(versioned_store, clock):
    versioned_store.delete_object("bkt", "k", clock.now(), versioned=True)
    with pytest.raises(S3Error) as refused:
        versioned_store.delete_bucket("bkt")
    assert refused.value.code == "BucketNotEmpty"


def test_markers_are_never_purged_as_tombstones(versioned_store, clock):
    marker = clock.now()
    versioned_store.delete_object("bkt", "k", marker, versioned=True)
    assert versioned_store.purge_tombstones("bkt", [("k", marker)]) == 0


# -- order independence: replicas converge -----------------------------------------------------

_OPS = st.lists(st.tuples(st.sampled_from(["put", "put-null", "delete", "delete-null", "drop"]), st.sampled_from(["k", "j"])),
                min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(ops=_OPS, seed=st.integers(0, 2**32 - 1))
def test_two_replicas_that_get_the_same_writes_in_any_order_hold_the_same_versions(tmp_path_factory, ops, seed):
    """Each op is stamped in order (as the gateway does); replica A applies them in that order,
    replica B in a shuffled order and twice (retries). Both end up with the same listing and digest.
    A "drop" deletes for good a version the ops made earlier."""
    clock = HybridClock("gw")
    stamped = []
    for op, key in ops:
        stamped.append((op, key, clock.now()))
    stores = []
    for name in ("a", "b"):
        s = ObjectStore(tmp_path_factory.mktemp(name) / "node")
        s.create_bucket("bkt")
        s.set_versioning("bkt", "Enabled")
        stores.append(s)
    made = [v for op, _, v in stamped if op != "drop"]
    drops = {v: made[int(v[:16], 16) % len(made)] for op, _, v in stamped if op == "drop" and made}

    def apply(s, op, key, version):
        if op in ("put", "put-null"):
            put(s, version.encode(), version=version, versioned=op == "put", key=key)
        elif op in ("delete", "delete-null"):
            s.delete_object("bkt", key, version, versioned=op == "delete")
        elif version in drops:
            target = drops[version]
            victim = next((o for o in stamped if o[2] == target), None)
            if victim is not None and victim[1] == key:
                vid = target if victim[0] in ("put", "delete") else "null"
                s.delete_version("bkt", key, vid, version)

    try:
        for item in stamped:
            apply(stores[0], *item)
        shuffled = stamped * 2
        random.Random(seed).shuffle(shuffled)
        for item in shuffled:
            apply(stores[1], *item)
        views = [[(e.key, e.version_id, e.is_latest, e.delete_marker, e.version) for e in s.list_versions("bkt").versions]
                 for s in stores]
        assert views[0] == views[1]
        assert stores[0].digest("bkt")["digest"] == stores[1].digest("bkt")["digest"]
    finally:
        for s in stores:
            s.close()


def test_a_bucket_never_versioned_lists_no_delete_markers(store, clock):
    put(store, b"a", version=clock.now(), versioned=False)
    store.delete_object("bkt", "k", clock.now())
    assert listing(store) == []
    with pytest.raises(S3Error) as missing:
        store.head_version("bkt", "k", "null")
    assert missing.value.code == "NoSuchVersion"
