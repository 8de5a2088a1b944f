"""The benchmark toolkit (nearfaas.stats, .load, .results): one definition of each statistic,
one HTTP load generator with its fallback, and results that a smoke run can send elsewhere."""

from __future__ import annotations

import json
import math
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nearfaas.bench import load, results
from nearfaas.stats import geomean, median, percentile, present


def test_percentile_is_nearest_rank_on_measured_values():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(list(range(101)), 99) == 99
    assert percentile([7.0], 99) == 7.0


def test_empty_samples_give_the_default():
    assert math.isnan(percentile([], 50)) and math.isnan(median([])) and math.isnan(geomean([]))
    assert percentile([], 99, None) is None and median([], None) is None


def test_geomean_and_present():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert present([1.0, None, float("nan"), 2.0]) == [1.0, 2.0]


WRK_REPORT = """Running 1s test @ http://127.0.0.1:1/
  Latency Distribution
     50%  250.00us
     75%    1.50ms
     90%    2.00ms
     99%    1.20s
  1234 requests in 1.00s, 100.00KB read
  Non-2xx or 3xx responses: 7
Requests/sec:   1234.56
"""


def test_parse_wrk_reports_seconds():
    r = load.parse_wrk(WRK_REPORT)
    assert r["p50_s"] == pytest.approx(250e-6) and r["p99_s"] == pytest.approx(1.2)
    assert r["rps"] == pytest.approx(1234.56) and r["errors"] == 7 and r["generator"] == load.WRK


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: list = []

    def do_POST(self):
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200 if self.headers.get("X-Ok") == "yes" else 500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def echo():
    _Echo.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


BODY = b'a "quoted"\n\\ body\x00\xff'


@pytest.mark.parametrize("run", [load.python_load, load.wrk])
def test_load_generators_send_method_body_and_headers(echo, run):
    if run is load.wrk and not shutil.which("wrk"):
        pytest.skip("wrk is not installed")
    r = run(echo, 1, 0.3, "POST", BODY, {"X-Ok": "yes"})
    assert r["rps"] > 0 and r["errors"] == 0 and r["p50_s"] > 0
    assert set(_Echo.bodies) == {BODY}


def test_python_load_counts_errors(echo):
    r = load.python_load(echo, 2, 0.2, "POST", b"x")  # no X-Ok header: every answer is a 500
    assert r["errors"] > 0 and r["p50_s"] is not None


def test_write_result_goes_where_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv("NEARFAAS_BENCH_RESULTS", str(tmp_path))
    path = results.write_result("smoke", {"x": 1})
    assert path == tmp_path / "smoke.json" and json.loads(path.read_text()) == {"x": 1}
    facts = results.machine_facts()
    assert facts["cpu_count"] and facts["python"]
