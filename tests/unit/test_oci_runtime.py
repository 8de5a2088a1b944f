"""The pieces of image functions that need no container (node/oci/): how an image is run (the
watchdogs' fprocess/mode/upstream_url), the confinement written for the runtime, the call's
Http_* variables, and the refusal that names what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nearfaas.node.oci import bundle, images, is_image_function, tools
from nearfaas.runtime.image_host import Host
from nearfaas.node.oci.launch import S3_PORT, how_to_run, s3_endpoint


def test_classic_mode_comes_from_fprocess_and_the_function_env_wins():
    config = {"Env": ["PATH=/bin", "fprocess=cat"], "WorkingDir": "/home/app", "Cmd": ["fwatchdog"]}
    run = how_to_run(config, {})
    assert run["mode"] == "classic" and run["args"] == ["cat"] and run["cwd"] == "/home/app" and run["env"]["PATH"] == "/bin"
    run = how_to_run(config, {"fprocess": "python3 -c 'print(1)'", "content_type": "application/json"})
    assert run["args"] == ["python3", "-c", "print(1)"] and run["content_type"] == "application/json"


def test_http_mode_proxies_to_upstream_url_port_or_exposed_port():
    env = ["fprocess=python index.py", "mode=http", "upstream_url=http://127.0.0.1:5000"]
    assert how_to_run({"Env": env}, {}) | {"env": None} == {"mode": "http", "args": ["python", "index.py"], "env": None, "cwd": "/",
                                                           "port": 5000, "content_type": ""}
    plain = how_to_run({"Entrypoint": ["/srv"], "Cmd": ["--fast"], "ExposedPorts": {"9000/tcp": {}}}, {})
    assert plain["mode"] == "http" and plain["args"] == ["/srv", "--fast"] and plain["port"] == 9000
    assert how_to_run({"Cmd": ["/srv"]}, {})["port"] == 8080
    assert how_to_run({"Cmd": ["/srv"]}, {"port": "3000"})["port"] == 3000


def test_the_container_gets_its_own_s3_endpoint_and_key_unless_it_names_one():
    """The SDKs in the container are pointed at the instance's endpoint with a key pair made for
    that instance alone; a port the function listens on is not taken; a function that names its
    own endpoint keeps it."""
    run = how_to_run({"Env": ["fprocess=cat"]}, {})
    endpoint = s3_endpoint(run)
    assert run["env"]["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{S3_PORT}" == run["env"]["AWS_ENDPOINT_URL_S3"]
    assert run["env"]["AWS_ACCESS_KEY_ID"] == endpoint["access_key"] and run["env"]["AWS_SECRET_ACCESS_KEY"] == endpoint["secret_key"]
    assert endpoint["access_key"] != s3_endpoint(how_to_run({"Env": ["fprocess=cat"]}, {}))["access_key"]  # per instance
    busy = how_to_run({"Cmd": ["/srv"]}, {"port": str(S3_PORT)})
    assert s3_endpoint(busy)["port"] == S3_PORT + 1
    own = how_to_run({"Env": ["fprocess=cat"]}, {"AWS_ENDPOINT_URL": "http://minio:9000"})
    assert s3_endpoint(own) is None and own["env"]["AWS_ENDPOINT_URL"] == "http://minio:9000" and "AWS_ACCESS_KEY_ID" not in own["env"]


def test_an_image_with_nothing_to_run_is_refused():
    with pytest.raises(ValueError, match="no fprocess"):
        how_to_run({"Env": ["PATH=/bin"]}, {})
    with pytest.raises(ValueError, match="cannot be split"):
        how_to_run({}, {"fprocess": "sh -c 'unterminated"})


def test_the_container_is_confined(tmp_path):
    proc = bundle.process(["cat"], {"A": "1"}, "/app", 200123)
    cfg = bundle.config(tmp_path / "rootfs", proc, hostname="fn", limits={"memory": 64 << 20, "pids": 32, "cpu": 0.5},
                        tmp_size=1 << 20, secrets_dir=tmp_path / "s", cgroups_path="g/i")
    assert cfg["root"] == {"path": str(tmp_path / "rootfs"), "readonly": True}
    assert cfg["process"]["user"] == {"uid": 200123, "gid": 200123} and cfg["process"]["noNewPrivileges"]
    assert all(caps == [] for caps in cfg["process"]["capabilities"].values())
    assert {n["type"] for n in cfg["linux"]["namespaces"]} == {"pid", "network", "ipc", "uts", "mount"}
    resources = cfg["linux"]["resources"]
    assert resources["memory"]["limit"] == 64 << 20 and resources["pids"]["limit"] == 32 and resources["cpu"]["quota"] == 50_000
    secrets = next(m for m in cfg["mounts"] if m["destination"] == "/var/openfaas/secrets")
    assert secrets["source"] == str(tmp_path / "s") and "ro" in secrets["options"]
    assert any(m["destination"] == "/tmp" and m["type"] == "tmpfs" for m in cfg["mounts"])


def test_a_call_becomes_the_classic_watchdogs_variables():
    host = Host.__new__(Host)
    argv = host._call_env("POST", "/a/b", "x=1&y=2", {"Content-Type": "text/plain", "X-Call-Id": "c1", "Bad": "a\nb"}, b"abc")
    env = dict(item.split("=", 1) for item in argv)
    assert env == {"Http_Method": "POST", "Http_Path": "/a/b", "Http_Query": "x=1&y=2", "Http_ContentLength": "3",
                   "Http_Content_Type": "text/plain", "Http_X_Call_Id": "c1"}


def test_without_the_tools_the_refusal_names_them_and_make_setup(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("NEARFAAS_OCI_RUNTIME", raising=False)
    refusal = tools._find(tmp_path).refusal()
    for word in ("crun", "runc", "umoci", "skopeo", "make setup"):
        assert word in refusal


@pytest.mark.skipif(shutil.which("crun") is None, reason="crun is not installed")
def test_a_runtime_that_cannot_run_containers_is_named_with_what_it_said(tmp_path, monkeypatch):
    """crun is probed, not trusted: on a hybrid cgroup host (this project's VM) it fails, and says why."""
    monkeypatch.setenv("NEARFAAS_OCI_RUNTIME", "crun")
    found = tools._find(tmp_path)
    if found.runtime is not None:
        pytest.skip("crun can run containers on this host")
    assert "crun cannot run containers here:" in found.refusal()


def test_is_image_function():
    assert is_image_function({"image_source": "oci:/x"}) and not is_image_function({"image": "x", "handler_dir": "/h"})


def test_an_image_file_that_went_away_is_a_clear_error(tmp_path):
    with pytest.raises(images.ImageError, match="cannot be read on this node"):
        images.prepare(f"oci-archive:{tmp_path / 'gone.tar'}", tmp_path, "umoci", "skopeo")


@pytest.mark.skipif(not (shutil.which("umoci") and shutil.which("skopeo")), reason="umoci and skopeo are not installed")
@pytest.mark.skipif(os.geteuid() != 0, reason="umoci unpacks as root only (the node agent runs as root)")
def test_an_image_is_imported_and_unpacked_once(tmp_path):
    layout = tmp_path / "src"
    for argv in (["umoci", "init", "--layout", str(layout)], ["umoci", "new", "--image", f"{layout}:t"],
                 ["umoci", "config", "--image", f"{layout}:t", "--config.env", "fprocess=cat", "--config.workingdir", "/w"]):
        subprocess.run(argv, check=True, capture_output=True)
    state = tmp_path / "state"
    first = images.prepare(f"oci:{layout}:t", state, "umoci", "skopeo")
    assert first.rootfs.is_dir() and first.env()["fprocess"] == "cat" and first.config["WorkingDir"] == "/w"
    marker = first.rootfs / "marker"
    marker.touch()
    again = images.prepare(f"oci:{layout}:t", state, "umoci", "skopeo")
    assert again.digest == first.digest and (again.rootfs / "marker").exists()  # the cache, not a second unpack
    assert Path(state / "oci" / "bundles").exists()


def test_the_host_speaks_the_worker_contract_on_one_kept_connection():
    """The host's own small HTTP server (no aiohttp: its import was a third of a cold start): the
    call token, the gateway's X-Nearfaas-* request headers, repeated answer headers, keep-alive."""
    import asyncio

    from nearfaas.runtime import image_host as hostmod

    plan = {"runtime": "runc", "root": "/nonexistent", "id": "i", "bundle": "/nonexistent", "name": "fn", "instance": "fn-i",
            "mode": "classic", "args": ["cat"], "token_header": "X-Nearfaas-Worker-Token", "max_inflight": 1}
    seen = []

    async def fake_exec(method, path, query, headers, body):
        seen.append((method, path, query, headers.get("X-Test"), body))
        await asyncio.sleep(0.05)
        return 200, [("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Nearfaas-Forged", "x")], body.upper()

    async def scenario():
        os.environ["NEARFAAS_CALL_TOKEN"] = "tok"  # Host takes it out of the environment again
        h = hostmod.Host(plan)
        h._exec = fake_exec
        server = await asyncio.start_server(lambda r, w: hostmod._connection(h, r, w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def call(token: str, body: bytes, reader_writer=None):
            reader, writer = reader_writer or await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nContent-Length: %d\r\nX-Nearfaas-Worker-Token: %s\r\nX-Nearfaas-Method: PUT\r\n"
                         b"X-Nearfaas-Path: /a%%20b\r\nX-Nearfaas-Query: q=1\r\nX-Test: yes\r\n\r\n%s" % (len(body), token.encode(), body))
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = int(next(line.split(":")[1] for line in head.split("\r\n") if line.lower().startswith("content-length")))
            return head, await reader.readexactly(length), (reader, writer)

        head, body, conn = await call("bad", b"x")
        assert head.startswith("HTTP/1.1 401")
        head, body, conn = await call("tok", b"abc", conn)  # the same connection, kept
        assert head.startswith("HTTP/1.1 200") and body == b"ABC" and head.count("Set-Cookie") == 2 and "Forged" not in head
        assert "X-Nearfaas-Instance: fn-i" in head
        assert seen == [("PUT", "/a b", "q=1", "yes", b"abc")]
        first = asyncio.ensure_future(call("tok", b"1"))
        await asyncio.sleep(0.01)
        head, _, _ = await call("tok", b"2")
        assert head.startswith("HTTP/1.1 429")  # max_inflight=1, as the Python worker answers
        assert (await first)[1] == b"1"
        server.close()

    asyncio.run(scenario())
