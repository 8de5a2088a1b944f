"""The fast path's C lambdas (fastpath/lambdas): they build, and each module keeps the lambda ABI
of docs/fastpath.md — it imports nothing and exports memory, nf_buffer, nf_buffer_size and
nf_handle with the right signatures (kv also nf_resume, secret also nf_secret_addr).

No WebAssembly runtime is needed: the modules are read with a small section parser. Running
them is the Rust executor's tests' job. Skipped where clang or wasm-ld is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

LAMBDAS_DIR = Path(__file__).resolve().parents[2] / "fastpath" / "lambdas"

I32 = 0x7F
FUNC_ABI = {  # export name -> (params, results)
    "nf_buffer": ((), (I32,)),
    "nf_buffer_size": ((), (I32,)),
    "nf_handle": ((I32,), (I32,)),
    "nf_resume": ((I32,), (I32,)),
    "nf_secret_addr": ((), (I32,)),
}
MODULES = {
    "web": {"nf_handle"},
    "web_v2": {"nf_handle"},
    "web2": {"nf_handle"},
    "web3": {"nf_handle"},
    "kv": {"nf_handle", "nf_resume"},
    "gray": {"nf_handle"},
    "gray_scalar": {"nf_handle"},
    "counter": {"nf_handle"},
    "spin": {"nf_handle"},
    "burn": {"nf_handle"},
    "oob": {"nf_handle"},
    "secret": {"nf_handle", "nf_secret_addr"},
    "snoop": {"nf_handle"},
}

needs_toolchain = pytest.mark.skipif(
    shutil.which("clang") is None or shutil.which("wasm-ld") is None,
    reason="clang/wasm-ld (Debian: clang lld) not installed",
)


def _uleb(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            return v, i


def _name(b: bytes, i: int) -> tuple[str, int]:
    n, i = _uleb(b, i)
    return b[i : i + n].decode(), i + n


def parse(wasm: bytes) -> dict:
    """Types, imports, exports, function types and memory limits of a wasm module."""
    assert wasm[:8] == b"\0asm\x01\0\0\0", "not a wasm v1 module"
    types: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    imports: list[tuple[str, str, int]] = []
    exports: dict[str, tuple[int, int]] = {}
    funcs: list[int] = []
    memories: list[tuple[int, int | None]] = []
    i = 8
    while i < len(wasm):
        sid = wasm[i]
        size, i = _uleb(wasm, i + 1)
        body, end = i, i + size
        if sid == 1:  # type
            n, j = _uleb(wasm, body)
            for _ in range(n):
                assert wasm[j] == 0x60
                np, j = _uleb(wasm, j + 1)
                params = tuple(wasm[j : j + np])
                j += np
                nr, j = _uleb(wasm, j)
                results = tuple(wasm[j : j + nr])
                j += nr
                types.append((params, results))
        elif sid == 2:  # import
            n, j = _uleb(wasm, body)
            for _ in range(n):
                mod, j = _name(wasm, j)
                name, j = _name(wasm, j)
                imports.append((mod, name, wasm[j]))
                break  # any import is a failure; no need to decode its descriptor
        elif sid == 3:  # function
            n, j = _uleb(wasm, body)
            for _ in range(n):
                t, j = _uleb(wasm, j)
                funcs.append(t)
        elif sid == 5:  # memory
            n, j = _uleb(wasm, body)
            for _ in range(n):
                flags = wasm[j]
                lo, j = _uleb(wasm, j + 1)
                hi = None
                if flags & 1:
                    hi, j = _uleb(wasm, j)
                memories.append((lo, hi))
        elif sid == 7:  # export
            n, j = _uleb(wasm, body)
            for _ in range(n):
                name, j = _name(wasm, j)
                kind = wasm[j]
                idx, j = _uleb(wasm, j + 1)
                exports[name] = (kind, idx)
        i = end
    return {"types": types, "imports": imports, "exports": exports, "funcs": funcs, "memories": memories}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lambdas")
    r = subprocess.run(["make", "-C", str(LAMBDAS_DIR), f"BUILD={out}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@needs_toolchain
@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_keeps_the_abi(built: Path, name: str) -> None:
    m = parse((built / f"{name}.wasm").read_bytes())
    assert m["imports"] == [], f"{name} imports {m['imports']}"
    assert m["exports"].get("memory", (None,))[0] == 0x02, "memory not exported"
    assert len(m["memories"]) == 1
    want = {"nf_buffer", "nf_buffer_size"} | MODULES[name]
    funcs = {k for k, (kind, _) in m["exports"].items() if kind == 0x00}
    assert funcs == want, f"{name} exports functions {sorted(funcs)}, want {sorted(want)}"
    for fname in funcs:
        _, idx = m["exports"][fname]
        assert m["types"][m["funcs"][idx]] == FUNC_ABI[fname], f"{name}.{fname} has the wrong signature"


@needs_toolchain
def test_web_variants_differ(built: Path) -> None:
    greetings = {
        "web": b"Hello from nearfaas fastpath v1: ",
        "web_v2": b"Hello from nearfaas fastpath v2: ",
        "web2": b"Hello from nearfaas fastpath lambda 2 v1: ",
        "web3": b"Hello from nearfaas fastpath lambda 3 v1: ",
    }
    blobs = {n: (built / f"{n}.wasm").read_bytes() for n in greetings}
    for n, g in greetings.items():
        assert g in blobs[n], n
    assert len(set(blobs.values())) == len(blobs), "the web variants must be distinct modules"


@needs_toolchain
def test_gray_buffer_holds_a_256x256_rgba_image(built: Path) -> None:
    m = parse((built / "gray.wasm").read_bytes())
    initial_pages, _ = m["memories"][0]
    assert initial_pages * 65536 >= 1 << 20  # the 1 MiB static buffer (256*256*4 = 256 KiB fits)


@needs_toolchain
def test_build_is_incremental(built: Path) -> None:
    r = subprocess.run(["make", "-C", str(LAMBDAS_DIR), f"BUILD={built}", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, "a second make would rebuild something"


def test_missing_compiler_is_named(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make not installed")
    r = subprocess.run(
        ["make", "-C", str(LAMBDAS_DIR), "CLANG=/nonexistent/clang", f"BUILD={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert "lld" in r.stderr and "wasi-libc" in r.stderr
