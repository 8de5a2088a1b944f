"""MBWU measured on nearfaas (issue 20; thesis section 3.1): a key-value data-access function
(RocksDB, examples/econ/kv) under YCSB workload A, on the embedded platform (a storage node held
to its cluster-file CPU quota) and the host platform (the compute node), in the thesis's three
offloading landscapes, normalised to the medium's own MBWU.

Method (every throughput measured here; the $/kWh/m³ metrics modelled from a platform profile):
1. **The medium's MBWU**: RocksDB with the function's options (direct I/O, 8 MiB block cache,
   econ/kvstore.py) in this process on a folder of the same disk, loaded with the same records,
   YCSB-A with 1 and 2 threads; the best ops/s is one MBWU.
2. **Landscapes**, each platform's function loaded and settled first, then ``seconds`` of
   operations after a warm-up, ``repeats`` times, median ops/s:
   * *integrated*: the YCSB client runs on the node, inside the function (no network);
   * *network*: the client here sends batches of ``batch`` operations through the gateway, one
     call in flight, across the emulated ``link`` (user-space first-byte latency and bandwidth);
   * *disaggregated*: the host's function reads and writes its store across the link (a FUSE
     file system that pays the link per access, link/linkfs.py, backed by a folder of the
     storage node's disk); the embedded platform's number is its network one (the thesis's too:
     its configuration does not change).
3. **Amplification** (measured): bytes the block device moved (/proc/diskstats) and the worker
   process moved (/proc/<pid>/io) over the bytes of the operations (records read and written).

Worked example: a medium at 20,000 ops/s is one MBWU; a storage node reaching 6,000 ops/s there
delivers 0.3 MBWU; with a platform profile where it costs 3% of the host, and the host reaching
0.9 MBWU, $/MBWU falls by 1 - (0.03 / 0.3) / (1 / 0.9) = 91%.

Known caveats:
- One disk here serves every "platform": the host has no more media than the embedded node,
  unlike the thesis's eight-SSD host; the MBWU counts reflect CPU and path, not media count.
- The virtual disk sits on the host's storage, which may cache beneath O_DIRECT: the medium's
  MBWU is this VM's disk as the VM sees it.
- One call in flight per function: a volume function keeps one instance per node (one process
  owns a RocksDB), and a dscs function's second concurrent call would be placed elsewhere.
- The link is emulated in user space (no netem): latency and bandwidth, not a network stack's
  CPU cost; linkfs adds a Python FUSE daemon's cost to the disaggregated store.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from nearfaas.econ import kvstore, mbwu
from nearfaas.econ.ycsb import Workload
from nearfaas.link.profiles import EmulatedLink, get_profile

KV_HANDLER = Path(__file__).resolve().parents[3] / "examples" / "econ" / "kv"
PLATFORMS = {"embedded": {"accelerator": "dscs", "placement": "data"}, "host": {"placement": "compute"}}
LANDSCAPES = ("integrated", "network", "disaggregated")


def medium(folder: Path, records: int, value_bytes: int, seconds: float, threads=(1, 2), progress=None) -> dict:
    """Step 1: the medium's MBWU, in this process (no platform in the way)."""
    path = folder / "medium-db"
    shutil.rmtree(path, ignore_errors=True)
    db = kvstore.open_db(str(path))
    try:
        kvstore.load(db, 0, records, value_bytes, seed=1)
        kvstore.settle(db)
        by_threads = {}
        for n in threads:
            done = [0] * n
            stop = time.monotonic() + seconds

            def run(i, stop=stop, done=done):
                w = Workload(records, value_bytes=value_bytes, seed=100 + i)
                while time.monotonic() < stop:
                    kvstore.execute(db, w.batch(64))
                    done[i] += 64

            workers = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            started = time.monotonic()
            for t in workers:
                t.start()
            for t in workers:
                t.join()
            by_threads[str(n)] = sum(done) / (time.monotonic() - started)
            if progress:
                progress(f"medium: {by_threads[str(n)]:,.0f} ops/s with {n} thread(s)")
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    best = max(by_threads.values())
    return {"mbwu_ops_s": best, "by_threads": by_threads, "label": "measured: RocksDB in-process, direct I/O, YCSB-A"}


