"""The gateway's webhook sink, where notification stages post their events."""

from __future__ import annotations

import pytest
import requests

pytestmark = pytest.mark.integration


def test_events_are_kept_in_order_and_bad_ones_get_a_clear_4xx(cluster):
    # An undeclared name takes posts with the admin's credentials only (test_attacks_floods.py
    # shows the refusals and the caps); a declared one takes them from anyone.
    url = f"{cluster.url}/system/webhooks/alerts-test"
    assert cluster.http.get(url, timeout=10).json() == []
    assert requests.post(url, json={"n": 0}, timeout=10).status_code == 403
    for i in range(3):
        resp = cluster.http.post(url, json={"n": i}, timeout=10)
        assert resp.status_code == 202 and resp.json()["count"] == i + 1
    assert [e["event"]["n"] for e in cluster.http.get(url, timeout=10).json()] == [0, 1, 2]

    not_json = cluster.http.post(url, data=b"{not json", timeout=10)
    assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]
    too_big = cluster.http.post(url, data=b'"' + b"x" * (70 * 1024) + b'"', timeout=10)
    assert too_big.status_code == 413 and "result object" in too_big.json()["error"]
    bad_name = cluster.http.post(f"{cluster.url}/system/webhooks/Bad_Name", json={}, timeout=10)
    assert bad_name.status_code == 400 and "DNS-1123" in bad_name.json()["error"]
