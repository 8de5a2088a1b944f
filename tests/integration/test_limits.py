"""Cluster-file limits take effect: workers per node, and calls forwarded by the gateway."""

from __future__ import annotations


import pytest
import requests

from nearfaas.cluster import launcher
from nearfaas.spec.cluster import GatewaySpec, NodeSpec

from conftest import start_cluster

pytestmark = pytest.mark.integration


def test_workers_max_and_gateway_max_inflight(tmp_path, functions_dir):
    state = tmp_path / "state"
    cluster = start_cluster(state, gateway=GatewaySpec(port=0, max_inflight=1),
                            nodes=[NodeSpec("storage-0", "storage", "dscs"), NodeSpec("compute-0", "compute", "cpu", workers_max=1)])
    try:
        assert cluster.deploy("first", functions_dir / "slow").status_code == 202
        second = cluster.deploy("second", functions_dir / "echo", wait=False)
        assert second.status_code == 202
        refused = requests.post(f"{cluster.url}/function/second")
        assert refused.status_code == 429 and "workers_max=1" in refused.text

        codes = sorted(r.status_code for r in cluster.post_concurrently("/function/first?sleep=1.0", 3, timeout=30))
        assert codes[0] == 200 and 429 in codes, codes
    finally:
        launcher.down(state)
