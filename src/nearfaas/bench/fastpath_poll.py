"""The fast path on an idle machine and on a loaded one, and what each poll mode costs (issue 25;
fastpath/src/poll.rs). Every number is measured here.

- **Machine state.** ``machine_state()`` says whether something else keeps a core busy now
  (from /proc/stat, before the benchmark starts anything). ``background_load()`` makes the
  "loaded" state on purpose: one process spinning on the last core, so the benchmark can
  measure both states side by side in one run.
- **Poll modes.** For each of adaptive, spin and block (the executor's workers and the load
  generator's receive loop alike), ``poll_modes`` measures the web lambda's p50 and p99 at one
  outstanding request, the executor's CPU-seconds per request, and its CPU share with no
  requests at all and with a sparse 20 requests a second. CPU per request comes from
  /proc/<pid>/stat; shares of a core from its threads' schedstat (exact, and with the time they
  waited for a core, which a loaded machine takes from a spinner).

Known caveat: the loaded state is one spinning process at normal priority; a real neighbour
(I/O, memory bandwidth) can cost more than a busy core does.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from nearfaas.bench.stream import cpu_seconds
from nearfaas.fastpath.client import UdpClient
from nearfaas.fastpath.executor import Executor, lambda_path

MODES = ("adaptive", "spin", "block")
IDLE_WINDOW_S = 2.0
SPARSE_RATE = 20.0
BUSY_CORES_LOADED = 0.3  # another program keeps at least this much of a core busy: "loaded"


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def busy_cores(window_s: float = 0.5) -> float:
    """Cores kept busy by every process of the machine over ``window_s``."""
    b0, t0 = _cpu_times()
    time.sleep(window_s)
    b1, t1 = _cpu_times()
    cores = os.cpu_count() or 1
    return (b1 - b0) / max(1, t1 - t0) * cores


def machine_state(window_s: float = 0.5) -> dict:
    busy = busy_cores(window_s)
    return {"machine_state": "loaded" if busy >= BUSY_CORES_LOADED else "idle", "busy_cores_before": round(busy, 3)}


@contextlib.contextmanager
def background_load():
    """One process spinning on the last core for as long as the block runs."""
    core = (os.cpu_count() or 1) - 1
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        yield {"spinner_pid": proc.pid, "core": core}
    finally:
        proc.kill()
        proc.wait()


def _sched_ns(pid: int) -> tuple[int, int]:
    """Nanoseconds ``pid``'s threads were on a CPU, and runnable but waiting for one
    (/proc/<pid>/task/*/schedstat: exact, where /proc/<pid>/stat counts 10 ms ticks)."""
    on_cpu = waiting = read = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                ran, waited, _ = f.read().split()
            on_cpu, waiting, read = on_cpu + int(ran), waiting + int(waited), read + 1
    if not read:  # not a thread that ended: the kernel keeps no schedstat (CONFIG_SCHED_INFO off)
        raise OSError(f"/proc/{pid}/task/*/schedstat is missing: CPU shares need a kernel with CONFIG_SCHED_INFO")
    return on_cpu, waiting


def cpu_use(pid: int, seconds: float, during=None) -> tuple[float, float]:
    """``(share, demand)`` of one core for ``pid``'s threads over ``seconds`` (``during(seconds)``
    runs meanwhile). *share* is the CPU they got; *demand* adds the time they were runnable but
    waited for a core, so a thread that never blocks shows about 1.0 however busy the machine
    is, where its share falls to what the scheduler leaves it."""
    (ran0, waited0), t0 = _sched_ns(pid), time.perf_counter()
    if during is None:
        time.sleep(seconds)
    else:
        during(seconds)
    (ran1, waited1), wall = _sched_ns(pid), time.perf_counter() - t0
    return (ran1 - ran0) / 1e9 / wall, (ran1 - ran0 + waited1 - waited0) / 1e9 / wall


def cpu_share(pid: int, seconds: float, during=None) -> float:
    """The share of one core ``pid`` used over ``seconds`` (``during(seconds)`` runs meanwhile)."""
    return cpu_use(pid, seconds, during)[0]


def sparse_calls(addr, lambda_id: int, rate: float, mode: str):
    """``during`` for cpu_share: ``rate`` calls a second with a client of the same poll mode."""
    def run(seconds: float) -> None:
        with UdpClient(addr, timeout=2.0, poll=mode) as client:
            end = time.perf_counter() + seconds
            next_at = time.perf_counter()
            while next_at < end:
                client.call(lambda_id, b"ping")
                next_at += 1.0 / rate
                time.sleep(max(0.0, next_at - time.perf_counter()))
    return run


def poll_modes(load, dur: float, warm: float, progress) -> dict:
    """``load``: bench.fastpath.load (the Rust load generator)."""
    out = {}
    for mode in MODES:
        with Executor(workers=1, sched="drr", poll=mode) as ex:
            ex.deploy(1, "web", "wasm", path=lambda_path("web"))
            pid = ex.proc.pid
            before = cpu_seconds([pid])
            r = load(ex.udp_addr, [1], 1, dur, warm, poll=mode)
            cpu = cpu_seconds([pid]) - before
            requests = max(1, int(r.get("requests") or 0))
            time.sleep(0.2)  # past the last request's spin
            idle = cpu_share(pid, IDLE_WINDOW_S)
            sparse = cpu_share(pid, IDLE_WINDOW_S, sparse_calls(ex.udp_addr, 1, SPARSE_RATE, mode))
            stats = ex.stats().get("poll", {})
        out[mode] = m = {"p50_us": r.get("p50_us"), "p99_us": r.get("p99_us"), "req_per_s": r.get("req_per_s"),
                         "cpu_s_per_request": cpu / requests, "idle_cpu_share": idle, "sparse_cpu_share": sparse,
                         "sparse_rate_per_s": SPARSE_RATE, "executor_poll_stats": stats, "label": "measured"}
        progress(f"poll {mode:<8} p50 {m['p50_us'] or 0:7.1f} us  {m['cpu_s_per_request'] * 1e6:6.1f} CPU-us/request  "
                 f"idle {idle:.1%} of a core  at {SPARSE_RATE:g}/s {sparse:.1%}")
    return out
