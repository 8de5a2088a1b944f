"""Sweeps on Ray (issue 24, item 3): ``hw dse``, ``twin report`` and the twin's sensitivity
studies fan their independent points out as Ray tasks (``nearfaas.fanout``) and give the local
run's results JSON byte for byte. Reduced sweeps on a local 2-CPU Ray this module starts (and
shuts down); each comparison prints both wall times. Plus: an unreachable or malformed --ray
address is a quick, clear error, from the library and from both commands."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from click.testing import CliRunner  # noqa: E402

from nearfaas import fanout  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# The report's measured fields: wall clocks and the time it was generated. They differ between
# any two runs (two local runs too); every other byte must match.
MEASURED = {"generated", "wall_s", "seconds", "events_per_s"}
APPS = ["asset_damage", "chatbot", "credit_risk"]
PLATFORMS = ["gpu", "ns_fpga", "dscs"]


def _json(obj) -> bytes:
    def strip(o):
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in MEASURED}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    return json.dumps(strip(obj), indent=1).encode()


def _timed(label: str, fn):
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    print(f"\n{label}: {wall:.2f} s wall")
    return out, wall


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for this module (unless this process is already connected to one,
    which it then leaves as it was); the calls below pass --ray auto, which uses it."""
    owned = not ray.is_initialized()
    if owned:
        t0 = time.perf_counter()
        fanout.connect("local", num_cpus=2)
        print(f"\nlocal Ray started in {time.perf_counter() - t0:.1f} s")
    try:
        yield "auto"
    finally:
        if owned:
            ray.shutdown()


def test_run_points_keeps_the_input_order(local_ray):
    got = fanout.run_points(pow, list(range(40)), shared=2, ray_address=local_ray, chunk=3)
    assert got == [2**i for i in range(40)]
    done = []
    assert fanout.run_points(abs, [-3, 4, -5], ray_address=local_ray, progress=done.append) == [3, 4, 5]
    assert sum(done) == 3
    with pytest.raises(ValueError, match="math domain error"):  # a point's own exception, as locally
        fanout.run_points(math.sqrt, [4.0, -1.0], ray_address=local_ray)


def test_hw_dse_on_ray_is_byte_identical(local_ray):
    from nearfaas.cli.hw import _dse_json
    from nearfaas.hw import dse

    models = list(dse.ZOO)
    configs = dse.default_space(sides=(8, 32, 128, 512), bytes_per_pe=(64, 256), drams=dse.DRAMS)
    sks = dse.load_skeletons(models)

    def run(address):
        res = dse.sweep(configs, models, 25.0, skeletons=sks, ray_address=address)
        return (_dse_json(res, {}) + json.dumps({"configs": res.configs, "points": res.points})).encode()

    here, t_here = _timed(f"hw dse, {len(configs)} configs x {len(models)} models, local", lambda: run(None))
    there, t_ray = _timed(f"hw dse, {len(configs)} configs x {len(models)} models, Ray (2 CPUs)", lambda: run(local_ray))
    assert there == here


def test_sensitivity_on_ray_is_byte_identical(local_ray):
    from nearfaas.twin import sensitivity

    def run(address):
        return _json(sensitivity.all_studies(APPS, PLATFORMS, samples=1000, seed=1, ray_address=address, baseline="paper",
                                             request_seed=1))

    here, _ = _timed("sensitivity studies (3 apps x 3 platforms, 1000 samples), local", lambda: run(None))
    there, _ = _timed("sensitivity studies (3 apps x 3 platforms, 1000 samples), Ray (2 CPUs)", lambda: run(local_ray))
    assert there == here


def test_the_sensitivity_block_is_unchanged_by_the_split():
    """all_studies joins per-point runs: the same block as the four studies called whole."""
    from nearfaas.twin import sensitivity as s

    opts = {"baseline": "paper", "request_seed": 1}
    whole = {"batch": s.batch_sweep(apps=APPS, platforms=PLATFORMS, **opts),
             "tail": s.tail_sweep(apps=APPS, platforms=PLATFORMS, samples=200, seed=1, **opts),
             "accelerated_functions": s.accelerated_functions(apps=APPS, platforms=PLATFORMS, **opts),
             "cold_start": s.cold_start(apps=APPS, platforms=PLATFORMS, **opts)}
    assert _json(s.all_studies(APPS, PLATFORMS, samples=200, seed=1, **opts)) == _json(whole)


def test_twin_report_on_ray_is_byte_identical(local_ray, monkeypatch):
    from nearfaas.twin import report

    monkeypatch.setitem(report.UNCERTAINTY_SAMPLES, True, 10)  # a reduced Monte Carlo (one-at-a-time runs stay whole)

    def run(address):
        return _json(report.build(quick=True, apps=APPS, platforms=PLATFORMS, nodes=4, minutes=2, ray_address=address))

    here, _ = _timed("twin report --quick (3 apps x 3 platforms, 10 draws, 4 nodes, 2 min), local", lambda: run(None))
    there, _ = _timed("twin report --quick (3 apps x 3 platforms, 10 draws, 4 nodes, 2 min), Ray (2 CPUs)", lambda: run(local_ray))
    assert there == here
    assert json.loads(here)["uncertainty"]["swept"]  # the fanned-out draws did swap constants


def test_an_unreachable_address_is_a_quick_clear_error():
    t0 = time.monotonic()
    with pytest.raises(fanout.FanoutError, match=r"cannot reach a Ray cluster at 127\.0\.0\.1:1: .*ray start --head.*leave --ray out"):
        fanout.connect("127.0.0.1:1")
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("address", ["nonsense", "10.0.0.5", "host:port"])
def test_a_malformed_address_is_a_clear_error(address):
    with pytest.raises(fanout.FanoutError, match=r"--ray must be host:port \(e\.g\. 127\.0\.0\.1:6379\) or auto"):
        fanout.connect(address)


@pytest.mark.parametrize("group, args", [("hw", ["dse", "--no-progress"]), ("twin", ["report", "--quick", "--no-progress"])])
@pytest.mark.parametrize("address, message", [("127.0.0.1:1", "cannot reach a Ray cluster at 127.0.0.1:1"),
                                              ("nonsense", "--ray must be host:port")])
def test_the_commands_refuse_a_bad_address_before_any_work(group, args, address, message, tmp_path, monkeypatch):
    from nearfaas.cli.hw import hw
    from nearfaas.cli.twin import twin

    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    r = CliRunner().invoke({"hw": hw, "twin": twin}[group], [*args, "--ray", address], env={"COLUMNS": "200"})
    assert r.exit_code != 0 and message in r.output and "Traceback" not in r.output
    assert time.monotonic() - t0 < 5
    assert not (tmp_path / "twin-report").exists()


def test_sift_keeps_its_own_error_type_and_option_name():
    from nearfaas.dataservices import sift_ray
    from nearfaas.dataservices.sifting import SiftError

    with pytest.raises(SiftError, match="cannot reach a Ray cluster at 127.0.0.1:1.*leave --ray-address out"):
        sift_ray.connect("127.0.0.1:1")
    with pytest.raises(SiftError, match="--ray-address must be host:port"):
        sift_ray.connect("nonsense")
