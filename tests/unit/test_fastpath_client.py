"""The fast path's Python side: the wire format (one module, agreeing with the executor's), the baselines (B1 forking, B2 threading)
answering it as the C lambdas would, and the control port's key and challenge-response (against
the real executor when it is built)."""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import os
import re
import socket
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nearfaas.fastpath
from nearfaas.fastpath import baselines, client, wire
from nearfaas.fastpath.client import TcpClient, UdpClient, parse_addr
from nearfaas.fastpath.wire import (
    BAD_REQUEST,
    HOST_OK,
    OK,
    STATUS,
    TOO_LARGE,
    UNKNOWN,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
    frame,
    status_name,
)
from nearfaas.fastpath.auth import ControlAuthError, check_reply, new_key_file, read_key
from nearfaas.fastpath.auth import answer as control_answer
from nearfaas.fastpath.executor import ControlClient, Executor, ExecutorError, binary_path, load_binary_path, target_dir

WEB = baselines.BASELINE_IDS["web"]


def test_encode_request_is_id_be_then_payload():
    assert encode_request(7, b"hi") == b"\x00" * 7 + b"\x07hi"
    assert encode_request(0x9F3C71D2A4E8B605) == bytes.fromhex("9f3c71d2a4e8b605")  # u64 BE
    assert decode_request(encode_request(258, b"xyz")) == (258, b"xyz")


def test_reply_round_trip():
    for lid, status, payload in [(1, OK, b""), (2**64 - 1, BAD_REQUEST, b"\x00" * 1000), (42, 8, b"boom")]:
        assert decode_reply(encode_reply(lid, status, payload)) == (lid, status, payload)
    assert encode_reply(7, 3, b"x") == b"\x00" * 7 + b"\x07\x03x"


@pytest.mark.parametrize("short", [b"", b"\x00", b"\x00" * 7 + b"\x07"])
def test_short_reply_is_a_clear_value_error(short):
    with pytest.raises(ValueError, match="shorter than the 9-byte header"):
        decode_reply(short)


def test_bad_ids_and_short_requests_are_rejected():
    with pytest.raises(ValueError, match="lambda id"):
        encode_request(-1, b"")
    with pytest.raises(ValueError, match="lambda id"):
        encode_request(2**64, b"")
    with pytest.raises(ValueError, match="shorter than the 8-byte"):
        decode_request(b"\x00\x01\x02\x03")


def test_status_names_follow_the_table():
    assert [STATUS[i] for i in range(10)] == ["OK", "HOST_OK", "UNKNOWN", "TRAP", "TIMEOUT", "TOO_LARGE", "OVERLOADED",
                                             "HOST_ERROR", "EXTERNAL_ERROR", "BAD_REQUEST"]
    assert status_name(200) == "STATUS_200"


def test_tcp_framing_and_addresses():
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert parse_addr("127.0.0.1:9000") == ("127.0.0.1", 9000)
    assert parse_addr(("h", "5")) == ("h", 5)
    with pytest.raises(ValueError):
        parse_addr("nohost")


def test_memfd_and_miss_layouts():
    assert wire.encode_memfd_request(7, 256) == b"\x00" * 7 + b"\x07\x00\x00\x01\x00"
    assert wire.decode_memfd_reply(b"\x00" * 7 + b"\x07\x05\x00\x00\x00\x09") == (7, TOO_LARGE, 9)
    with pytest.raises(ValueError, match="shorter than 13"):
        wire.decode_memfd_reply(b"\x00" * 12)
    assert wire.decode_miss(b"\x00\x00\x00\x01" + b"\x00" * 7 + b"\x07x") == (1, 7, b"x")
    with pytest.raises(ValueError, match="12-byte header"):
        wire.decode_miss(b"\x00" * 11)
    assert wire.encode_host_reply(1, HOST_OK, b"y") == b"\x00\x00\x00\x01\x01y"
    assert wire.frame_length(frame(b"x" * 300)[:4]) == 300


def test_python_and_rust_agree_on_the_wire_format():
    src = (Path(__file__).resolve().parents[2] / "fastpath" / "src" / "wire.rs").read_text()
    assert {name: int(code) for name, code in re.findall(r"pub const (\w+): u8 = (\d+);", src)} == wire.STATUS_CODES
    names = re.search(r"STATUS_NAMES: \[&str; \d+\] = \[(.*?)\];", src, re.S).group(1)
    assert re.findall(r'"(\w+)"', names) == list(wire.STATUS.values())
    sizes = {name: value for name, value in re.findall(r"pub const (\w+): (?:usize|u32) = ([^;]+);", src)}
    assert int(sizes["ID_LEN"]) == wire.REQUEST_HEAD.size and sizes["REPLY_HEAD"] == "ID_LEN + 1"
    assert wire.REPLY_HEAD.size == wire.REQUEST_HEAD.size + 1
    assert int(sizes["FRAME_LEN"]) == wire.FRAME_HEAD.size
    assert int(sizes["MEMFD_REQ"]) == wire.MEMFD_REQUEST.size and int(sizes["MEMFD_REPLY"]) == wire.MEMFD_REPLY.size
    assert int(sizes["TOKEN_LEN"]) + int(sizes["ID_LEN"]) == wire.MISS_HEAD.size
    assert int(sizes["TOKEN_LEN"]) + 1 == wire.HOST_REPLY_HEAD.size
    assert int(sizes["MAX_DGRAM"]) == wire.MAX_DATAGRAM and "pub type LambdaId = u64;" in src
    assert wire.REQUEST_HEAD.size == 8 and wire.MAX_ID == 2**64 - 1  # 64-bit IDs (issue 39)


