"""Function volumes (x-nearfaas.volume, node/pool.py) and the key-value function on them
(examples/econ/kv, issue 20): data outlives the worker (SIGKILL mid-life), a second tenant can
neither see nor write another function's volume, a function without one is told how to get one,
and bad requests are 400s."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests


pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
KV = Path(__file__).resolve().parents[2] / "examples" / "econ" / "kv"
ONE = {"labels": {"com.openfaas.scale.max": "1"}}


def _call(cluster, name: str, body) -> requests.Response:
    return requests.post(f"{cluster.url}/function/{name}", json=body, timeout=60)


def _worker_pid(cluster, name: str) -> int:
    return _call(cluster, name, {"stats": True}).json()["pid"]


def test_a_volume_keeps_the_store_across_a_killed_worker(scratch, cluster):
    assert scratch("kv-vol", KV, **{"x-nearfaas": {"volume": True, "accelerator": "dscs", "placement": "data"}}, **ONE).status_code == 202
    r = _call(cluster, "kv-vol", {"load": {"start": 0, "count": 500, "value_bytes": 100, "seed": 3}})
    assert r.status_code == 200, r.text
    node = r.json()["node"]
    assert _call(cluster, "kv-vol", {"ops": [["u", "user0000000007", "fresh"]]}).json()["updates"] == 1
    os.kill(_worker_pid(cluster, "kv-vol"), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:  # the next call cold-starts a new worker on the same node, same volume
        got = _call(cluster, "kv-vol", {"ops": [["r", "user0000000007"], ["r", "user0000000499"], ["r", "nope"]]})
        if got.status_code == 200:
            break
        assert time.monotonic() < deadline, got.text
        time.sleep(0.5)
    assert got.json()["node"] == node and (got.json()["reads"], got.json()["found"]) == (3, 2)
    volume = cluster.state_dir / "nodes" / node / "volumes" / "kv-vol"
    assert (volume / "rocksdb" / "CURRENT").is_file()
    assert volume.stat().st_mode & 0o777 == 0o700


def test_another_tenant_cannot_reach_the_volume(scratch, cluster, functions_dir):
    assert scratch("kv-owner", KV, **{"x-nearfaas": {"volume": True, "accelerator": "dscs", "placement": "data"}}, **ONE).status_code == 202
    node = _call(cluster, "kv-owner", {"load": {"start": 0, "count": 10, "value_bytes": 10, "seed": 1}}).json()["node"]
    theirs = cluster.state_dir.resolve() / "nodes" / node / "volumes" / "kv-owner"
    assert scratch("vol-hostile", functions_dir / "hostile", **{"x-nearfaas": {"volume": True, "accelerator": "dscs", "placement": "data"}}).status_code == 202
    seen = _call(cluster, "vol-hostile", {"dirs": [str(theirs), str(theirs.parent)], "paths": [str(theirs / "rocksdb" / "CURRENT")],
                                          "writes": [str(theirs / "planted")]}).json()
    assert seen["list"][str(theirs)].startswith(("FileNotFoundError", "PermissionError"))
    assert seen["read"][str(theirs / "rocksdb" / "CURRENT")].startswith(("FileNotFoundError", "PermissionError"))
    assert seen["write"][str(theirs / "planted")].startswith(("FileNotFoundError", "PermissionError"))
    # What it can see of the volumes folder is its own volume, nothing else.
    assert seen["list"][str(theirs.parent)] == ["vol-hostile"]
    own = theirs.parent / "vol-hostile"
    assert _call(cluster, "vol-hostile", {"writes": [str(own / "mine")]}).json()["write"][str(own / "mine")] == "written"


def test_without_a_volume_and_with_bad_requests_the_answers_are_400(scratch, cluster):
    assert scratch("kv-novol", KV, **ONE).status_code == 202
    r = _call(cluster, "kv-novol", {"stats": True})
    assert r.status_code == 400 and "volume: true" in r.json()["error"]
    assert scratch("kv-bad", KV, **{"x-nearfaas": {"volume": True}}, **ONE).status_code == 202
    for body, text in (({"ops": [["x", "k"]]}, "ops[0]"), ({"ops": "all"}, "non-empty list"), ({"load": {"count": 0}}, "count"),
                       ({"what": 1}, 'send "ops"'), ([1, 2], "JSON object")):
        r = _call(cluster, "kv-bad", body)
        assert r.status_code == 400 and text in r.json()["error"], (body, r.text)
