"""Issue 39 finding 7 (part): no seccomp profile anywhere. A jailed function (its own uid, no
capabilities) could still make an unprivileged user namespace and, inside it, mount; trace
itself; read its session keyring; and reach every other kernel surface a function never needs.

A hostile function (functions/sandboxed) on the shared cluster (isolation on) tries ``unshare``
(a user namespace, alone and with a network namespace), a mount inside a user namespace of its
own, a plain ``mount``, ``ptrace(PTRACE_TRACEME)``, ``bpf`` and ``keyctl``: each must answer
EPERM (node/seccomp.py, loaded by node/jail.enter), and the worker's ``/proc/self/status`` says
``Seccomp: 2``. What a function legitimately does still works: boto3 against its S3 endpoint and
a call of another function through ``OPENFAAS_URL``. An image function gets the same profile from
its OCI config: busybox's ``unshare -U -r`` in it is refused.

Issue 39 finding 7 (part): Python workers shared the host's network. A hostile function
(functions/netprobe) connects to every node's port, the fast path's UDP, TCP, stream and control
ports, the gateway's fast-path host port and another function's worker port: each must be refused
(ECONNREFUSED: its network namespace, node/netns.py, has loopback only), and so must the unix
sockets the gateway calls jailed workers on, another's and its own (EACCES: root's, 0600, in a
folder only root and the function's group traverse, node/netrelay.py), while the gateway's own
port, which its S3 endpoint and OPENFAAS_URL reach through the node (node/netrelay.py), stays
reachable, and its boto3, ``context.objects`` and OPENFAAS_URL calls still work.
"""

from __future__ import annotations

import json
import os
import platform

import pytest
from test_images import deploy as image_deploy  # noqa: F401 - fixtures, shared with the image tests
from test_images import images, runtime  # noqa: F401

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root"),
              pytest.mark.skipif(platform.machine() != "x86_64", reason="the hostile function uses x86-64 syscall numbers")]

ATTEMPTS = ("unshare", "unshare_net", "userns_mount", "mount", "ptrace", "bpf", "keyctl")


def test_a_function_cannot_reach_the_kernels_larger_surfaces(cluster, scratch, functions_dir, bucket):
    assert scratch("sandbox-echo", functions_dir / "echo").status_code < 300
    assert scratch("sandbox-hostile", functions_dir / "sandboxed").status_code < 300
    resp = cluster.http.post(f"{cluster.url}/function/sandbox-hostile", data=json.dumps({"bucket": bucket, "call": "sandbox-echo"}),
                             timeout=60)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["uid"] != 0
    assert answer["attempts"] == {name: "EPERM" for name in ATTEMPTS}, answer["attempts"]
    assert answer["seccomp"] == "2"  # SECCOMP_MODE_FILTER
    # ... and it still does its job
    assert answer["legit"]["s3"] == "still works"
    status, text = answer["legit"]["call"]
    assert status == 200 and json.loads(text)["function"] == "sandbox-echo"


def test_an_image_function_cannot_make_a_user_namespace(cluster, runtime, images, image_deploy):  # noqa: F811 - the fixtures
    """The same profile in an image function's OCI config (node/oci/bundle.py): busybox's
    ``unshare -U -r`` (a user namespace in which it is root) is refused."""
    fprocess = "sh -c 'unshare -U -r id -u 2>&1; echo rc=$?'"
    assert image_deploy("sandbox-img", images["sh"], envVars={"fprocess": fprocess}).status_code == 202
    call = cluster.http.post(f"{cluster.url}/function/sandbox-img", data=b"", timeout=60)
    assert call.status_code == 200, call.text
    assert "Operation not permitted" in call.text and "rc=1" in call.text, call.text


def _host_ports(cluster, own_node: str) -> tuple[list, list]:
    """(TCP, UDP) ports of the cluster a function must not reach: every node's (but its own
    storage node's, whose S3 endpoint it may use), the fast path's, another worker's."""
    host = cluster.layout["host"]
    nodes = [n for n in cluster.layout["nodes"] if not (n["name"] == own_node and n["kind"] == "storage")]
    tcp = [[host, n["port"]] for n in nodes]
    udp = []
    fp = cluster.layout.get("fastpath")
    if fp:
        tcp += [[host, fp[k]] for k in ("tcp", "control", "stream") if fp.get(k)]
        udp += [[host, fp["udp"]]] + ([[host, fp["host_port"]]] if fp.get("host_port") else [])
    for node in cluster.layout["nodes"]:
        tcp += [["127.0.0.1", w["port"]] for w in cluster.node_health(node["url"])["workers"] if w["function"] == "net-echo"]
    return tcp, udp


def test_a_function_reaches_only_the_gateway(cluster, scratch, functions_dir, bucket):
    assert scratch("net-echo", functions_dir / "echo").status_code < 300
    assert scratch("net-hostile", functions_dir / "netprobe").status_code < 300
    own = next(n["name"] for n in cluster.layout["nodes"]
               if any(w["function"] == "net-hostile" for w in cluster.node_health(n["url"])["workers"]))
    tcp, udp = _host_ports(cluster, own)
    assert any(port for _, port in tcp if port) and len(tcp) >= 3, tcp  # nodes, and the other worker at least
    # The serving sockets the gateway calls directly (gateway/worker_client.py): the other
    # worker's, and the hostile one's own (root's, 0600: only the gateway and the node connect).
    unix = [w["socket"] for n in cluster.layout["nodes"] for w in cluster.node_health(n["url"])["workers"]
            if w["function"] in ("net-echo", "net-hostile")]
    assert len(unix) >= 2, unix
    gateway = [cluster.layout["host"], int(cluster.url.rsplit(":", 1)[1])]
    resp = cluster.http.post(f"{cluster.url}/function/net-hostile", timeout=90, data=json.dumps(
        {"tcp": tcp + [gateway], "udp": udp, "unix": unix, "bucket": bucket, "call": "net-echo"}))
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    reached = {target: how for target, how in answer["tcp"].items() if target != "{}:{}".format(*gateway)}
    assert reached == {f"{h}:{p}": "ECONNREFUSED" for h, p in tcp}, reached
    assert answer["udp"] == {f"{h}:{p}": "ECONNREFUSED" for h, p in udp}, answer["udp"]
    assert answer["unix"] == {path: "EACCES" for path in unix}, answer["unix"]
    # ... the gateway is reachable (its S3 API and OPENFAAS_URL live there), and the work still gets done
    assert answer["tcp"]["{}:{}".format(*gateway)] == "connected"
    assert answer["s3"] == "boto3 works" and answer["objects"] == "objects work"
    status, text = answer["call"]
    assert status == 200 and json.loads(text)["function"] == "net-echo"
