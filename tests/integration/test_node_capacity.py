"""A node's CPU capacity (`cpus` in the cluster file, node/capacity.py): a storage node capped at
a fraction of a core is held to it — its S3 Select work is throttled by the node's cgroup —
while an uncapped node is not; a bad value is refused naming the field."""

from __future__ import annotations

import io
import time

import pyarrow.parquet as pq
import pytest

from conftest import running_cluster
from nearfaas.cluster.launcher import read_layout
from nearfaas.dataservices.particles import particles
from nearfaas.spec.cluster import load_cluster, parse_cluster

pytestmark = pytest.mark.integration


def test_a_capped_storage_node_is_throttled_to_its_cpus(tmp_path):
    spec = load_cluster(None)
    for node in spec.nodes:
        if node.kind == "storage":
            node.cpus = 0.25
    with running_cluster(tmp_path / "state", nodes=spec.nodes) as c:
        layout = read_layout(c.state_dir)
        assert all(n["cpus"] == 0.25 for n in layout["nodes"] if n["kind"] == "storage")
        s3 = c.s3()
        s3.create_bucket(Bucket="cap")
        sink = io.BytesIO()
        pq.write_table(particles(400_000, seed=5), sink)
        s3.put_object(Bucket="cap", Key="p.parquet", Body=sink.getvalue())
        resp = s3.select_object_content(
            Bucket="cap", Key="p.parquet", ExpressionType="SQL",
            Expression="SELECT count(*) AS n FROM S3Object WHERE power(vx, 2) + power(vy, 2) < 2500",
            InputSerialization={"Parquet": {}}, OutputSerialization={"JSON": {}})
        ran_on = resp["ResponseMetadata"]["HTTPHeaders"]["x-nearfaas-placement"].split(":", 1)[1]
        assert any("End" in e for e in resp["Payload"])
        deadline = time.monotonic() + 15
        while True:  # the gateway reads each node's capacity from its periodic health answer
            nodes = c.http.get(f"{c.url}/system/nodes", timeout=10).json()
            cap = next(n for n in nodes if n["name"] == ran_on)["capacity"]
            if not cap or not cap["enforced"] or cap["cpu_stat"].get("nr_throttled", 0) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert cap is not None and cap["cpus"] == 0.25, nodes
        if not cap["enforced"]:
            pytest.skip(f"no CPU cgroup here: {cap['why']}")
        assert cap["method"].startswith("cgroup") and cap["cpu_stat"].get("nr_throttled", 0) > 0, cap
        compute = next(n for n in nodes if n["kind"] == "compute")
        assert compute["capacity"]["cpus"] is None and compute["capacity"]["enforced"] is False


def test_bad_cpus_are_refused_naming_the_field():
    with pytest.raises(Exception) as info:
        parse_cluster({"nodes": [{"name": "s", "kind": "storage", "class": "standard", "cpus": 0}]})
    assert "nodes[0].cpus" in str(info.value) and "between 0.05 and 1024" in str(info.value)