class Function:
    """One deployed kv function, driven through the gateway."""

    def __init__(self, url: str, name: str, link: EmulatedLink | None = None):
        self.url, self.name, self.link = url, name, link
        self.session = requests.Session()

    def call(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        if self.link is not None:
            self.link.first_byte()
            self.link.transfer(len(data))
        r = self.session.post(f"{self.url}/function/{self.name}", data=data, headers={"Content-Type": "application/json"},
                              timeout=600)
        if self.link is not None:
            self.link.transfer(len(r.content))
        if r.status_code != 200:
            raise RuntimeError(f"{self.name}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json()


def _counters(pid: int, device: str | None) -> dict:
    io = kvstore.proc_io(pid)
    out = {"proc_read": io["read_bytes"], "proc_write": io["write_bytes"]}
    if device:
        out["dev_read"], out["dev_write"] = kvstore.disk_bytes(device)
    return out


def run_landscape(fn: Function, mode: str, records: int, value_bytes: int, seconds: float, batch: int, seed: int,
                  device: str | None = None) -> dict:
    """``seconds`` of YCSB-A against one function: inside it (integrated) or from here.
    ``device``: the block device to count when the function's volume is not on one (linkfs)."""
    stats = fn.call({"stats": True})
    device = stats.get("device") or device
    before = _counters(stats["pid"], device)
    ops = app = 0
    started = time.monotonic()
    if mode == "integrated":
        per_call = max(batch, 2000)
        while time.monotonic() - started < seconds:
            got = fn.call({"ycsb": {"records": records, "ops": per_call, "batch": batch, "seed": seed, "value_bytes": value_bytes}})
            ops, app = ops + got["ops"], app + got["app_bytes"]
    else:
        workload = Workload(records, value_bytes=value_bytes, seed=seed)
        while time.monotonic() - started < seconds:
            got = fn.call({"ops": [list(op) for op in workload.batch(batch)]})
            ops, app = ops + got["reads"] + got["updates"], app + got["app_bytes"]
    elapsed = time.monotonic() - started
    after = _counters(stats["pid"], device)
    delta = {k: after[k] - before[k] for k in after}
    proc = delta["proc_read"] + delta["proc_write"]
    dev = delta.get("dev_read", 0) + delta.get("dev_write", 0)
    return {"ops_s": ops / elapsed, "ops": ops, "seconds": elapsed, "app_bytes": app, "counters": delta,
            "amplification_proc": proc / app if app else None, "amplification_device": dev / app if app and dev else None}


def _deploy(gateway: str, session, name: str, x: dict) -> None:
    from nearfaas.spec.bundle import pack

    body = {"service": name, "lang": "python3-http", "bundle": pack(KV_HANDLER), "labels": {"com.openfaas.scale.max": "1"},
            "envVars": {"exec_timeout": "600s"}, "x-nearfaas": x | {"volume": True}}
    session.post(f"{gateway}/system/functions", json=body, timeout=60).raise_for_status()


@contextlib.contextmanager
def _linkfs(backing: Path, mountpoint: Path, profile: str):
    """The disaggregated store: ``backing`` seen at ``mountpoint`` across the link."""
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "nearfaas.link.linkfs", str(backing), str(mountpoint), "--profile", profile],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not os.path.ismount(mountpoint):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"linkfs did not mount: {proc.stderr.read().decode(errors='replace')[-400:]}")
        time.sleep(0.05)
    try:
        yield
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(records: int = 200_000, value_bytes: int = 1000, seconds: float = 10.0, repeats: int = 3, batch: int = 64,
        link: str = "dc-25g", profile: mbwu.Platform | None = None, platforms: dict | None = None, progress=None) -> dict:
    """Every step of the module docstring; ``platforms``: ``{"host": Platform, "embedded": Platform}``."""
    from nearfaas.bench.cluster import scratch_cluster
    from nearfaas.client import gateway_session
    from nearfaas.cluster import launcher

    say = progress or (lambda m: None)
    get_profile(link)  # a bad name fails before a cluster starts
    result = {"benchmark": "mbwu", "workload": {"kind": "YCSB-A", "records": records, "value_bytes": value_bytes, "read_share": 0.5,
                                                "distribution": "scrambled zipfian, theta 0.99", "batch": batch},
              "seconds": seconds, "repeats": repeats, "link": link, "caching": "direct I/O + 8 MiB block cache (econ/kvstore.py)"}
    with scratch_cluster(isolation=True) as (layout, state):
        result["medium"] = medium(state.parent, records, value_bytes, seconds, progress=say)
        gw = layout["gateway_url"]
        session = gateway_session(layout=layout)
        storage = next(n["name"] for n in layout["nodes"] if n["kind"] == "storage" and n["class"] == "dscs")
        compute = next(n["name"] for n in layout["nodes"] if n["kind"] == "compute")
        backing, mountpoint = state / "nodes" / storage / "exports" / "kv-disagg", state / "nodes" / compute / "volumes" / "kv-disagg"
        disk = kvstore.disk_of(str(state))
        with _linkfs(backing, mountpoint, link):
            try:
                functions = {"embedded": "kv-embedded", "host": "kv-host", "disaggregated": "kv-disagg"}
                for role, name in functions.items():
                    _deploy(gw, session, name, PLATFORMS["host" if role == "disaggregated" else role])
                    fn = Function(gw, name)
                    say(f"{name}: loading {records:,} records")
                    for start in range(0, records, 50_000):
                        fn.call({"load": {"start": start, "count": min(50_000, records - start), "value_bytes": value_bytes, "seed": 1}})
                    fn.call({"settle": True})
                    placed = fn.call({"stats": True})["node"]
                    result.setdefault("placed", {})[name] = placed
                runs = {}
                plan = [("integrated", "embedded", "kv-embedded", None), ("integrated", "host", "kv-host", None),
                        ("network", "embedded", "kv-embedded", link), ("network", "host", "kv-host", link),
                        ("disaggregated", "host", "kv-disagg", link)]
                for rep in range(repeats):  # interleaved, so drift hits every cell alike
                    for landscape, platform, name, lk in plan:
                        fn = Function(gw, name, EmulatedLink(get_profile(lk), seed=rep) if lk else None)
                        mode = "integrated" if landscape == "integrated" else "client"
                        run_landscape(fn, mode, records, value_bytes, min(2.0, seconds / 4), batch, seed=7)  # warm-up
                        got = run_landscape(fn, mode, records, value_bytes, seconds, batch, seed=10 + rep, device=disk)
                        runs.setdefault(landscape, {}).setdefault(platform, []).append(got)
                        say(f"{landscape:13s} {platform:8s} repeat {rep + 1}/{repeats}: {got['ops_s']:,.0f} ops/s")
            finally:
                launcher.down(state)  # the workers hold the mount: stop them before unmounting
    result["landscapes"] = summarise(runs, result["medium"]["mbwu_ops_s"], platforms)
    result["device"] = disk
    result["labels"] = {"throughput": "measured", "mbwus": "measured (ops/s over the medium's measured MBWU)",
                        "usd_kwh_m3": "modelled: the platform profile's inputs over measured MBWUs"}
    return result


