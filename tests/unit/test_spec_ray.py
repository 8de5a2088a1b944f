"""The cluster file's backend and ray block (spec/ray.py): defaults, the resource each node
needs, and errors that name the field and the fix."""

from __future__ import annotations

import pytest

from nearfaas.spec.cluster import ClusterSpec, parse_cluster
from nearfaas.spec.errors import SpecError
from nearfaas.spec.ray import node_resource


def test_local_is_the_default_and_ray_round_trips():
    assert parse_cluster(None).backend == "local"
    spec = parse_cluster({"backend": "ray", "ray": {"address": "10.0.0.1:6379", "namespace": "team-a", "data_dir": "/srv/nf"},
                          "nodes": [{"name": "storage-0", "kind": "storage", "class": "dscs"},
                                    {"name": "storage-1", "kind": "storage", "class": "standard", "ray_resource": "big_disk"}]})
    assert (spec.backend, spec.ray.address, spec.ray.namespace, spec.ray.data_dir) == ("ray", "10.0.0.1:6379", "team-a", "/srv/nf")
    again = parse_cluster(spec.to_dict())
    assert again.backend == "ray" and again.ray == spec.ray and again.nodes[1].ray_resource == "big_disk"
    assert parse_cluster(ClusterSpec().to_dict()).backend == "local"


def test_each_node_class_needs_its_own_resource_unless_named():
    assert node_resource("storage", "dscs", None) == "nearfaas_storage_dscs"
    assert node_resource("storage", "standard", None) == "nearfaas_storage"
    assert node_resource("compute", "cpu", None) == "nearfaas_compute"
    assert node_resource("compute", "cpu", "gpu_box") == "gpu_box"


@pytest.mark.parametrize("data, field", [
    ({"backend": "k8s"}, "backend"),
    ({"ray": {"adress": "x"}}, "ray.adress"),
    ({"ray": {"namespace": "has space"}}, "ray.namespace"),
    ({"ray": {"address": ""}}, "ray.address"),
    ({"nodes": [{"name": "storage-0", "kind": "storage", "class": "dscs", "ray_resource": "no spaces please"}],
      "replication": {"factor": 1}}, "nodes[0].ray_resource"),
])
def test_bad_values_name_the_field_and_the_fix(data, field):
    with pytest.raises(SpecError) as caught:
        parse_cluster(data)
    assert field in str(caught.value) and "fix:" in str(caught.value), str(caught.value)
