"""Adaptive polling in the fast path (issue 25; fastpath/src/poll.rs): idle workers spin on
their socket for a budget learnt from the gaps between requests, then block. Measured from
/proc: with sparse requests the executor stays under its configured share of a core (and `spin`
does not, so the measurement can fail); every call still gets its own reply in every mode; the
executor and the client report the mode they run."""

from __future__ import annotations

import pytest

from nearfaas.bench.fastpath_poll import cpu_use, sparse_calls
from nearfaas.fastpath.client import OK, UdpClient
from nearfaas.fastpath.executor import Executor, binary_path, lambda_path

pytestmark = pytest.mark.skipif(not binary_path().exists() or not lambda_path("web").exists(),
                                reason="the fast path is not built (make setup builds it)")
WEB = b"Hello from nearfaas fastpath v1: "


def _burst(ex: Executor, mode: str, n: int = 2000) -> None:
    """Calls back to back (the worker learns short gaps and spins), each checked."""
    with UdpClient(ex.udp_addr, timeout=2.0, poll=mode) as c:
        for i in range(n):
            payload = str(i).encode()
            assert c.call(1, payload) == (OK, WEB + payload)


@pytest.mark.parametrize("mode", ["adaptive", "spin", "block"])
def test_every_call_gets_its_own_reply_in_every_poll_mode(mode):
    with Executor(workers=1, poll=mode) as ex:
        assert ex.info["poll"] == mode
        ex.deploy(1, "web", "wasm", path=lambda_path("web"))
        _burst(ex, mode)
        polled = ex.stats()["poll"]
    assert polled["mode"] == mode
    if mode == "block":
        assert polled["spun_ns"] == 0 and polled["caught"] == 0
    else:
        assert polled["caught"] > 0  # the spinning worker found requests without being woken


def test_sparse_requests_cost_at_most_the_configured_share_of_a_core():
    """20 calls a second after a burst: adaptive spins at most share x gap per call; a block
    executor measured the same way is the floor (its threads' own bookkeeping). Spin, which
    never blocks, must show it, or this measurement could not catch a spinning worker: by its
    *demand* (CPU got plus time runnable and waiting for a core), which stays near 1.0 on a busy
    machine, where its share falls to what the other xdist worker's load leaves it (0.1 seen)."""
    share = 0.05
    used, demand = {}, {}
    for mode, extra in (("block", []), ("adaptive", ["--poll-share", str(share)]), ("spin", [])):
        with Executor(workers=1, poll=mode, extra_args=extra) as ex:
            ex.deploy(1, "web", "wasm", path=lambda_path("web"))
            _burst(ex, mode)
            used[mode], demand[mode] = cpu_use(ex.proc.pid, 2.0, sparse_calls(ex.udp_addr, 1, 20.0, "block"))
            used[f"{mode}-idle"], demand[f"{mode}-idle"] = cpu_use(ex.proc.pid, 1.0)
    print(f"\nexecutor share of a core at 20 calls/s, and idle: {used}; demand: {demand}")
    assert used["adaptive"] <= used["block"] + share + 0.02, used
    assert used["adaptive-idle"] <= used["block-idle"] + 0.02, used  # exact ns from schedstat, not 10 ms ticks
    # Demand separates a thread that spins (about 1.0) from one that blocks, whatever the load; its
    # run-queue part grows with load for every thread that wakes (0.08-0.12 seen idle in CI), so it
    # is not compared between the blocking modes.
    assert demand["adaptive-idle"] < 0.5, demand
    for when in ("spin", "spin-idle"):
        assert demand[when] > 0.5, demand


def test_a_bad_poll_mode_is_refused_naming_the_flag():
    from nearfaas.fastpath.executor import ExecutorError

    with pytest.raises(ExecutorError, match=r"--poll.*adaptive, spin or block"), Executor(workers=1, poll="busy"):
        pass
    with pytest.raises(ValueError, match="adaptive, spin or block"):
        UdpClient(("127.0.0.1", 9), poll="busy")
