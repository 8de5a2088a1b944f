"""Build, start and control the fast-path executor (`nearfaas-fastpath`, docs/fastpath.md)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from nearfaas.fastpath import auth
from nearfaas.fastpath.client import parse_addr

REPO = Path(__file__).resolve().parents[3]
CRATE = REPO / "fastpath"
LAMBDAS = CRATE / "lambdas"
LAMBDA_BUILD = LAMBDAS / "build"
BINARY = "nearfaas-fastpath"
LOAD_BINARY = "nearfaas-fastpath-load"


class ExecutorError(RuntimeError):
    pass


class ControlError(ExecutorError):
    """The executor answered {"ok": false, "error": ...}."""


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache" / "nearfaas" / "cargo-target")


def binary_path(name: str = BINARY) -> Path:
    return target_dir() / "release" / name


def load_binary_path() -> Path:
    return binary_path(LOAD_BINARY)


def lambda_path(name: str) -> Path:
    return LAMBDA_BUILD / f"{name}.wasm"


def _cargo() -> str | None:
    return shutil.which("cargo") or (str(Path.home() / ".cargo/bin/cargo") if (Path.home() / ".cargo/bin/cargo").exists() else None)


def build(progress=None, lambdas: bool = True) -> Path:
    """cargo build --release of the executor crate (and its load generator), then the C lambdas."""
    say = progress or (lambda msg: None)
    cargo = _cargo()
    missing = [what for what, ok in (("cargo (Rust)", cargo), ("clang", shutil.which("clang") or not lambdas),
                                     ("make", shutil.which("make") or not lambdas)) if not ok]
    if missing:
        raise ExecutorError(f"cannot build the fast path: {', '.join(missing)} not installed; run make setup")
    if not (CRATE / "Cargo.toml").exists():
        raise ExecutorError(f"{CRATE / 'Cargo.toml'} is missing")
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
    say(f"cargo build --release ({CRATE / 'Cargo.toml'})")
    proc = subprocess.run([cargo, "build", "--release", "--manifest-path", str(CRATE / "Cargo.toml")], env=env,
                          capture_output=True, text=True)
    if proc.returncode:
        raise ExecutorError(f"cargo build failed:\n{proc.stderr[-4000:]}")
    if lambdas:
        say(f"make -C {LAMBDAS}")
        proc = subprocess.run(["make", "-C", str(LAMBDAS)], capture_output=True, text=True)
        if proc.returncode:
            hint = "; run make setup" if "not found" in proc.stderr or "No such file" in proc.stderr else ""
            raise ExecutorError(f"building the lambdas failed{hint}:\n{proc.stderr[-4000:]}")
    return binary_path()


class ControlClient:
    """JSON lines over TCP: one request object per line, one reply object per line, after the
    challenge-response that proves this client holds the executor's key (``nearfaas.fastpath.auth``)."""

    def __init__(self, addr, key: bytes, timeout: float = 30.0):
        self.sock = socket.create_connection(parse_addr(addr), timeout=timeout)
        self.file = self.sock.makefile("rwb")
        self._lock = threading.Lock()
        try:
            self.file.write(auth.answer(key, self.file.readline()))
            self.file.flush()
            auth.check_reply(self.file.readline())
        except (auth.ControlAuthError, OSError) as exc:
            self.close()
            raise ExecutorError(f"control port {addr}: {exc}") from None

    def request(self, **body) -> dict:
        with self._lock:
            self.file.write(json.dumps(body).encode() + b"\n")
            self.file.flush()
            line = self.file.readline()
        if not line:
            raise ExecutorError(f"control connection closed while waiting for the answer to {body.get('op')!r}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(f"{body.get('op')} failed: {reply.get('error', reply)}")
        return reply

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
        with contextlib.suppress(OSError):
            self.sock.close()


class Executor:
    """A running `nearfaas-fastpath`: started with a temporary ready file, stopped on exit.

        with Executor(workers=1) as ex:
            ex.deploy(7, "web", "wasm", path=lambda_path("web"))
            UdpClient(ex.udp_addr).call(7, b"hi")
    """

    def __init__(self, workers: int = 1, sched: str | None = None, queue_depth: int | None = None, pin: bool = False,
                 host: str | None = None, binary: str | os.PathLike | None = None, extra_args: list[str] | None = None,
                 start_timeout: float = 20.0, env: dict | None = None, control_key_file: str | os.PathLike | None = None,
                 stream: bool = False, poll: str | None = None, slice_us: int | None = None, pool_memory: int | None = None):
        """``control_key_file``: the control port's key (hex, mode 0600); None makes a fresh one
        next to the ready file. ``pool_memory``: the wasm instances' memory budget in bytes
        (--pool-memory, the cluster file's fastpath.memory); None: the executor's default."""
        self.binary = Path(binary) if binary else binary_path()
        self.workers, self.sched, self.queue_depth, self.pin, self.host = workers, sched, queue_depth, pin, host
        self.stream = stream  # open the stream-function listener too (--stream; docs/fastpath.md)
        self.poll = poll  # adaptive | spin | block: how idle workers wait (fastpath/src/poll.rs); None: the executor's default
        self.slice_us = slice_us  # wasm calls run in slices of this many µs (fastpath/src/slice.rs); 0: to completion; None: default
        self.pool_memory = pool_memory
        self.extra_args = list(extra_args or [])
        self.start_timeout = start_timeout
        self.env = env
        self.control_key_file = Path(control_key_file) if control_key_file else None
        self._own_key = control_key_file is None
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._control: ControlClient | None = None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> Executor:
        if not self.binary.exists():
            raise ExecutorError(f"{self.binary} does not exist; build it with nearfaas.fastpath.executor.build() "
                                f"(cargo build --release --manifest-path {CRATE / 'Cargo.toml'})")
        self._tmp = tempfile.TemporaryDirectory(prefix="nearfaas-fastpath-")
        ready = Path(self._tmp.name) / "ready.json"
        self._stderr_path = Path(self._tmp.name) / "stderr.log"
        if self._own_key:
            self.control_key_file = auth.new_key_file(Path(self._tmp.name) / "control.key")
        cmd = [str(self.binary), "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0", "--control", "127.0.0.1:0",
               "--unix", str(Path(self._tmp.name) / "fastpath.sock"), "--workers", str(self.workers), "--ready-file", str(ready),
               "--control-key-file", str(self.control_key_file)]
        if self.host:
            cmd += ["--host", self.host]
        if self.stream:
            cmd += ["--stream", "127.0.0.1:0"]
        if self.queue_depth is not None:
            cmd += ["--queue-depth", str(self.queue_depth)]
        if self.pin:
            cmd.append("--pin")
        if self.sched:
            cmd += ["--sched", self.sched]
        if self.poll:
            cmd += ["--poll", self.poll]
        if self.slice_us is not None:
            cmd += ["--slice-us", str(self.slice_us)]
        if self.pool_memory is not None:
            cmd += ["--pool-memory", str(self.pool_memory)]
        cmd += self.extra_args
        self._stderr = open(self._stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr, env=self.env)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if ready.exists():
                try:
                    self.info = json.loads(ready.read_text())
                    break
                except json.JSONDecodeError:
                    pass  # written but not complete yet
            if self.proc.poll() is not None:
                err = self._stderr_tail()
                self.stop()
                raise ExecutorError(f"{BINARY} exited with {self.proc.returncode} before it was ready:\n{err}")
            if time.monotonic() > deadline:
                err = self._stderr_tail()
                self.stop()
                raise ExecutorError(f"{BINARY} was not ready within {self.start_timeout:.0f} s:\n{err}")
            time.sleep(0.01)
        return self

    def _stderr_tail(self) -> str:
        try:
            return self._stderr_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self._control:
            self._control.close()
            self._control = None
        if self.proc:
            stop_process(self.proc)
        if getattr(self, "_stderr", None):
            self._stderr.close()
            self._stderr = None
        if self._tmp:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Executor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------------------------------
    def _addr(self, key: str) -> tuple[str, int]:
        """The ready file gives `<key>_addr` ("HOST:PORT") and/or `<key>` (a port or "HOST:PORT")."""
        if f"{key}_addr" in self.info:
            return parse_addr(self.info[f"{key}_addr"])
        value = self.info[key]
        if isinstance(value, int):
            return "127.0.0.1", value
        return parse_addr(value)

    @property
    def udp_addr(self) -> tuple[str, int]:
        return self._addr("udp")

    @property
    def tcp_addr(self) -> tuple[str, int]:
        return self._addr("tcp")

    @property
    def stream_addr(self) -> tuple[str, int]:
        """The stream-function listener (only with ``stream=True``)."""
        return self._addr("stream")

    @property
    def control_addr(self) -> tuple[str, int]:
        return self._addr("control")

    @property
    def unix_path(self) -> str:
        return self.info["unix"]

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    # -- control -----------------------------------------------------------------------------------
    @property
    def control(self) -> ControlClient:
        if self._control is None:
            self._control = ControlClient(self.control_addr, auth.read_key(self.control_key_file))
        return self._control

    def deploy(self, lambda_id: int, name: str, kind: str = "wasm", path=None, native: str | None = None, weight: int = 1,
               version: int = 1, timeout_ms: int = 50, external: str | None = None, fuel: int | None = None,
               entry: str | None = None) -> dict:
        """Install (or hot-swap) a lambda. ``entry``: the lambda's entry in a coalesced module
        (fastpath/lambdas/nf.h, e.g. "web2" in coalesced.wasm); None for a module of one lambda."""
        if kind == "wasm" and path is None:
            path = lambda_path(name)
        body = {"op": "deploy", "id": lambda_id, "name": name, "kind": kind, "weight": weight, "version": version,
                "timeout_ms": timeout_ms, "fuel": fuel, "external": external}
        if kind == "wasm":
            body["path"] = str(Path(path).resolve())
            if entry is not None:
                body["entry"] = entry
        else:
            body["native"] = native or name
        return self.control.request(**body)

    def remove(self, lambda_id: int) -> dict:
        return self.control.request(op="remove", id=lambda_id)

    def stats(self) -> dict:
        return self.control.request(op="stats")

    def ping(self) -> dict:
        return self.control.request(op="ping")


def stop_process(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``grace_s``; reaps it either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace_s)