def summarise(runs: dict, mbwu_ops_s: float, platforms: dict | None) -> dict:
    out = {}
    for landscape in LANDSCAPES:
        cells = dict(runs.get(landscape, {}))
        if landscape == "disaggregated":
            cells["embedded"] = runs["network"]["embedded"]  # unchanged configuration (thesis 3.1.3)
        med = {p: statistics.median(r["ops_s"] for r in rs) for p, rs in cells.items()}
        units = {p: mbwu.mbwus(v, mbwu_ops_s) for p, v in med.items()}
        entry = {"ops_s": med, "mbwus": units,
                 "amplification": {p: statistics.median(r["amplification_device"] or 0 for r in rs) for p, rs in cells.items()},
                 "amplification_proc": {p: statistics.median(r["amplification_proc"] or 0 for r in rs) for p, rs in cells.items()},
                 "runs": {p: [round(r["ops_s"], 1) for r in rs] for p, rs in cells.items()}}
        if platforms:
            entry |= mbwu.compare(platforms["host"], platforms["embedded"], units["host"], units["embedded"])
        out[landscape] = entry
    return out



def table(result: dict) -> str:
    """The landscapes side by side, as text."""
    lines = [f"medium: 1 MBWU = {result['medium']['mbwu_ops_s']:,.0f} ops/s (measured, YCSB-A, {result['workload']['records']:,} records)",
             f"{'landscape':14s} {'host ops/s':>11s} {'embedded':>9s} {'host MBWU':>10s} {'emb MBWU':>9s} "
             f"{'$/MBWU cut':>10s} {'kWh/MBWU cut':>12s} {'amplif. h/e':>12s}"]
    for name, e in result["landscapes"].items():
        cut = lambda k, e=e: f"{e[k]:.1f}%" if e.get(k) is not None else "-"  # noqa: E731
        amp = e["amplification"]
        lines.append(f"{name:14s} {e['ops_s']['host']:11,.0f} {e['ops_s']['embedded']:9,.0f} {e['mbwus']['host']:10.3f} "
                     f"{e['mbwus']['embedded']:9.3f} {cut('usd_per_mbwu_reduction_pct'):>10s} {cut('kwh_per_mbwu_reduction_pct'):>12s} "
                     f"{amp['host']:5.1f}/{amp['embedded']:.1f}")
    lines.append("ops/s, MBWUs and amplification measured; $/kWh cuts modelled from the platform profile's inputs")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Path:
    """MBWUs per landscape and platform, and the modelled cuts, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["landscapes"])
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for i, platform in enumerate(("host", "embedded")):
        ax.bar([x + i * 0.38 for x in range(len(names))], [result["landscapes"][n]["mbwus"][platform] for n in names], 0.38, label=platform)
    ax.set_xticks([x + 0.19 for x in range(len(names))], names)
    ax.set_ylabel("MBWUs (measured)")
    ax.legend()
    ax.set_title(f"1 MBWU = {result['medium']['mbwu_ops_s']:,.0f} ops/s on this disk")
    for i, key in enumerate(("usd_per_mbwu_reduction_pct", "kwh_per_mbwu_reduction_pct", "m3_per_mbwu_reduction_pct")):
        bx.bar([x + i * 0.26 for x in range(len(names))], [result["landscapes"][n].get(key) or 0 for n in names], 0.26,
               label=key.split("_per")[0].replace("usd", "$") + "/MBWU")
    bx.set_xticks([x + 0.26 for x in range(len(names))], names)
    bx.set_ylabel("cut from offloading, % (modelled)")
    bx.axhline(0, color="grey", lw=0.8)
    bx.legend()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
