"""Units of issue 39's confused-deputy fixes and finding 8's small items: the egress client's
address checks (nearfaas/egress.py), gateway.egress_allow in the cluster file, the node's
worker-spec check (node/worker_spec.py), one spelling of a signed path (s3/sigv4.py) and
ASCII-only numbers (s3/validation.decimal)."""

from __future__ import annotations

import asyncio
from importlib import resources
from pathlib import Path

import pytest
from aiohttp import web
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from multidict import CIMultiDict

from nearfaas.auth import function_keys
from nearfaas.egress import EgressClient, EgressPolicy, EgressRefused, address_problem, parse_allow_entry
from nearfaas.node import worker_spec
from nearfaas.s3.errors import S3Error
from nearfaas.s3.sigv4 import S3Auth
from nearfaas.s3.validation import decimal
from nearfaas.spec.cluster import parse_cluster
from nearfaas.spec.errors import SpecError


@pytest.mark.parametrize("address", ["127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254",
                                     "100.64.0.1", "0.0.0.0", "::1", "::", "fe80::1", "fc00::1", "::ffff:127.0.0.1",
                                     "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1", "64:ff9b::a9fe:a9fe",
                                     "2002:7f00:1::", "224.0.0.1"])
def test_non_public_addresses_are_refused_however_spelled(address):
    assert address_problem(address) is not None
    with pytest.raises(EgressRefused, match="gateway.egress_allow"):
        EgressPolicy().check(address, address, 80)


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111"])
def test_public_addresses_pass(address):
    assert address_problem(address) is None
    EgressPolicy(cluster_ports=frozenset({80})).check(address, address, 443)


def test_the_allow_list_names_hosts_and_ports_and_never_opens_the_clusters_own_ports_by_host_alone():
    policy = EgressPolicy(allow=(parse_allow_entry("127.0.0.1"), parse_allow_entry("10.0.0.7:8099")), cluster_ports=frozenset({18512}))
    policy.check("127.0.0.1", "127.0.0.1", 9000)
    policy.check("localhost", "127.0.0.1", 9000)                 # allowed by the address it resolved to
    with pytest.raises(EgressRefused, match="cluster's own port"):
        policy.check("127.0.0.1", "127.0.0.1", 18512)
    with pytest.raises(EgressRefused, match="cluster's own port"):
        policy.check("::ffff:127.0.0.1", "::ffff:127.0.0.1", 18512)
    policy.check("10.0.0.7", "10.0.0.7", 8099)
    with pytest.raises(EgressRefused):
        policy.check("10.0.0.7", "10.0.0.7", 8100)
    exact = EgressPolicy(allow=(parse_allow_entry("127.0.0.1:18512"),), cluster_ports=frozenset({18512}))
    exact.check("127.0.0.1", "127.0.0.1", 18512)                  # named with its port: the operator's call


@pytest.mark.parametrize("entry", ["", "http://x", "a b", "host:0", "host:http", "[::1", "user@host"])
def test_bad_allow_entries_are_refused_naming_the_field(entry):
    with pytest.raises(ValueError):
        parse_allow_entry(entry)
    with pytest.raises(SpecError, match=r"gateway.egress_allow\[0\]|gateway.egress_allow.0"):
        parse_cluster({"gateway": {"egress_allow": [entry]}})


def test_the_cluster_file_carries_the_allow_list():
    spec = parse_cluster({"gateway": {"egress_allow": ["hooks.example.com", "127.0.0.1:8099", "[::1]:80"]}})
    assert spec.gateway.egress_allow == ["hooks.example.com", "127.0.0.1:8099", "[::1]:80"]
    assert parse_cluster(spec.to_dict()).gateway.egress_allow == spec.gateway.egress_allow
    policy = EgressPolicy.from_layout({"egress_allow": spec.gateway.egress_allow, "gateway_port": 1, "nodes": [{"port": 2}],
                                       "fastpath": {"udp": 3, "tcp": 4, "control": 5, "host_port": 6}})
    assert policy.cluster_ports == {1, 2, 3, 4, 5, 6} and ("::1", 80) in policy.allow


async def _servers(n: int, handler):
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    ports = []
    for _ in range(n):
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ports.append(site._server.sockets[0].getsockname()[1])
    return runner, ports


