"""Issue 39, finding 1 and the small items of finding 8, each tried as the attacker tried it,
on the shared secured cluster (auth on, isolation on, the default cluster file; conftest.py
allows callbacks to 127.0.0.1 at any port but the cluster's own, for the tests' recorders).

1. An async call whose X-Callback-Url is a node's internal API and whose answer is a worker
   spec with PYTHONWARNINGS + BROWSER: the callback is refused (egress.py), not sent, and the
   call's outcome says so; no worker starts.
2. The same spec signed as the gateway signs (as if the gateway had relayed it): the node
   refuses it, 400 naming the field (node/worker_spec.py), and logs it; so is an image to be
   pulled (as root) from a "registry" on one of the cluster's own ports.
3. A compute node authenticates before it routes: an unsigned S3 GET gets 403, not 404.
4. A presigned URL works only in its own spelling (%2F, %2E, %61, /./ are refused).
5. <PartNumber>١</PartNumber> (an Arabic-Indic digit) is not the number 1.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from nearfaas.auth import function_keys, internal

MIRROR = ("def handle(event, context):\n"
          "    return {'statusCode': 200, 'headers': {'Content-Type': 'application/json'}, 'body': event.body.decode()}\n")


def _signed(cluster, method: str, url: str, **kwargs) -> requests.Response:
    """A call to a node's internal API signed as the gateway signs its own (auth/internal.py)."""
    target = "/" + url.split("://", 1)[1].partition("/")[2]
    return requests.request(method, url, headers=internal.sign(cluster.layout["internal_secret"], method, target), timeout=30, **kwargs)


def _log_record(path: Path, event: str, needle: str, timeout: float = 60.0) -> dict:
    """The first JSON record ``event`` mentioning ``needle`` in a process log, once it is written."""
    deadline = time.monotonic() + timeout
    while True:
        for line in path.read_text(errors="replace").splitlines():
            if needle in line and f'"{event}"' in line:
                return json.loads(line[line.index("{"):])
        assert time.monotonic() < deadline, f"no {event} record naming {needle} in {path} within {timeout:g}s"
        time.sleep(0.1)


