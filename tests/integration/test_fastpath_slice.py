"""Preemptive slices in the fast path (issue 25; fastpath/src/slice.rs): wasm calls run in
slices, a suspended call goes back to the front of its lambda's queue, and deficit round-robin
charges slices. Checked against a real executor: every sliced call still returns its exact
result (several workers, so suspended calls also resume on another worker), a light lambda is
answered while an adversarial lambda spins, the spinning lambda still times out, FIFO runs
calls to completion, a hot swap while calls are suspended loses none, and bad flags are refused."""

from __future__ import annotations

import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from nearfaas.fastpath.client import BAD_REQUEST, OK, TIMEOUT, UdpClient
from nearfaas.fastpath.executor import Executor, binary_path, lambda_path

pytestmark = pytest.mark.skipif(not binary_path().exists() or not lambda_path("burn").exists(),
                                reason="the fast path is not built (make setup builds it)")
WEB = b"Hello from nearfaas fastpath v1: "
BURN, LIGHT, SPIN = 9, 1, 7


def burn_payload(rounds: int, data: bytes) -> bytes:
    return b"%d %s" % (rounds, data)


def burn_answer(rounds: int, data: bytes) -> bytes:
    """What burn.wasm computes (fastpath/lambdas/burn.c), in Python."""
    h = 0xCBF29CE484222325
    for r in range(rounds):
        for b in data:
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        h ^= r
    return f"{h:016x}".encode()


# Calls of about a millisecond: many slices of 20 µs each.
CASES = [(5000 + 97 * i, bytes((i * 7 + j) % 256 for j in range(40 + i))) for i in range(4)]
EXPECTED = {i: burn_answer(r, d) for i, (r, d) in enumerate(CASES)}


def _heavy_and_light(ex: Executor, rounds_each: int = 12) -> tuple[list, list]:
    """Three clients calling burn with every case while one calls web: (burn misses, web misses)."""
    wrong_burn, wrong_web, stop = [], [], threading.Event()

    def heavy(k):
        with UdpClient(ex.udp_addr, timeout=10.0) as c:
            for n in range(rounds_each):
                i = (k + n) % len(CASES)
                got = c.call(BURN, burn_payload(*CASES[i]))
                if got != (OK, EXPECTED[i]):
                    wrong_burn.append((i, got))

    def light():
        with UdpClient(ex.udp_addr, timeout=10.0) as c:
            n = 0
            while not stop.is_set():
                payload = str(n).encode()
                got = c.call(LIGHT, payload)
                if got != (OK, WEB + payload):
                    wrong_web.append(got)
                n += 1

    lt = threading.Thread(target=light)
    lt.start()
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(heavy, range(3)))
    stop.set()
    lt.join()
    return wrong_burn, wrong_web


@pytest.mark.parametrize("workers", [1, 2])
def test_slicing_preserves_every_calls_result(workers):
    with Executor(workers=workers, sched="drr", slice_us=20) as ex:
        assert ex.info["slice_us"] == 20
        ex.deploy(LIGHT, "web", "wasm", path=lambda_path("web"))
        ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"), timeout_ms=5000)
        wrong_burn, wrong_web = _heavy_and_light(ex)
        stats = ex.stats()
    assert wrong_burn == [] and wrong_web == []
    burn = next(lam for lam in stats["lambdas"] if lam["id"] == BURN)
    assert burn["sliced"] is True and burn["ok"] == 36, burn
    # The calls really were cut into slices (else this test would prove nothing).
    assert stats["slice"]["yields"] > 0 and stats["slice"]["in_flight"] == 0, stats["slice"]


def test_fifo_runs_calls_to_completion():
    with Executor(workers=1, sched="fifo", slice_us=20) as ex:
        ex.deploy(LIGHT, "web", "wasm", path=lambda_path("web"))
        ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"), timeout_ms=5000)
        wrong_burn, wrong_web = _heavy_and_light(ex, rounds_each=4)
        stats = ex.stats()
    assert wrong_burn == [] and wrong_web == []
    assert stats["slice"]["preempt"] is False and stats["slice"]["yields"] == 0


