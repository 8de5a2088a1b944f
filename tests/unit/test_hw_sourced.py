"""The one cited-figure type (nearfaas.hw.sourced) and the one memory table (nearfaas.hw.memory)."""

from __future__ import annotations

import math

import pytest

from nearfaas.hw import energy, memory
from nearfaas.hw.devices import catalog, dsa
from nearfaas.hw.dsa.config import DRAM_GBPS, DSAConfig
from nearfaas.hw.sourced import Sourced
from nearfaas.twin import cost, platforms, power


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"value": 1.0, "source": ""}, "source"),
        ({"value": 1.0, "source": "   "}, "source"),
        ({"value": 1.0, "source": "x", "status": "guess"}, "status"),
        ({"value": math.nan, "source": "x"}, "finite"),
        ({"value": math.inf, "source": "x"}, "finite"),
        ({"value": -1.0, "source": "x"}, "non-negative"),
        ({"value": True, "source": "x"}, "number"),
        ({"value": "38", "source": "x"}, "number"),
        ({"value": {"fp32": -1.0}, "source": "x"}, "fp32"),
        ({"value": {"fp32": math.nan}, "source": "x"}, "fp32"),
        ({"value": 1.0, "source": "x", "sweep": (2.0, 3.0)}, "contain"),
        ({"value": 1.0, "source": "x", "sweep": (3.0, 0.5)}, "lo must be"),
        ({"value": 1.0, "source": "x", "sweep": (0.5,)}, "pair"),
        ({"value": None, "source": "x", "sweep": (0.0, 1.0)}, "numeric value"),
    ],
)
def test_sourced_rejects_bad_figures(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Sourced(**kwargs)


def test_sourced_accepts_numbers_none_and_records():
    assert Sourced(0, "x").to_dict() == {"value": 0, "source": "x", "status": "src", "sweep": None}
    assert Sourced(None, "T2: N/A").value is None
    assert Sourced({"kind": "pcie", "lanes": 4, "bytes_s": 3.94e9, "note": None}, "x").value["lanes"] == 4
    assert Sourced(0.5, "assumption: why", "assumption", (0.5, 1.0)).sweep == (0.5, 1.0)


def test_hw_and_twin_use_the_one_type():
    assert not hasattr(platforms, "Const")
    for mod in (cost, power, platforms):
        figs = [v for v in vars(mod).values() if isinstance(v, Sourced)]
        assert figs, mod.__name__
    for d in catalog().values():
        assert all(isinstance(s, Sourced) for s in (*d.specs.values(), d.launch_s, d.driver_s, d.active_power_fraction))


def test_memory_table_is_the_one_source_of_memory_figures():
    for name, m in memory.MEMORY.items():
        assert isinstance(m.gbps, Sourced) and isinstance(m.pj_per_bit, Sourced) and m.name == name
        assert energy.DRAM_PJ_PER_BIT[name] == m.pj_per_bit.value
        assert energy.DRAM_SWEEP[name] == m.pj_per_bit.sweep
    assert DRAM_GBPS == {k: memory.MEMORY[k].gbps.value for k in memory.DSE_MEMORIES}
    assert DRAM_GBPS == {"ddr4": 19.2, "ddr5": 38.4, "hbm2": 460.0}
    # the DSA device record and the DSA timing model agree on every DSE memory (they disagreed on
    # DDR5: 38 vs 38.4 GB/s)
    from nearfaas.hw.area import AcceleratorConfig

    for k in memory.DSE_MEMORIES:
        assert dsa(AcceleratorConfig(dram=k)).mem_bw == DSAConfig(dram=k).validated().dram_gbps * 1e9
    with pytest.raises(ValueError, match="no bandwidth"):
        memory.bandwidth_gbps("ddr3")
    with pytest.raises(ValueError, match="unknown memory"):
        memory.bandwidth_gbps("ddr9")


def test_cost_uses_the_power_models_socket_share():
    share = power.CPU_SOCKET_SHARE.value
    assert cost.compute_node_usd() == cost.XEON_SOCKET_USD.value * share + cost.SERVER_REST_USD.value
    assert "cpu_socket_share" not in cost.params()  # params() lists cost's own figures only
