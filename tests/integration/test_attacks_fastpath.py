"""Issue 39, finding 2: the fast path must not be a way around ``x-nearfaas.auth``.

Before the fix a function with ``auth: true`` answered 401 on ``/function/<name>`` without the
cluster's keys, yet ``sendto(pack(">I", id) + body)`` to the executor's UDP port (a miss the
executor forwarded to the gateway), the same framed over its TCP port, or a miss forged straight
to the gateway's host port ran it and returned its output; lambda IDs were small sequential
numbers, so sweeping them found it. Each attack below is the exact one (IDs are 8 bytes on the
wire now, ``pack(">Q", id)``), on the shared session cluster (auth on, executor running);
docs/fastpath.md "Security" says what stops it.
"""

import os
import socket
from pathlib import Path

import pytest
import requests

from nearfaas.fastpath import wire
from nearfaas.fastpath.client import TcpClient, UdpClient
from nearfaas.fastpath.executor import binary_path

ROOT = Path(__file__).resolve().parents[2]
LAMBDAS = ROOT / "fastpath" / "lambdas" / "build"
MARKER = b"attacker-asks-for-the-protected-output"

if not (binary_path().exists() and (LAMBDAS / "web.wasm").exists()):
    if os.environ.get("CI"):
        raise RuntimeError(f"the fast path is not built ({binary_path()}, {LAMBDAS}); `make setup` builds it")
    pytest.skip("the fast path is not built: run `make setup`", allow_module_level=True)


@pytest.fixture(scope="module")
def protected(cluster, functions_dir):
    """A protected function (echo, auth: true) and its lambda ID, deployed once for the module."""
    name = "fp-attack-private"
    assert cluster.deploy(name, functions_dir / "echo", **{"x-nearfaas": {"auth": True}}).status_code == 202
    lambda_id = cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["lambdaId"]
    # The front door refuses it without keys and runs it with them: the baseline the fast path must match.
    assert requests.post(f"{cluster.url}/function/{name}", data=MARKER, timeout=10).status_code == 401
    resp = cluster.http.post(f"{cluster.url}/function/{name}", data=MARKER, timeout=30)
    assert resp.status_code == 200 and MARKER in resp.content
    yield name, lambda_id
    cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def _addr(cluster, port: str):
    return cluster.layout["host"], cluster.layout["fastpath"][port]


def test_udp_sendto_of_a_protected_id_is_refused(cluster, protected):
    _, lambda_id = protected
    with UdpClient(_addr(cluster, "udp"), timeout=10) as client:
        status, reply = client.call(lambda_id, MARKER)
    assert status == wire.UNAUTHORIZED and MARKER not in reply and b"requires credentials" in reply


def test_tcp_frame_of_a_protected_id_is_refused(cluster, protected):
    _, lambda_id = protected
    with TcpClient(_addr(cluster, "tcp"), timeout=10) as client:
        status, reply = client.call(lambda_id, MARKER)
    assert status == wire.UNAUTHORIZED and MARKER not in reply


def test_a_miss_forged_to_the_gateway_host_port_is_refused(cluster, protected):
    _, lambda_id = protected
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(10)
        s.sendto(wire.MISS_HEAD.pack(4242, lambda_id) + MARKER, _addr(cluster, "host_port"))
        reply = s.recv(65536)
    token, status = wire.HOST_REPLY_HEAD.unpack_from(reply)
    assert (token, status) == (4242, wire.UNAUTHORIZED) and MARKER not in reply


def _deploy_web(cluster, name: str) -> int:
    body = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm"}}}
    assert cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30).status_code == 202
    return cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["lambdaId"]


def _sweep(addr, ids, window: int = 256) -> dict[int, int]:
    """UDP requests for every id in ``ids``, ``window`` in flight at a time: {id: status}. A
    datagram lost on the way is asked again (at most twice); an id never answered is left out."""
    answers: dict[int, int] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        for _ in range(3):
            todo = [i for i in ids if i not in answers]
            for at in range(0, len(todo), window):
                batch = todo[at:at + window]
                for i in batch:
                    s.sendto(wire.encode_request(i, MARKER), addr)
                try:
                    for _ in batch:
                        rid, status, _ = wire.decode_reply(s.recv(65536))
                        answers[rid] = status
                except TimeoutError:
                    pass
    return answers


def test_lambda_ids_are_random_64_bit_and_a_sweep_of_small_ids_finds_nothing(cluster, protected):
    # Finding 2's other half: IDs were 1, 2, 3, ..., so counting up from one's own ID found every
    # other function. Now the gateway draws 64 random bits (at least 2**32) per deployment.
    names = ["fp-attack-id-a", "fp-attack-id-b"]
    try:
        a, b = (_deploy_web(cluster, n) for n in names)
        _, secret = protected
        for i in (a, b, secret):
            assert 2**32 <= i < 2**64, f"lambda ID {i} is not a 64-bit random value"
        assert abs(a - b) > 1 and abs(b - secret) > 1, (a, b, secret)  # not a counter
        with UdpClient(_addr(cluster, "udp"), timeout=10) as client:
            assert client.call(a, b"mine") == (wire.OK, b"Hello from nearfaas fastpath v1: mine")
        # Every small ID, all 65536 the old dense table held: nothing answers but UNKNOWN (the
        # executor forwards each miss to the gateway, which names no function for it).
        answers = _sweep(_addr(cluster, "udp"), range(65536))
        assert len(answers) == 65536, f"{65536 - len(answers)} small IDs got no answer"
        found = {i: st for i, st in answers.items() if st != wire.UNKNOWN}
        assert not found, f"small IDs that name something: {dict(list(found.items())[:10])}"
    finally:
        for n in names:
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": n}, timeout=30)