@pytest.fixture
def mirror(scratch, cluster, tmp_path) -> dict:
    """A deployed function that answers its request body as is; its deployed spec."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    (folder / "handler.py").write_text(MIRROR)
    assert scratch("deputy-mirror", folder).status_code == 202
    specs = json.loads((cluster.state_dir / "gateway" / "functions.json").read_text())
    return next(s for s in specs if s["name"] == "deputy-mirror")


def _hostile(spec: dict, marker: Path) -> dict:
    """The issue's spec: real code under another name, with an environment that runs a command
    when the interpreter starts (a warnings filter imports antigravity, which opens $BROWSER)."""
    return spec | {"name": "x", "environment": {"PYTHONWARNINGS": "ignore::antigravity.Exploit",
                                                 "BROWSER": f"/bin/sh -c 'id -u > {marker}'"}}


def test_a_callback_to_a_node_port_is_refused_and_starts_nothing(cluster, mirror, tmp_path):
    storage = next(n for n in cluster.layout["nodes"] if n["kind"] == "storage")
    workers_url = f"{storage['url']}/_nearfaas/functions/x/workers"
    marker = tmp_path / "ran-as"
    resp = requests.post(f"{cluster.url}/async-function/deputy-mirror", data=json.dumps(_hostile(mirror, marker)), timeout=10,
                         headers={"X-Callback-Url": workers_url})
    assert resp.status_code == 202, resp.text
    call_id = resp.headers["X-Call-Id"]
    done = _log_record(cluster.state_dir / "logs" / "gateway.log", "async-done", call_id)
    assert done["status"] == 200, done
    assert done["callback"].startswith("refused:") and f":{storage['port']}" in done["callback"], done
    refused = _log_record(cluster.state_dir / "logs" / "gateway.log", "async-callback-refused", call_id)
    assert refused["callback"] == workers_url
    assert not [w for w in cluster.node_health(storage["url"])["workers"] if w["function"] == "x"]
    assert not marker.exists(), f"the spec's BROWSER ran, as uid {marker.read_text().strip()}"
    # The same through another spelling of the node's address: still the cluster's own port.
    resp = requests.post(f"{cluster.url}/async-function/deputy-mirror", data=b"{}", timeout=10,
                         headers={"X-Callback-Url": workers_url.replace("127.0.0.1", "localhost")})
    done = _log_record(cluster.state_dir / "logs" / "gateway.log", "async-done", resp.headers["X-Call-Id"])
    assert done["callback"].startswith("refused:") and "cluster's own port" in done["callback"], done


@pytest.mark.parametrize("change,field", [
    ({"environment": {"BROWSER": "/bin/sh -c id"}}, "environment.BROWSER"),
    ({"environment": {"PYTHONWARNINGS": "ignore::antigravity.Exploit"}}, "environment.PYTHONWARNINGS"),
    ({"environment": {"LD_PRELOAD": "/tmp/evil.so"}}, "environment.LD_PRELOAD"),
    ({"handler_dir": "/tmp"}, "handler_dir"),
    ({"handler_dir": "/etc/../tmp/evil"}, "handler_dir"),
    ({"argv": ["/bin/sh"]}, "argv"),
    ({"uid": 0}, "uid"),
    ({"secrets": ["../../cluster.json"]}, "secrets.0"),
    ({"x": {"requirements": "/etc/passwd"}}, "x.requirements"),
    ({"image_source": "docker://127.0.0.1:{storage_port}/fn/evil:1", "handler_dir": "/.nearfaas-image-only"}, "image_source"),
], ids=["browser", "pythonwarnings", "ld_preload", "handler-tmp", "handler-dotdot", "unknown-key", "uid-root", "secret-path",
        "requirements-abs", "registry-on-a-node-port"])
def test_a_signed_hostile_worker_spec_is_refused_naming_the_field(cluster, mirror, change, field):
    node = cluster.layout["nodes"][-1]
    storage_port = next(n["port"] for n in cluster.layout["nodes"] if n["kind"] == "storage")
    spec = mirror | {k: v.format(storage_port=storage_port) if isinstance(v, str) else v for k, v in change.items()}
    resp = _signed(cluster, "POST", f"{node['url']}/_nearfaas/functions/{spec['name']}/workers", json=spec)
    assert resp.status_code == 400, resp.text
    assert resp.json()["field"] == field and field in resp.json()["error"], resp.text
    logged = _log_record(cluster.state_dir / "logs" / f"{node['name']}.log", "worker-spec-refused", f'"field": "{field}"')
    assert logged["function"] == spec["name"]


def test_a_signed_spec_with_another_functions_key_is_refused_and_the_real_one_starts(cluster, mirror):
    node = cluster.layout["nodes"][-1]
    url = f"{node['url']}/_nearfaas/functions/{mirror['name']}/workers"
    other = function_keys.credentials(cluster.layout["internal_secret"], "someone-else", mirror["uid"] + 1)
    resp = _signed(cluster, "POST", url, json=mirror | {"credentials": other})
    assert resp.status_code == 400 and resp.json()["field"] == "credentials", resp.text
    # The premise: what the gateway sends (the deployed record and the function's own key) starts.
    own = function_keys.credentials(cluster.layout["internal_secret"], mirror["name"], mirror["uid"])
    started = _signed(cluster, "POST", url, json=mirror | {"credentials": own})
    assert started.status_code == 200, started.text
    _signed(cluster, "DELETE", f"{node['url']}/_nearfaas/workers/{started.json()['id']}")


def test_a_compute_node_authenticates_before_it_routes(cluster):
    compute = next(n for n in cluster.layout["nodes"] if n["kind"] == "compute")
    for method, path in (("GET", "/some-bucket/some-key"), ("GET", "/"), ("PUT", "/b/k"), ("HEAD", "/b")):
        resp = requests.request(method, f"{compute['url']}{path}", timeout=10)
        assert resp.status_code == 403, (method, path, resp.status_code, resp.text)
    # Signed by the gateway, the node says what it is.
    s3 = cluster.s3_at(compute["url"])
    with pytest.raises(Exception) as e:
        s3.get_object(Bucket="some-bucket", Key="some-key")
    assert e.value.response["Error"]["Code"] == "NoSuchBucket", e.value.response


def _raw_get(url: str, path_and_query: str) -> tuple[int, bytes]:
    """GET exactly this path (http.client sends it as written; requests would normalise it)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        conn.request("GET", path_and_query)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_presigned_url_works_only_in_its_own_spelling(cluster, bucket):
    s3 = cluster.s3()
    s3.put_object(Bucket=bucket, Key="dir/file.txt", Body=b"presigned bytes")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "dir/file.txt"}, ExpiresIn=300)
    path, query = urlsplit(url).path, urlsplit(url).query
    assert _raw_get(url, f"{path}?{query}") == (200, b"presigned bytes")
    for spelling in (f"/{bucket}/dir%2Ffile.txt", f"/{bucket}/dir%2ffile.txt", f"/{bucket}/./dir/file.txt",
                     f"/{bucket}/dir/%2E/file.txt", f"/{bucket}/%64ir/file.txt", f"/{bucket}/dir/file%2Etxt"):
        status, body = _raw_get(url, f"{spelling}?{query}")
        assert status == 400 and b"InvalidURI" in body, (spelling, status, body[:300])


def test_a_part_number_in_other_digits_is_not_a_number(cluster, bucket):
    s3 = cluster.s3()
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"part one")["ETag"]
    try:
        url = f"{cluster.url}/{bucket}/mp?uploadId={upload}"
        body = f"<CompleteMultipartUpload><Part><PartNumber>\u0661</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        resp = requests.post(url, data=body.encode(), headers=cluster.signed_headers("POST", url), timeout=10)
        assert resp.status_code == 400 and b"MalformedXML" in resp.content, resp.text
        url = f"{cluster.url}/{bucket}/mp?partNumber=%D9%A1&uploadId={upload}"
        resp = requests.put(url, data=b"x", headers=cluster.signed_headers("PUT", url), timeout=10)
        assert resp.status_code == 400 and b"InvalidArgument" in resp.content, resp.text
    finally:
        s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)