def test_slice_zero_runs_unsliced_with_the_same_results():
    with Executor(workers=1, slice_us=0) as ex:
        assert ex.info["slice_us"] is None
        ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"), timeout_ms=5000)
        with UdpClient(ex.udp_addr, timeout=10.0) as c:
            for i, case in enumerate(CASES[:3]):
                assert c.call(BURN, burn_payload(*case)) == (OK, EXPECTED[i])
        stats = ex.stats()
    assert stats["slice"] is None
    assert next(lam for lam in stats["lambdas"] if lam["id"] == BURN)["sliced"] is False


def test_a_spinning_lambda_times_out_and_does_not_hold_back_a_light_one():
    """An adversarial lambda loops forever. Sliced, a light call made while it spins is answered
    long before the spinner's timeout, and the spinner still gets TIMEOUT."""
    with Executor(workers=1, sched="drr", slice_us=50) as ex:
        ex.deploy(LIGHT, "web", "wasm", path=lambda_path("web"))
        ex.deploy(SPIN, "spin", "wasm", path=lambda_path("spin"), timeout_ms=400)
        box = {}

        def spin():
            with UdpClient(ex.udp_addr, timeout=5.0) as c:
                t = time.monotonic()
                box["spin"] = c.call(SPIN, b"")
                box["spin_s"] = time.monotonic() - t

        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.05)  # the spinner holds the only worker now
        with UdpClient(ex.udp_addr, timeout=5.0) as c:
            t0 = time.monotonic()
            light = c.call(LIGHT, b"x")
            light_s = time.monotonic() - t0
        t.join()
        after = UdpClient(ex.udp_addr, timeout=5.0).call(LIGHT, b"y")
    assert light == (OK, WEB + b"x")
    assert box["spin"][0] == TIMEOUT and 0.35 <= box["spin_s"] < 3.0, box
    assert light_s < 0.2, f"the light call waited {light_s:.3f} s behind the spinner"
    assert after == (OK, WEB + b"y")


def test_hot_swap_while_calls_are_suspended_loses_nothing():
    """Redeploy burn (a new version each time) while its calls are mid-slice: every call is
    answered by the version it started on, with the right result."""
    with Executor(workers=2, sched="drr", slice_us=20) as ex:
        ex.deploy(LIGHT, "web", "wasm", path=lambda_path("web"))
        ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"), timeout_ms=5000)
        swapped = []

        def swapper():
            for v in range(2, 10):
                ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"), timeout_ms=5000, version=v)
                swapped.append(v)
                time.sleep(0.01)

        wrong_burn, wrong_web = [], []
        with ThreadPoolExecutor(1) as pool:
            swaps = pool.submit(swapper)
            while not swaps.done():  # calls keep running, and being suspended, across every swap
                wb, ww = _heavy_and_light(ex, rounds_each=4)
                wrong_burn += wb
                wrong_web += ww
            swaps.result()
        stats = ex.stats()
    assert wrong_burn == [] and wrong_web == []
    assert swapped == list(range(2, 10))
    assert next(lam for lam in stats["lambdas"] if lam["id"] == BURN)["version"] == 9
    assert stats["slice"]["yields"] > 0 and stats["slice"]["in_flight"] == 0


def test_burn_refuses_a_payload_without_its_round_count():
    with Executor(workers=1) as ex:
        ex.deploy(BURN, "burn", "wasm", path=lambda_path("burn"))
        with UdpClient(ex.udp_addr, timeout=5.0) as c:
            assert [c.call(BURN, p)[0] for p in (b"", b"12", b"x 1", b"1234567890 a")] == [BAD_REQUEST] * 4
            assert c.call(BURN, b"0 ") == (OK, burn_answer(0, b""))


@pytest.mark.parametrize("value", ["5", "-1", "abc", "2000000"])
def test_a_bad_slice_is_refused_naming_the_flag(value, tmp_path):
    key = tmp_path / "k"
    key.write_text("ab" * 32)
    key.chmod(0o600)
    r = subprocess.run([str(binary_path()), "--control-key-file", str(key), "--slice-us", value],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--slice-us" in r.stderr, r.stderr
