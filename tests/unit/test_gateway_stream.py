"""Stream functions at the gateway (gateway/stream.py, spec/options.py): the x-nearfaas.stream
block is checked field by field, and chained stream functions become one pipeline under the
head's ID."""

from __future__ import annotations

import pytest

from nearfaas.gateway.errors import CallError
from nearfaas.gateway.stream import stages_of
from nearfaas.spec.errors import SpecError
from nearfaas.spec.options import NearfaasOptions


def _spec(name: str, stream: dict, chain=()):
    return {"name": name, "x": {"target": "stream", "stream": stream, "chain": list(chain)}}


def test_a_stream_block_gets_its_defaults():
    opts = NearfaasOptions.from_dict({"target": "stream", "stream": {"fn": "topk"}})
    assert opts.stream == {"fn": "topk", "k": 16, "dtype": "u32", "variant": "insertion"}
    assert NearfaasOptions.from_dict(opts.to_dict()) == opts


@pytest.mark.parametrize("stream,field", [
    ({"fn": "sort"}, "x-nearfaas.stream.fn"),
    ({"fn": "topk", "k": 0}, "x-nearfaas.stream.k"),
    ({"fn": "topk", "k": "many"}, "x-nearfaas.stream.k"),
    ({"fn": "topk", "dtype": "u64"}, "x-nearfaas.stream.dtype"),
    ({"fn": "topk", "variant": "bubble"}, "x-nearfaas.stream.variant"),
    ({"fn": "filter", "min": "low"}, "x-nearfaas.stream.min"),
    ({"fn": "topk", "colour": "red"}, "x-nearfaas.stream"),
    ({"fn": "wasm", "module": "../x.wasm"}, "x-nearfaas.stream.module"),
    ({"fn": "wasm", "module": "t.wasm", "timeout_ms": 0}, "x-nearfaas.stream.timeout_ms"),
])
def test_bad_stream_fields_are_named(stream, field):
    with pytest.raises(SpecError) as err:
        NearfaasOptions.from_dict({"target": "stream", "stream": stream})
    assert field in str(err.value)


def test_a_stream_block_needs_target_stream_and_target_stream_needs_one():
    with pytest.raises(SpecError, match="only means something with target: stream"):
        NearfaasOptions.from_dict({"stream": {"fn": "topk"}})
    with pytest.raises(SpecError, match="x-nearfaas.stream: is missing"):
        NearfaasOptions.from_dict({"target": "stream"})


def test_chained_stream_functions_become_one_pipeline():
    deployed = {"filter": _spec("filter", {"fn": "filter", "dtype": "u32", "min": 100}, ["topk"]),
                "topk": _spec("topk", {"fn": "topk", "k": 16, "dtype": "u32", "variant": "insertion"})}
    head = _spec("parse", {"fn": "parse"}, ["filter"])
    assert [s["fn"] for s in stages_of(head, deployed.get)] == ["parse", "filter", "topk"]
    assert stages_of(deployed["topk"], deployed.get) == [{"fn": "topk", "k": 16, "dtype": "u32", "variant": "insertion"}]


def test_a_chain_to_a_missing_or_worker_function_or_a_fork_is_refused():
    with pytest.raises(CallError, match="not a deployed stream function"):
        stages_of(_spec("a", {"fn": "parse"}, ["nope"]), {}.get)
    worker = {"name": "w", "x": {"target": "worker", "chain": []}}
    with pytest.raises(CallError, match="not a deployed stream function"):
        stages_of(_spec("a", {"fn": "parse"}, ["w"]), {"w": worker}.get)
    with pytest.raises(CallError, match="chains to 2 functions"):
        stages_of(_spec("a", {"fn": "parse"}, ["b", "c"]), {}.get)


def test_a_wasm_stage_names_its_module_by_path_in_the_handler_folder():
    spec = {"name": "w", "handler_dir": "/code/w", "x": {"target": "stream", "chain": [],
                                                           "stream": {"fn": "wasm", "module": "topk_stream.wasm", "k": 8}}}
    assert stages_of(spec, {}.get) == [{"fn": "wasm", "path": "/code/w/topk_stream.wasm", "k": 8}]
