"""Lambda coalescing in the fast path (issue 25; λ-NIC §5.1): five lambdas linked into one module
(fastpath/lambdas/coalesced.wasm, one entry each) answer exactly as their separate modules do;
lambdas deployed from the same bytes share one compilation (compiled once, counted once) but never
state; a swapped-out module is freed; a bad entry is refused naming the field."""

from __future__ import annotations

import time

import pytest

from nearfaas.fastpath.client import BAD_REQUEST, OK, UdpClient
from nearfaas.fastpath.executor import ControlError, Executor, binary_path, lambda_path

pytestmark = pytest.mark.skipif(not binary_path().exists() or not lambda_path("coalesced").exists(),
                                reason="the fast path is not built (make setup builds it)")
ENTRIES = {"web": 1, "web2": 2, "web3": 3, "kv": 4, "gray": 5}
RGBA = bytes(range(256)) * 4  # 256 pixels


def _answers(ex: Executor) -> dict:
    with UdpClient(ex.udp_addr, timeout=5.0) as c:
        return {name: (c.call(lid, b"hello"), c.call(lid, RGBA), c.call(lid, b"GET k")) for name, lid in ENTRIES.items()}


def test_coalesced_entries_answer_as_their_separate_modules():
    with Executor(workers=1) as separate:
        for name, lid in ENTRIES.items():
            assert separate.deploy(lid, name, "wasm", path=lambda_path(name))["compiled"] is True
        expected = _answers(separate)
        separate_modules = separate.stats()["modules"]
    with Executor(workers=1) as coalesced:
        compiled = [coalesced.deploy(lid, name, "wasm", path=lambda_path("coalesced"), entry=name)["compiled"]
                    for name, lid in ENTRIES.items()]
        got = _answers(coalesced)
        stats = coalesced.stats()
    assert got == expected
    assert expected["web2"][0] == (OK, b"Hello from nearfaas fastpath lambda 2 v1: hello")
    assert expected["gray"][1][0] == OK and expected["kv"][0][0] == BAD_REQUEST
    assert compiled == [True, False, False, False, False]  # one compilation serves all five
    assert separate_modules["live"] == 5 and stats["modules"]["live"] == 1
    assert {lam["entry"] for lam in stats["lambdas"]} == set(ENTRIES)
    assert len({lam["module"] for lam in stats["lambdas"]}) == 1


def test_a_shared_compilation_shares_no_state():
    """Two lambdas from the same counter module: one compilation, two instances, two counts."""
    with Executor(workers=1) as ex:
        assert ex.deploy(1, "counter", "wasm", path=lambda_path("counter"))["compiled"] is True
        assert ex.deploy(2, "counter-b", "wasm", path=lambda_path("counter"))["compiled"] is False
        with UdpClient(ex.udp_addr, timeout=5.0) as c:
            a = [c.call(1, b"")[1] for _ in range(3)]
            b = [c.call(2, b"")[1] for _ in range(2)]
        assert a == [b"1", b"2", b"3"] and b == [b"1", b"2"]
        assert ex.stats()["modules"]["live"] == 1


def test_a_swapped_out_module_is_freed():
    with Executor(workers=1) as ex:
        ex.deploy(1, "web", "wasm", path=lambda_path("web"))
        ex.deploy(2, "web2", "wasm", path=lambda_path("web2"))
        assert ex.stats()["modules"]["live"] == 2
        ex.deploy(2, "web2", "wasm", path=lambda_path("web"), version=2)  # now the same bytes as lambda 1
        with UdpClient(ex.udp_addr, timeout=5.0) as c:
            assert c.call(2, b"x") == (OK, b"Hello from nearfaas fastpath v1: x")
        assert ex.stats()["modules"]["live"] == 1
        ex.remove(1)
        ex.remove(2)
        # Freed once every worker has dropped its instances (an idle worker wakes every 100 ms).
        deadline = time.monotonic() + 3.0
        while ex.stats()["modules"]["live"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ex.stats()["modules"] == {"live": 0, "code_bytes": 0}


@pytest.mark.parametrize("entry, needle", [("nope", "nope.nf_handle"), ("a.b", "not an entry name"), ("", "not an entry name")])
def test_a_bad_entry_is_refused_naming_the_field(entry, needle):
    with Executor(workers=1) as ex:
        with pytest.raises(ControlError, match="entry") as exc:
            ex.deploy(1, "x", "wasm", path=lambda_path("coalesced"), entry=entry)
        assert needle in str(exc.value)
        with pytest.raises(ControlError, match="entry"):  # a module of one lambda has no entries
            ex.deploy(1, "x", "wasm", path=lambda_path("web"), entry="web")
        with pytest.raises(ControlError, match="entry: only a wasm lambda"):
            ex.control.request(op="deploy", id=1, kind="native", native="web", entry="web")
        assert ex.stats()["lambdas"] == []  # nothing was installed
