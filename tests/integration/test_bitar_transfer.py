"""Bitar in the platform (issue 19): over a slow emulated link, a function's remote read travels
compressed (gzip content coding, Bitar segments) and arrives byte-identical; /metrics and the
link header count it; a plain boto3 client, and a plain HTTP client that advertises gzip, see
exactly what S3 would give them; an opt-in client without credentials still gets 403."""

from __future__ import annotations

import gzip
import hashlib

import pytest
import requests

from nearfaas.bitar.transfer import OPT_IN_HEADER
from nearfaas.cluster import launcher
from nearfaas.spec.cluster import LinkSpec

from conftest import start_cluster

pytestmark = pytest.mark.integration
SIZE = 3 * 1024 * 1024 + 12345  # not a whole number of segments


def _body() -> bytes:
    return b"".join(b"particle %08d x=%.3f;" % (i, (i * 7919 % 1000) / 7) for i in range(SIZE // 24 + 1))[:SIZE]


def _link(resp) -> dict:
    name, *fields = resp.headers["X-Nearfaas-Link"].split(";")
    return {"name": name} | {k: float(v) for k, v in (f.split("=") for f in fields)}


@pytest.fixture(scope="module")
def slow_cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("bitar") / "state"
    cluster = start_cluster(state, link=LinkSpec(profile="s3-like"))
    try:
        s3 = cluster.s3()
        s3.create_bucket(Bucket="particles")
        s3.put_object(Bucket="particles", Key="step.bin", Body=_body())
        yield cluster
    finally:
        launcher.down(state)


def test_a_remote_read_travels_compressed_and_arrives_identical(slow_cluster, functions_dir):
    c = slow_cluster
    assert c.deploy("upper", functions_dir / "upper").status_code == 202
    r = requests.post(f"{c.url}/function/upper", json={"input": {"bucket": "particles", "key": "step.bin"}},
                      headers={"X-Nearfaas-Policy": "compute-only"}, timeout=120)
    assert r.status_code == 200, r.text
    link = _link(r)
    assert link["read"] == SIZE  # the function read every byte ...
    assert link["read_wire"] < SIZE / 2  # ... and far fewer crossed the link
    assert link["write"] == SIZE and link["write_wire"] < SIZE / 2  # its output went compressed too
    out = c.s3().get_object(Bucket="particles", Key="step.bin.upper")["Body"].read()
    assert hashlib.sha256(out).digest() == hashlib.sha256(_body().upper()).digest()  # byte-identical end to end
    metrics = requests.get(f"{c.url}/metrics", timeout=10).text
    values = {line.split()[0]: float(line.split()[1]) for line in metrics.splitlines()
              if line.startswith("nearfaas_bitar_") and not line.startswith("#")}
    assert values["nearfaas_bitar_transfers_total"] >= 1
    assert values['nearfaas_bitar_bytes_total{kind="raw"}'] >= SIZE
    assert values['nearfaas_bitar_bytes_total{kind="wire"}'] < values['nearfaas_bitar_bytes_total{kind="raw"}'] / 2


def test_plain_s3_clients_see_no_difference(slow_cluster):
    c = slow_cluster
    got = c.s3().get_object(Bucket="particles", Key="step.bin")
    assert got["Body"].read() == _body()
    assert got["ContentLength"] == SIZE and "ContentEncoding" not in got
    url = f"{c.url}/particles/step.bin"
    plain = requests.get(url, headers=c.signed_headers("GET", url), timeout=60)  # requests sends Accept-Encoding: gzip
    assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
    assert int(plain.headers["Content-Length"]) == SIZE and plain.content == _body()


def test_an_opted_in_read_is_multi_member_gzip_any_reader_decodes(slow_cluster):
    c = slow_cluster
    url = f"{c.url}/particles/step.bin"
    extra = {"Accept-Encoding": "gzip", OPT_IN_HEADER: "bitar"}
    r = requests.get(url, headers=c.signed_headers("GET", url) | extra, stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Encoding"] == "gzip"
    wire = r.raw.read(decode_content=False)
    assert len(wire) < SIZE / 2
    assert gzip.decompress(wire) == _body()  # the standard library's gzip, nothing of ours
    etag = c.s3().head_object(Bucket="particles", Key="step.bin")["ETag"]
    assert r.headers["ETag"] == etag  # the representation's identity is unchanged


def test_ranges_and_unsigned_callers_are_not_compressed(slow_cluster):
    c = slow_cluster
    url = f"{c.url}/particles/step.bin"
    extra = {"Accept-Encoding": "gzip", OPT_IN_HEADER: "bitar"}
    ranged = requests.get(url, headers=c.signed_headers("GET", url, {"Range": "bytes=100-70099"}) | extra, timeout=60)
    assert ranged.status_code == 206 and "Content-Encoding" not in ranged.headers and ranged.content == _body()[100:70100]
    anonymous = requests.get(url, headers=extra, timeout=60)
    assert anonymous.status_code == 403 and "Content-Encoding" not in anonymous.headers


def test_the_partition_function_runs_on_the_node_that_holds_the_object(slow_cluster):
    """The partition service deployed as a function (examples/partition): placed by the data,
    reading the object through mmap, writing every part back; a non-Arrow object is a 400."""
    from pathlib import Path

    import pyarrow as pa

    from nearfaas.dataservices import datasets
    from nearfaas.dataservices.partition import pack

    c = slow_cluster
    table = datasets.generate("planes", 1_000_000, seed=2)
    s3 = c.s3()
    s3.put_object(Bucket="particles", Key="planes.arrow", Body=pack(table, "zstd").to_pybytes())
    s3.put_object(Bucket="particles", Key="notes.txt", Body=b"not arrow at all")
    handler = Path(__file__).resolve().parents[2] / "examples" / "partition"
    assert c.deploy("partition", handler, **{"x-nearfaas": {"accelerator": "dscs", "placement": "data"}}).status_code == 202
    r = requests.post(f"{c.url}/function/partition", timeout=120,
                      json={"input": {"bucket": "particles", "key": "planes.arrow"}, "parts": 4, "key": "icao24", "codec": "lz4"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert r.headers["X-Nearfaas-Placement"] == "dscs;home-replica" and out["read"] == "local mmap"
    assert out["rows_out"] == out["rows_in"] == table.num_rows and len(out["outputs"]) == 4
    back = [pa.ipc.open_stream(s3.get_object(Bucket="particles", Key=o["key"])["Body"].read()).read_all() for o in out["outputs"]]
    assert sum(t.num_rows for t in back) == table.num_rows
    assert all(set((t.column("icao24").to_numpy() & 3).tolist()) <= {i} for i, t in enumerate(back))
    bad = requests.post(f"{c.url}/function/partition", timeout=60,
                        json={"input": {"bucket": "particles", "key": "notes.txt"}, "parts": 4})
    assert bad.status_code == 400 and "not an Arrow IPC stream" in bad.json()["error"]
    odd = requests.post(f"{c.url}/function/partition", timeout=60,
                        json={"input": {"bucket": "particles", "key": "planes.arrow"}, "parts": 6, "key": "icao24"})
    assert odd.status_code == 400 and "power of two" in odd.json()["error"]


def test_compressed_writes_are_decoded_and_bad_ones_refused(slow_cluster):
    """A PUT that opted in is stored decoded (S3 clients read the raw bytes back); bad gzip is a
    400 and leaves no object; without the opt-in header S3 semantics hold: stored as sent."""
    c = slow_cluster
    raw = _body()[:200_000]
    url = f"{c.url}/particles/written.bin"
    body = gzip.compress(raw[:100_000]) + gzip.compress(raw[100_000:])  # two members
    extra = {"Content-Encoding": "gzip", OPT_IN_HEADER: "bitar"}
    put = requests.put(url, data=body, headers=c.signed_headers("PUT", url, extra), timeout=60)
    assert put.status_code == 200, put.text
    assert c.s3().get_object(Bucket="particles", Key="written.bin")["Body"].read() == raw
    bad_url = f"{c.url}/particles/broken.bin"
    bad = requests.put(bad_url, data=body[:-40] + b"garbage!" * 5, headers=c.signed_headers("PUT", bad_url, extra), timeout=60)
    assert bad.status_code == 400 and b"gzip" in bad.content
    assert "Contents" not in c.s3().list_objects_v2(Bucket="particles", Prefix="broken")
    unsigned = requests.put(url, data=body, headers=c.signed_headers("PUT", url) | extra, timeout=60)
    assert unsigned.status_code == 403 and b"must sign Content-Encoding" in unsigned.content  # headers not signed
    plain_url = f"{c.url}/particles/as-sent.gz"
    plain = requests.put(plain_url, data=body, headers=c.signed_headers("PUT", plain_url, {"Content-Encoding": "gzip"}), timeout=60)
    assert plain.status_code == 200
    assert c.s3().get_object(Bucket="particles", Key="as-sent.gz")["Body"].read() == body
