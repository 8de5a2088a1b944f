"""The nearfaas CLI end to end, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nearfaas.cluster import launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]


def nf(*args, state: Path, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, NEARFAAS_STATE=str(state), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-m", "nearfaas.cli", *args], capture_output=True, env=env, cwd=ROOT, input=stdin, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"nearfaas {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout.decode()}\n{proc.stderr.decode()}")
    return proc


def test_cli_lifecycle(tmp_path):
    state = tmp_path / "state"
    try:
        up = nf("up", "--port", "0", state=state)
        url = up.stdout.decode().strip().splitlines()[-1]
        assert url.startswith("http://127.0.0.1:")
        again = nf("up", "--port", "0", state=state, check=False)
        assert again.returncode != 0 and b"already running" in again.stderr
        status = json.loads(nf("status", "--json", state=state).stdout)
        assert status["gateway_url"] == url and status["running"]
        assert status["placement"] == "near-data" and status["link_profile"] == "local"  # the cluster file's defaults
        kinds = sorted((n["kind"], n["class"]) for n in status["nodes"])
        assert kinds == [("compute", "cpu"), ("storage", "dscs"), ("storage", "standard")]
        assert all(n["healthy"] for n in status["nodes"])

        assert b"deployed wordcount" in nf("deploy", "-f", "examples/stack.yml", state=state).stdout
        listed = json.loads(nf("list", "--json", state=state).stdout)
        assert {f["name"] for f in listed} == {"wordcount", "hello", "damage-detect", "damage-classify", "damage-notify", "partition"}

        src = tmp_path / "poem.txt"
        src.write_text("one two three\nfour five\n")
        nf("put", str(src), "s3://docs/poem.txt", state=state)
        assert b"poem.txt" in nf("ls", "s3://docs", state=state).stdout
        assert nf("get", "s3://docs/poem.txt", state=state).stdout == src.read_bytes()
        out = json.loads(nf("invoke", "wordcount", "--input", "s3://docs/poem.txt", state=state).stdout)
        assert out["words"] == 5 and out["lines"] == 2 and out["read"].startswith("local mmap")
        assert nf("invoke", "hello", state=state).stdout.strip() == b"ok"
        chain = nf("invoke", "damage-detect", "--input", "s3://docs/poem.txt", "--policy", "near-data", "-v", state=state)
        assert "tensor_sha256" in json.loads(chain.stdout)
        assert b"chain stages" in chain.stderr and b"damage-classify" in chain.stderr and b"storage-0" in chain.stderr
        missing = nf("invoke", "nope", state=state, check=False)
        assert missing.returncode == 1 and b"not found" in missing.stdout

        bad = tmp_path / "bad.yml"
        bad.write_text("version: 1.0\nfunctions:\n  Bad_Name:\n    lang: cobol\n    handler: ./nowhere\n")
        failed = nf("deploy", "-f", str(bad), state=state, check=False)
        assert failed.returncode != 0
        assert b"functions.Bad_Name" in failed.stderr and b"lang" in failed.stderr
        assert b"Traceback" not in failed.stderr

        nf("remove", "hello", state=state)
        assert {f["name"] for f in json.loads(nf("list", "--json", state=state).stdout)} == {
            "wordcount", "damage-detect", "damage-classify", "damage-notify", "partition"}
        down = nf("down", state=state)
        assert b"stopped" in down.stdout
        assert launcher.processes_of(state) == []
        assert json.loads(nf("status", "--json", state=state).stdout)["running"] is False
    finally:
        launcher.down(state)


def test_help_teaches():
    out = subprocess.run([sys.executable, "-m", "nearfaas.cli", "--help"], capture_output=True, cwd=ROOT).stdout.decode()
    for command in ("up", "down", "status", "deploy", "invoke", "put", "get", "ls", "logs", "demo"):
        assert f"  {command}" in out
    assert "Quick start" in out


def test_commands_without_a_cluster_say_how_to_start_one(tmp_path):
    proc = nf("list", state=tmp_path / "none", check=False)
    assert proc.returncode != 0 and b"nearfaas up" in proc.stderr
