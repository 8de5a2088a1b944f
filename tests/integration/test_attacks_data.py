"""Issue 39, finding 4: a function's own S3 key listed, read and overwrote every chain's
intermediates. Now only a chain call's own key (auth/function_keys.py) reaches them, and only
its call's prefix; no function key lists the intermediate bucket."""

from __future__ import annotations

import requests

BUCKET = "nearfaas-intermediates"


def test_a_function_key_cannot_list_read_or_overwrite_another_calls_intermediates(cluster, scratch, functions_dir, bucket):
    # The victim chain keeps its intermediates, so they are there while the spy runs (no timing).
    scratch("victim-1", functions_dir / "relay", **{"x-nearfaas": {"chain": ["victim-2"], "keep_intermediates": True}})
    scratch("victim-2", functions_dir / "relay")
    # The spy may use any bucket ("*"): the widest a function key gets, still not the intermediates.
    assert scratch("spy", functions_dir / "intermediate_spy", **{"x-nearfaas": {"buckets": ["*"]}}).status_code in (200, 202)
    resp = requests.post(f"{cluster.url}/function/victim-1", data=b"payroll", timeout=60)
    assert resp.status_code == 200, resp.text
    admin = cluster.s3()
    kept = [o["Key"] for o in admin.list_objects_v2(Bucket=BUCKET, Prefix="victim-1/").get("Contents", [])]
    assert kept, "the victim chain kept no intermediate to attack"
    try:
        spied = requests.post(f"{cluster.url}/function/spy", json={"key": kept[0], "own": bucket}, timeout=60)
        assert spied.status_code == 200, spied.text
        for via, tried in spied.json().items():
            assert tried["own"].startswith("ok"), (via, tried)  # the key is valid: it just does not reach intermediates
            for attempt in ("list", "list_prefix", "get", "put"):
                assert tried[attempt] == "AccessDenied", (via, attempt, tried)
        assert admin.get_object(Bucket=BUCKET, Key=kept[0])["Body"].read() != b"overwritten"
    finally:
        for key in kept:
            admin.delete_object(Bucket=BUCKET, Key=key)