def test_a_protected_function_cannot_be_installed_in_the_executor(cluster):
    body = {"service": "fp-attack-private-lambda", "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "auth": True, "fastpath": {"module": "web.wasm"}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30)
    try:
        assert resp.status_code == 400 and "auth" in resp.text, resp.text
    finally:
        if resp.status_code < 300:
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "fp-attack-private-lambda"}, timeout=30)


def test_256_idle_tcp_connections_are_closed_and_calls_succeed_again(cluster):
    # Finding 6 (fast-path half): 256 idle connections used to fill the executor's pool for good,
    # so every later call over TCP (and every HTTP call the gateway relays) failed with 502.
    name = "fp-attack-web"
    body = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm"}}}
    assert cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30).status_code == 202
    lambda_id = cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["lambdaId"]
    idle = []
    try:
        for _ in range(256):
            s = socket.create_connection(_addr(cluster, "tcp"), timeout=5)
            idle.append(s)
        # Wait for the executor to close each one (EOF or reset): over its per-peer cap at once,
        # the rest after fastpath.tcp_idle_ms (5 s by default).
        for s in idle:
            s.settimeout(30)
            try:
                assert s.recv(1) == b"", "an idle connection got data"
            except ConnectionResetError:
                pass
        resp = requests.post(f"{cluster.url}/function/{name}", data=b"after", timeout=30)
        assert resp.status_code == 200 and resp.content.endswith(b"after"), (resp.status_code, resp.text)
        with TcpClient(_addr(cluster, "tcp"), timeout=10) as client:
            assert client.call(lambda_id, b"tcp")[0] == wire.OK
    finally:
        for s in idle:
            s.close()
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


@pytest.mark.parametrize("target", ["storage node", "gateway", "localhost:gateway", "[::1]:11211", "169.254.169.254:80",
                                    "10.0.0.7:11211"])
def test_a_lambda_cannot_point_the_executor_at_loopback_or_private_services(cluster, target):
    # Red team round 3: ``external`` was any host:port, and the executor (on the host network,
    # as root) kept a TCP connection to it and relayed the lambda's bytes: a deployer could talk
    # to anything listening on loopback or a private network. It is judged by the egress policy
    # at deploy now (gateway.egress_allow), and the executor gets the checked address. (The
    # test cluster allows 127.0.0.1 for its callback recorders, but never the cluster's own ports.)
    node_port = next(n["port"] for n in cluster.layout["nodes"] if n["kind"] == "storage")
    external = {"storage node": f"127.0.0.1:{node_port}", "gateway": f"127.0.0.1:{cluster.layout['gateway_port']}",
                "localhost:gateway": f"localhost:{cluster.layout['gateway_port']}"}.get(target, target)
    name = "fp-attack-external"
    body = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "kv.wasm", "external": external}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30)
    try:
        assert resp.status_code == 400 and "fastpath.external is refused" in resp.text and "egress_allow" in resp.text, resp.text
        assert cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).status_code == 404
    finally:
        if resp.status_code < 300:
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


@pytest.mark.parametrize("ask, setting", [({"weight": 1000}, "fastpath.max_weight of 8"),
                                          ({"timeout_ms": 60_000}, "fastpath.max_timeout_ms of 1000")])