def test_the_wire_format_lives_in_one_module_below_the_gateway():
    pkg = Path(nearfaas.fastpath.__file__).parent
    for path in pkg.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):  # relative ones resolved from nearfaas.fastpath
                base = ".".join(["nearfaas", "fastpath"][: max(0, 3 - node.level)] + [node.module or ""]) if node.level else node.module
                modules = [base.rstrip(".")] + [f"{base.rstrip('.')}.{alias.name}" for alias in node.names]
            else:
                continue
            assert not any(m.startswith("nearfaas.gateway") for m in modules), f"{path.name} imports the gateway (a higher layer)"
    # The two modules that used to spell the format out take it from nearfaas.fastpath.wire.
    gateway_fastpath = pkg.parent / "gateway" / "fastpath.py"
    for path in (pkg / "client.py", gateway_fastpath):
        assert "import struct" not in path.read_text(), f"{path} packs frames itself"
    from nearfaas.gateway import fastpath as gateway
    assert client.STATUS is gateway.STATUS_NAMES is wire.STATUS
    assert (gateway.HOST_OK, gateway.HOST_ERROR, gateway.UNKNOWN, gateway.MAX_ID) == (wire.HOST_OK, wire.HOST_ERROR, wire.UNKNOWN, wire.MAX_ID)


def test_binary_path_follows_cargo_target_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path))
    assert target_dir() == tmp_path
    assert binary_path() == tmp_path / "release" / "nearfaas-fastpath"
    monkeypatch.delenv("CARGO_TARGET_DIR")
    assert binary_path() == Path.home() / ".cache/nearfaas/cargo-target/release/nearfaas-fastpath"


def test_kv_lambda_semantics_match_kv_c():
    assert baselines.kv_command(b"GET foo") == b"get foo\r\n"
    assert baselines.kv_command(b"get foo\r\n") == b"get foo\r\n"
    assert baselines.kv_command(b"SET k hello world") == b"set k 0 0 11\r\nhello world\r\n"
    assert baselines.kv_command(b"SET k ") == b"set k 0 0 0\r\n\r\n"
    for bad in (b"GET", b"GET foo bar", b"SET k", b"DEL foo", b"GETfoo", b"GET \x01"):
        assert baselines.kv_command(bad) is None, bad
    assert baselines.kv_reply(b"VALUE k 0 3\r\nabc\r\nEND\r\n") == (OK, b"VALUE abc")
    assert baselines.kv_reply(b"END\r\n") == (OK, b"NOT_FOUND")
    assert baselines.kv_reply(b"STORED\r\n") == (OK, b"STORED")
    assert baselines.kv_reply(b"NOT_STORED\r\n")[0] == BAD_REQUEST


def test_gray_lambda_semantics_match_gray_c():
    status, out = baselines.gray(bytes([255, 0, 0, 9, 0, 255, 0, 9, 0, 0, 255, 9, 255, 255, 255, 0]))
    assert status == OK and out == bytes([76, 149, 28, 255])
    assert baselines.gray(b"abc")[0] == BAD_REQUEST


@pytest.mark.parametrize("kind", ["forking", "threading"])
def test_baseline_answers_web_and_survives_malformed(kind):
    # its own process: a forked child of this one would inherit (and hold open) the test's sockets
    with baselines.BaselineProcess(kind) as base, UdpClient(base.udp_addr, timeout=5) as client:
        assert client.call(WEB, b"hi") == (OK, b"Hello from nearfaas fastpath v1: hi")
        assert client.call(baselines.BASELINE_IDS["web3"], b"x") == (OK, b"Hello from nearfaas fastpath lambda 3 v1: x")
        assert client.call(99, b"") == (UNKNOWN, b"")
        raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for junk in (b"", b"\x01", b"\x00\x00\x01"):
            raw.sendto(junk, base.udp_addr)  # shorter than an ID: dropped, never answered
        raw.settimeout(0.2)
        with pytest.raises(socket.timeout):
            raw.recv(100)
        raw.close()
        assert client.call(WEB, b"again") == (OK, b"Hello from nearfaas fastpath v1: again")
        # the same lambdas over TCP framing (how the baselines take the image)
        with TcpClient(base.tcp_addr) as tcp:
            assert tcp.call(WEB, b"t") == (OK, b"Hello from nearfaas fastpath v1: t")
            img = os.urandom(256 * 256 * 4)
            status, out = tcp.call(baselines.BASELINE_IDS["gray"], img)
            assert status == OK and out == baselines.gray(img)[1] and len(out) == 256 * 256
            # kv without memcached configured: EXTERNAL_ERROR, not a crash
            assert tcp.call(baselines.BASELINE_IDS["kv"], b"GET x")[0] == 8


