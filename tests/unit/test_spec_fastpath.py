"""x-nearfaas target: fastpath in a stack file, and the cluster file's fastpath block."""

import pytest

from nearfaas.spec.cluster import parse_cluster
from nearfaas.spec.errors import SpecError
from nearfaas.spec.options import NearfaasOptions
from nearfaas.spec.stack import parse_stack


def stack(fn):
    return {"version": "1.0", "provider": {"name": "openfaas"}, "functions": {"fast": fn}}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "web.wasm").write_bytes(b"\0asm\1\0\0\0")
    return tmp_path


def test_a_wasm_lambda_parses_and_round_trips(folder):
    fn = parse_stack(stack({"lang": "wasm", "handler": ".", "x-nearfaas": {
        "target": "fastpath", "fastpath": {"module": "web.wasm", "weight": 3, "external": "127.0.0.1:11211"}}}), folder).functions["fast"]
    assert fn.x.target == "fastpath"
    assert fn.x.fastpath == {"module": "web.wasm", "native": None, "weight": 3, "timeout_ms": 50, "external": "127.0.0.1:11211",
                             "entry": None}
    assert NearfaasOptions.from_dict(fn.x.to_dict()) == fn.x
    assert NearfaasOptions.from_dict(NearfaasOptions().to_dict()).target == "worker"


def test_an_entry_of_a_coalesced_module_parses(folder):
    fn = parse_stack(stack({"lang": "wasm", "handler": ".", "x-nearfaas": {
        "target": "fastpath", "fastpath": {"module": "web.wasm", "entry": "web2"}}}), folder).functions["fast"]
    assert fn.x.fastpath["entry"] == "web2"
    assert NearfaasOptions.from_dict(fn.x.to_dict()) == fn.x


def test_a_native_lambda_needs_no_module(folder):
    fn = parse_stack(stack({"lang": "native", "handler": ".", "x-nearfaas": {"target": "fastpath", "fastpath": {"native": "gray"}}}),
                     folder).functions["fast"]
    assert fn.x.fastpath["native"] == "gray"


@pytest.mark.parametrize(
    "fn, needle",
    [
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath"}}, "functions.fast.x-nearfaas.fastpath: is missing"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "gone.wasm"}}}, "has no gone.wasm"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "../x.wasm"}}}, "fastpath.module"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "native": "web"}}}, "exactly one"),
        ({"lang": "native", "x-nearfaas": {"target": "fastpath", "fastpath": {"native": "doom"}}}, "unknown native lambda"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "weight": 0}}}, "fastpath.weight"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "timeout_ms": "x"}}}, "timeout_ms"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "external": "nohost"}}}, "host:port"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "speed": 9}}}, "speed"),
        ({"lang": "wasm", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm", "entry": "a.b"}}}, "fastpath.entry"),
        ({"lang": "native", "x-nearfaas": {"target": "fastpath", "fastpath": {"native": "web", "entry": "web"}}}, "only a module has entries"),
        ({"lang": "python3-http", "x-nearfaas": {"target": "fastpath", "fastpath": {"module": "web.wasm"}}}, "needs lang: wasm"),
        ({"lang": "python3-http", "x-nearfaas": {"target": "gpu"}}, "x-nearfaas.target"),
        ({"lang": "python3-http", "x-nearfaas": {"fastpath": {"module": "web.wasm"}}}, "only means something with target: fastpath"),
    ],
)
def test_bad_fastpath_blocks_name_the_field(folder, fn, needle):
    with pytest.raises(SpecError) as exc:
        parse_stack(stack({"handler": ".", **fn}), folder)
    assert needle in str(exc.value)


def test_cluster_fastpath_block():
    spec = parse_cluster({"fastpath": {"enabled": "true", "workers": 2, "sched": "fifo", "queue_depth": 64, "pin": False,
                                       "poll": "spin", "slice_us": 40, "max_weight": 4, "max_timeout_ms": 200}})
    assert (spec.fastpath.max_weight, spec.fastpath.max_timeout_ms) == (4, 200)
    assert (parse_cluster(None).fastpath.max_weight, parse_cluster(None).fastpath.max_timeout_ms) == (8, 1000)
    assert (spec.fastpath.enabled, spec.fastpath.workers, spec.fastpath.sched, spec.fastpath.queue_depth) == ("true", 2, "fifo", 64)
    assert spec.fastpath.poll == "spin" and spec.fastpath.slice_us == 40
    assert parse_cluster(spec.to_dict()).fastpath == spec.fastpath
    assert parse_cluster(None).fastpath.enabled == "auto" and parse_cluster(None).fastpath.poll == "adaptive"
    assert parse_cluster(None).fastpath.slice_us == 50 and parse_cluster({"fastpath": {"slice_us": 0}}).fastpath.slice_us == 0
    for bad, needle in (({"enabled": "maybe"}, "fastpath.enabled"), ({"workers": 0}, "fastpath.workers"),
                        ({"sched": "lottery"}, "fastpath.sched"), ({"turbo": 1}, "turbo"), ({"pin": "yes"}, "fastpath.pin"),
                        ({"poll": "busy"}, "fastpath.poll"), ({"slice_us": 5}, "fastpath.slice_us"),
                        ({"slice_us": True}, "fastpath.slice_us"), ({"slice_us": "fast"}, "fastpath.slice_us"),
                        ({"max_weight": 0}, "fastpath.max_weight"), ({"max_timeout_ms": 60_001}, "fastpath.max_timeout_ms")):
        with pytest.raises(SpecError, match=needle):
            parse_cluster({"fastpath": bad})
