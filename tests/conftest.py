"""Every test run, unit or integration, leaves nothing behind (tests/helpers/reaper.py).

- SIGTERM (what a CI time-out or `kill` sends) stops the run the way Ctrl-C does: pytest tears
  the fixtures down, so clusters go through `nearfaas down`.
- The run lives in cgroups of its own, watched by a process outside them that empties them when
  pytest ends, however it ends; the last line of the run says what it had to stop.
- Ray, which the sift and Ray-backend tests start, keeps its sessions and its
  ``ray_current_cluster`` address file under a temp folder of the run's (``RAY_TMPDIR``), removed
  with it: an interrupted run leaves no stale address for `ray.init("auto")` to hang on.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest
import reaper

_session: reaper.Session | None = None


def _terminate(signum, frame):
    _install(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once; the watchdog still sweeps
    raise KeyboardInterrupt(f"signal {signum}")


_install = signal.signal


def _keep_ours(signum, handler):
    """signal.signal, except that Ray's init may not take SIGTERM over: its handler calls
    sys.exit, which a fixture or test turns into one error and the run goes on."""
    if signum == signal.SIGTERM and getattr(handler, "__module__", "").startswith("ray.") and signal.getsignal(signum) is _terminate:
        return _terminate
    return _install(signum, handler)


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin has made its factory
def pytest_configure(config):
    global _session
    signal.signal = _keep_ours
    signal.signal(signal.SIGTERM, _terminate)
    if hasattr(config, "workerinput"):  # an xdist worker: the controller's groups and watchdog hold it
        return
    ray_tmpdir = None
    if "RAY_TMPDIR" not in os.environ:  # short: Ray's socket paths must fit in 107 bytes
        ray_tmpdir = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix=f"nfray-{os.getpid()}-", dir="/tmp")
    reaper.sweep_stale_runs()
    _session = reaper.Session(config._tmp_path_factory.getbasetemp(), ray_tmpdir and Path(ray_tmpdir))
    _session.start()


def pytest_unconfigure(config):
    global _session
    if _session is None:
        return
    session, _session = _session, None
    line = reaper.summary(session.finish())
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line)


# Under xdist (`make test` runs `-n 2`), tests go to the workers a module at a time, so that a
# module-scoped cluster starts once; the modules that start a Ray cluster go together, so that two
# Ray clusters never start at once on two cores (test_nothing_left_behind.py starts one in a pytest
# of its own). The Ray group goes first, then the integration modules, then the unit ones: the
# longest units of work start early and the short ones fill in at the end.
RAY_MODULES = {"test_sift_ray", "test_ray_backend", "test_sweeps_ray", "test_nothing_left_behind"}


def _work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return "ray" if module.rsplit("/", 1)[-1].removesuffix(".py") in RAY_MODULES else module


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # every worker sorts the same way: xdist checks they collected alike
        rank = {"ray": 0}
        items.sort(key=lambda item: (rank.get(_work_unit(item.nodeid), 1 if "/integration/" in item.nodeid else 2)))


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: unknown where it is not loaded (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        """xdist's loadscope with our work units (``--dist loadgroup`` would do it with marks,
        but xdist 3.8 cannot rename test ids under pytest 9)."""

        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the order above
    return ModuleScheduling(config, log)