def test_the_client_checks_names_sends_no_credentials_and_follows_no_redirect():
    seen: list[tuple[int, dict]] = []

    async def handler(request: web.Request):
        seen.append((request.url.port, dict(request.headers)))
        if request.path == "/hop":
            return web.Response(status=302, headers={"Location": f"http://127.0.0.1:{ports[1]}/inner"})
        return web.Response(text="ok")

    async def scenario():
        nonlocal ports
        runner, ports = await _servers(2, handler)
        try:
            strict = EgressClient()
            for url in (f"http://127.0.0.1:{ports[0]}/", f"http://localhost:{ports[0]}/", f"http://[::ffff:127.0.0.1]:{ports[0]}/",
                        "file:///etc/passwd", "gopher://127.0.0.1/"):
                with pytest.raises(EgressRefused):
                    await strict.post(url, data=b"x", headers={})
            await strict.close()
            assert seen == [], "a refused request reached the server"
            # The first server allowed by name and port, the one its redirect names not: the 302
            # is the answer, nothing goes to the Location.
            client = EgressClient(EgressPolicy(allow=(("127.0.0.1", ports[0]),), cluster_ports=frozenset({ports[1]})))
            assert await client.post(f"http://localhost:{ports[0]}/hop", data=b"x", headers={"X-Call-Id": "1"}) == 302
            await client.close()
            assert [port for port, _ in seen] == [ports[0]]
            headers = {k.lower() for k in seen[0][1]}
            assert not headers & {"authorization", "cookie", "proxy-authorization", "x-nearfaas-internal"}, headers
        finally:
            await runner.cleanup()

    ports: list[int] = []
    asyncio.run(scenario())


# -- the node's worker-spec check ------------------------------------------------------------------

def _spec(store: Path, **change) -> dict:
    (store / "echo-1").mkdir(parents=True, exist_ok=True)
    return {"name": "echo", "lang": "python3-http", "handler_dir": str(store / "echo-1"), "environment": {"GREETING": "hi"},
            "uid": 200_001, "buckets": ["*"], "openfaas": {}, "namespace": "openfaas-fn", "x": {},
            "credentials": function_keys.credentials("s3cret", "echo", 200_001)} | change


@pytest.mark.parametrize("change,field", [
    ({"environment": {"BROWSER": "x"}}, "environment.BROWSER"), ({"environment": {"PATH": "/tmp"}}, "environment.PATH"),
    ({"environment": {"NEARFAAS_SECRET_KEY": "x"}}, "environment.NEARFAAS_SECRET_KEY"),
    ({"handler_dir": "/tmp"}, "handler_dir"), ({"argv": []}, "argv"), ({"uid": 0}, "uid"), ({"uid": True}, "uid"),
    ({"name": "other"}, "name"), ({"secrets": [".."]}, "secrets.0"), ({"image_source": "oci:/root/image:1"}, "image_source"),
    ({"credentials": function_keys.credentials("s3cret", "echo", 200_002)}, "credentials"), ({"environment": 5}, "environment"),
])
def test_worker_specs_outside_what_the_gateway_builds_are_refused(tmp_path, change, field):
    worker_spec.check(_spec(tmp_path), "echo", functions_dir=tmp_path, handler_roots=[], cluster_secret="s3cret")
    with pytest.raises(worker_spec.WorkerSpecError) as e:
        worker_spec.check(_spec(tmp_path, **change), "echo", functions_dir=tmp_path, handler_roots=[], cluster_secret="s3cret")
    assert e.value.field == field


# -- one spelling of a signed path; ASCII numbers; the default cluster file's words ---------------

def _presigned(path: str) -> list[tuple[str, str]]:
    request = AWSRequest(method="GET", url=f"http://s3.local{path}")
    S3SigV4QueryAuth(Credentials("AK", "SK"), "s3", "us-east-1", expires=300).add_auth(request)
    from urllib.parse import parse_qsl, urlsplit

    return parse_qsl(urlsplit(request.url).query, keep_blank_values=True)


@pytest.mark.parametrize("spelling", ["/b/dir%2Ffile", "/b/./dir/file", "/b/dir/%2E/file", "/b/%64ir/file", "/b/dir/file/.",
                                      "/b/x/../dir/file"])
def test_a_presigned_url_verifies_only_in_the_spelling_it_was_signed_for(spelling):
    query, auth = _presigned("/b/dir/file"), S3Auth({"AK": "SK"})
    auth.authenticate("GET", "/b/dir/file", query, CIMultiDict(host="s3.local"))
    with pytest.raises(S3Error) as e:
        auth.authenticate("GET", spelling, query, CIMultiDict(host="s3.local"))
    assert e.value.code == "InvalidURI"


def test_numbers_are_ascii_digits_only():
    assert [decimal(t) for t in ("0", "17", "10000")] == [0, 17, 10000]
    assert [decimal(t) for t in ("\u0661", "+1", "1_0", " 1", "-1", "", "1e3", "\uff11")] == [None] * 8


def test_the_default_cluster_file_says_what_auth_null_means():
    text = resources.files("nearfaas.spec").joinpath("default_cluster.yml").read_text()
    spec = parse_cluster({"auth": None})
    assert spec.auth is not None and spec.auth.generated  # null generates keys, it is not unsigned mode
    assert "Leave out (or null) for unsigned" not in text and "`auth: null` gives" in text