def test_baseline_runs_as_a_module(tmp_path):
    ready = tmp_path / "ready.json"
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "nearfaas.fastpath.baselines", "--kind", "threading", "--port", "0",
                             "--ready-file", str(ready)], env=env)
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid and info["ids"]["web"] == WEB
        with UdpClient(info["udp"], timeout=5) as client:
            assert client.call(WEB, struct.pack(">I", 5)) == (OK, b"Hello from nearfaas fastpath v1: \x00\x00\x00\x05")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(not load_binary_path().exists(), reason="nearfaas-fastpath-load not built (cargo build --release in fastpath/)")
def test_load_generator_reports_json_against_a_baseline():
    with baselines.BaselineProcess("threading") as base:
        out = subprocess.run([str(load_binary_path()), "--addr", "{}:{}".format(*base.udp_addr), "--ids", "1,2", "--outstanding", "4",
                              "--duration", "0.5", "--warmup", "0.1", "--json"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["match"] == "tag"  # the web lambdas echo the payload, so replies are matched exactly
    assert report["requests"] > 0 and report["statuses"] == {"0": report["requests"]}
    assert set(report["per_id"]) == {"1", "2"} and report["p50_us"] > 0 and report["req_per_s"] > 0


# -- control-port authentication (nearfaas.fastpath.auth) ------------------------------------------

def test_key_file_is_0600_from_creation_and_read_back(tmp_path):
    path = tmp_path / "k"
    path.write_text("old")
    os.chmod(path, 0o644)  # an existing file must not keep a readable mode
    assert new_key_file(path) == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = read_key(path)
    assert len(key) == 32 and path.read_text() == key.hex()
    assert read_key(new_key_file(tmp_path / "k2")) != key  # fresh randomness each time


@pytest.mark.parametrize("content, needle", [("zz", "not a hex"), ("abcd", "at least 16"), (None, "cannot read")])
def test_bad_keys_are_named(tmp_path, content, needle):
    path = tmp_path / "k"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ControlAuthError, match=needle):
        read_key(path)


def test_answer_is_hmac_sha256_of_the_nonce():
    key, nonce = b"k" * 32, bytes(range(32))
    line = control_answer(key, json.dumps({"challenge": nonce.hex(), "auth": "hmac-sha256"}).encode() + b"\n")
    assert line.endswith(b"\n")
    assert json.loads(line) == {"op": "auth", "hmac": hmac.new(key, nonce, hashlib.sha256).hexdigest()}
    with pytest.raises(ControlAuthError, match="did not send a challenge"):
        control_answer(key, b'{"ok": true, "pong": true}\n')
    with pytest.raises(ControlAuthError, match="refused the control key"):
        check_reply(b'{"ok": false, "error": "auth: wrong"}\n')
    with pytest.raises(ControlAuthError, match="connection closed"):
        check_reply(b"")
    check_reply(b'{"ok": true, "op": "auth"}\n')


_built = pytest.mark.skipif(not binary_path().exists(), reason="nearfaas-fastpath not built (make setup)")


@_built
def test_the_executor_runs_ops_only_for_the_key_holder(tmp_path):
    with Executor(workers=1) as ex:
        assert stat.S_IMODE(ex.control_key_file.stat().st_mode) == 0o600
        ex.deploy(7, "web", "native")
        with UdpClient(ex.udp_addr, timeout=5) as client:
            assert client.call(7, b"k") == (OK, b"Hello from nearfaas fastpath v1: k")
        with pytest.raises(ExecutorError, match="refused the control key"):
            ControlClient(ex.control_addr, read_key(new_key_file(tmp_path / "wrong.key")))
        # Speaking the old protocol (an op first): refused and closed, the op not run.
        with socket.create_connection(ex.control_addr, timeout=10) as raw:
            f = raw.makefile("rwb")
            assert "challenge" in json.loads(f.readline())
            f.write(b'{"op": "remove", "id": 7}\n')
            f.flush()
            assert json.loads(f.readline())["ok"] is False
            assert f.readline() == b""
        assert [lam["id"] for lam in ex.stats()["lambdas"]] == [7]
        assert ex.stats()["auth_failures"] == 2


@_built
def test_the_executor_refuses_to_start_without_a_key(tmp_path):
    out = subprocess.run([str(binary_path()), "--workers", "1"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--control-key-file is required" in out.stderr