def test_a_deployer_cannot_take_the_executor_with_a_weight_or_timeout_of_its_choosing(cluster, ask, setting):
    # Red team round 3: a looping lambda deployed with weight 1000 and timeout_ms 60000 took
    # 1000 of every 1001 slices from every other tenant's lambdas, for a minute per call. The
    # operator's ceilings (cluster file fastpath.max_weight / max_timeout_ms) bound both now.
    name = "fp-attack-hog"
    body = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", **ask}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30)
    try:
        assert resp.status_code == 400 and setting in resp.text, resp.text
    finally:
        if resp.status_code < 300:
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)
    at_ceiling = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
                  "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "weight": 8, "timeout_ms": 1000}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=at_ceiling, timeout=30)
    try:
        assert resp.status_code < 300, resp.text
        # Round 6 (R3): its instances count against its namespace's share of the executor's
        # slots (fastpath/src/quota.rs); the gateway names the group.
        executor = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
        assert [lam["group"] for lam in executor["lambdas"] if lam["name"] == name] == ["(default namespace)"]
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def test_a_stream_stage_cannot_ask_for_more_time_than_the_operator_allows(cluster):
    # Red team round 4: a wasm stream stage could ask for 10 s a call, and its calls run inline
    # on the one stream event loop: one small request held every tenant's streams for minutes.
    # The stage's timeout_ms is the request's budget now (executor), at most the cluster's
    # fastpath.max_timeout_ms (gateway).
    name = "fp-attack-slow-stream"
    body = {"service": name, "lang": "wasm", "handler": str(LAMBDAS),
            "x-nearfaas": {"target": "stream", "stream": {"fn": "wasm", "module": "stream_bad.wasm", "k": 1, "timeout_ms": 10_000}}}
    resp = cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30)
    try:
        assert resp.status_code == 400 and "fastpath.max_timeout_ms of 1000" in resp.text, resp.text
    finally:
        if resp.status_code < 300:
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)
    body["x-nearfaas"]["stream"].pop("timeout_ms")  # none asked: the ceiling is its budget
    assert cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30).status_code == 202
    try:
        info = cluster.http.get(f"{cluster.url}/system/function/{name}", timeout=5).json()["stream"]
        with socket.create_connection((cluster.layout["host"], cluster.layout["fastpath"]["stream"]), timeout=30) as s:
            s.sendall(wire.STREAM_HEAD.pack(info["id"], 4) + (2).to_bytes(4, "little"))  # element 2 spins forever
            status = s.recv(1)
        assert status == bytes([wire.TIMEOUT]), status  # stopped by the 1 s budget, not left running
        # Round 5 (N1): its wasm stage takes turns with other namespaces' in the executor's
        # offload pool (fastpath/src/stream/offload.rs); the gateway names the group.
        executor = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
        assert [s["group"] for s in executor["streams"] if s["name"] == name] == ["(default namespace)"], executor["streams"]
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def test_connections_from_other_loopback_addresses_cannot_shut_the_gateway_out(cluster):
    # Red team round 7: the executor's per-peer shares count by IP, and on loopback any local
    # process binds 127.0.0.2, 127.0.0.3, ...: two addresses held every slot of the stream port
    # (the gateway's stream calls answered 429) and of the TCP port (its relayed lambda calls
    # 502), and 16 held the control port (every deploy and removal failed). The gateway calls
    # over unix sockets of its own now (mode 0600 in the state dir). Broken build (the gateway
    # on the TCP ports): tcp_conns counts its pooled connection; the stream call is a 429.
    import resource
    import threading

    fp = cluster.layout["fastpath"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    names = {"stream": "fp-attack-flooded-stream", "lambda": "fp-attack-flooded-lambda"}
    bodies = [{"service": names["stream"], "lang": "native", "handler": os.path.dirname(__file__),
               "x-nearfaas": {"target": "stream", "stream": {"fn": "topk", "k": 1}}},
              {"service": names["lambda"], "lang": "wasm", "handler": str(LAMBDAS),
               "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm"}}}]
    held: list[socket.socket] = []
    stop = threading.Event()

    def flood(port: str, share: int, opened: list, first: bytes = b"") -> None:
        for source in ("127.0.0.2", "127.0.0.3"):  # each address's share: all of the port's slots
            for _ in range(share):
                s = socket.socket()
                s.bind((source, 0))
                s.connect(_addr(cluster, port))
                s.sendall(first)
                opened.append(s)
                held.append(s)

    streams: list[socket.socket] = []

    def trickle():  # a byte of payload now and then, from the first one opened: never idle, never done
        while not stop.wait(0.3):
            for s in list(streams):
                try:
                    s.send(b"\0")
                except OSError:
                    pass

    try:
        for body in bodies:
            assert cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30).status_code == 202
        stream_id = cluster.http.get(f"{cluster.url}/system/function/{names['stream']}", timeout=5).json()["stream"]["id"]
        # The TCP port: the gateway's relayed lambda calls hold none of its connections (a flood
        # of them is fastpath/tests/security.rs's; here the TCP slots would idle out within
        # tcp_idle_ms while the stream flood is opened).
        lambda_call = requests.post(f"{cluster.url}/function/{names['lambda']}", data=b"GET / HTTP/1.0\r\n\r\n", timeout=30)
        assert lambda_call.status_code == 200, lambda_call.text
        executor = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
        assert executor["tcp_conns"] == 0, executor
        # The stream port: every slot held by two other loopback addresses, kept busy.
        threading.Thread(target=trickle, daemon=True).start()
        flood("stream", 512, streams, wire.STREAM_HEAD.pack(stream_id, wire.STREAM_UNTIL_EOF))
        executor = cluster.http.get(f"{cluster.url}/system/fastpath", timeout=5).json()["executor"]
        assert executor["stream_conns"] >= 1024, executor  # every TCP slot is the attacker's
        stream_call = requests.post(f"{cluster.url}/function/{names['stream']}", data=(7).to_bytes(4, "little"), timeout=30)
        assert stream_call.status_code == 200, stream_call.text
        assert stat_mode(fp["tcp_unix"]) == stat_mode(fp["stream_unix"]) == stat_mode(fp["control_unix"]) == 0o600
    finally:
        stop.set()
        for s in held:
            s.close()
        for name in names.values():
            cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": name}, timeout=30)


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777
