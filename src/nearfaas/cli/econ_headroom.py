"""`nearfaas econ headroom`: how much CPU a node keeps for functions at a network rate, by the
thesis's two-step pktgen method (section 4.3; econ/headroom.py searches, econ/headroom_rig.py
measures, this module is the options, the tables and the figure)."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nearfaas.cli.common import Quantity, console, err, fail


class Rate(click.ParamType):
    """A network rate: 1Gbit, 200Mbit, 1.5Gbps, 100MB/s (bytes). Converted to bit/s."""

    name = "rate"

    def convert(self, value, param, ctx):
        from nearfaas.econ.headroom import parse_rate

        if isinstance(value, float):
            return value
        try:
            return parse_rate(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class IntList(click.ParamType):
    """Comma-separated whole numbers within a range (sizes take quantities: 1472, 8K, 64Ki)."""

    name = "list"

    def __init__(self, lo: int, hi: int, what: str, example: str):
        self.lo, self.hi, self.what, self.example = lo, hi, what, example

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        out = []
        for item in str(value).split(","):
            try:
                n = Quantity().convert(item.strip(), param, ctx)
            except click.BadParameter:
                self.fail(f"{item.strip()!r} is not a whole number; write e.g. {self.example}", param, ctx)
            if not self.lo <= n <= self.hi:
                self.fail(f"{n} is out of range: {self.what} go from {self.lo} to {self.hi}; e.g. {self.example}", param, ctx)
            out.append(n)
        return sorted(set(out))


def _node_cpus(name: str, cluster: Path | None) -> tuple[float | None, str]:
    """``--class``: a node kind (storage), class (dscs), node name, or NAME=CPUS -> its cpus."""
    if "=" in name:
        label, _, cpus = name.partition("=")
        try:
            value = float(cpus)
        except ValueError:
            value = math.nan
        if not 0.01 <= value <= 1024:
            raise click.BadParameter(f"{name!r}: CPUS must be a number of cores from 0.01 to 1024, e.g. pi=0.25",
                                     param_hint="--class")
        return value, f"{label.strip()} ({value:g} cores, given)"
    from nearfaas.spec.cluster import load_cluster
    from nearfaas.spec.errors import SpecError

    try:
        spec = load_cluster(cluster)
    except SpecError as exc:
        fail(f"--cluster {cluster}: {exc}")
    nodes = [n for n in spec.nodes if name in (n.name, n.cls, n.kind)]
    if not nodes:
        known = sorted({k for n in spec.nodes for k in (n.kind, n.cls, n.name)})
        raise click.BadParameter(f"no node kind, class or name {name!r} in {cluster or 'the default cluster'}; "
                                 f"choose one of {', '.join(known)}, or NAME=CPUS", param_hint="--class")
    cpus = {n.cpus for n in nodes}
    if len(cpus) > 1:
        raise click.BadParameter(f"{name!r} matches nodes with different cpus "
                                 f"({', '.join(f'{n.name}: {n.cpus}' for n in nodes)}); name one node",
                                 param_hint="--class")
    value = cpus.pop()
    where = f"{name} in {cluster or 'the default cluster'}"
    return value, f"{where} ({value:g} cores)" if value else f"{where} (no cpus: the whole machine)"


@contextlib.contextmanager
def _sigterm_unwinds():
    """A SIGTERM runs the clean-up (namespace, cgroup) like Ctrl-C does, instead of leaving them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@click.command("headroom")
@click.option("--target", type=Rate(), help="ingest rate to keep, e.g. 1Gbit, 200Mbit, 100MB/s "
              "(default: the highest rate step 1 finds)")
@click.option("--class", "node_class", help="run the sender under this node's CPU quota: a kind (storage), a class "
              "(dscs), a node name, or NAME=CPUS; from --cluster [default: no quota]")
@click.option("--cluster", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="cluster file for --class (default: the built-in cluster, storage nodes 0.5 cores)")
@click.option("--veth/--loopback", default=False, show_default=True,
              help="a veth pair into a namespace this command creates (and removes), or 127.0.0.1")
@click.option("--link", help="shape the veth pair to this link profile's bandwidth with TBF (needs --veth)")
@click.option("--sizes", type=IntList(1, 65507, "UDP payloads", "256,1472,8192"), default="256,1472,8192",
              show_default=True, help="packet sizes (bytes) to sweep")
@click.option("--bursts", type=IntList(1, 1_000_000, "bursts", "1,16,64"), default="1,16,64", show_default=True,
              help="packets per burst to sweep")
@click.option("--threads", type=IntList(1, 256, "threads", "1,2"), default="1,2", show_default=True,
              help="sender thread counts to sweep")
@click.option("--duration", type=click.FloatRange(0.05, 600), default=1.0, show_default=True, help="seconds per run")
@click.option("--tolerance", type=click.FloatRange(0.001, 0.5, max_open=True), default=0.05, show_default=True,
              help="a run keeps the rate if within this fraction of it")
@click.option("--wait", type=click.Choice(["spin", "sleep"]), default="spin", show_default=True,
              help="how a thread waits out its delay: spin (pktgen) or sleep")
@click.option("--json", "as_json", is_flag=True, help="print every run and the result as JSON")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="write the sweep and the delay search as a PNG")
def headroom(target, node_class, cluster, veth, link, sizes, bursts, threads, duration, tolerance, wait, as_json, plot):
    """CPU left for functions while a node keeps a network rate (thesis §4.3): sweep packet size,
    threads and burst for the minimum config reaching the top rate, then raise pktgen's per-burst
    delay until the rate drops; headroom = (max_delay - t_burst) / max_delay. Runs are measured
    on this machine; the headroom is computed from them.

    \b
      nearfaas econ headroom --class storage --target 1Gbit        # a storage node's half core
      nearfaas econ headroom --veth --link s3-like --json          # a namespace, shaped to 720 Mbit/s
      nearfaas econ headroom --sizes 1472 --bursts 16 --threads 1 --plot headroom.png
    """
    from nearfaas.econ import headroom as hr
    from nearfaas.econ.headroom_rig import CpuQuota, Loopback, RigError, Rig, Veth
    from nearfaas.link.profiles import get_profile

    profile = None
    if link:
        try:
            profile = get_profile(link)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--link") from None
        if not veth:
            raise click.BadParameter("shaping needs the veth pair (loopback cannot be shaped); add --veth",
                                     param_hint="--link")
        shaped = profile.bandwidth_bytes_per_s * 8
        if target and target > shaped:
            raise click.BadParameter(f"{hr.fmt_rate(target)} is above the {link} link's bandwidth, {hr.fmt_rate(shaped)}; "
                                     "ask for at most that", param_hint="--target")
    cpus, cpus_from = _node_cpus(node_class, cluster) if node_class else (None, "no quota (the whole machine)")

    runs_total = len(sizes) * len(bursts) * len(threads) + hr.MAX_SEARCH_ITERS + 2
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with _sigterm_unwinds(), Progress(*columns, console=err, transient=as_json) as progress, \
                contextlib.ExitStack() as stack:
            task = progress.add_task("setting up", total=runs_total)
            path = stack.enter_context(Veth(profile) if veth else Loopback())
            quota = stack.enter_context(CpuQuota(cpus)) if cpus else None
            rig = Rig(path, quota)
            stage = ["step 1"]

            def probe(knobs):
                progress.update(task, description=f"{stage[0]}: {knobs.label()}")
                run = rig(knobs)
                progress.advance(task)
                return run

            step1 = hr.sweep(probe, sizes, threads, bursts, tolerance=tolerance, duration_s=duration, wait=wait)
            stage[0] = "step 2"
            step2 = hr.step2(probe, step1, target, cores=cpus)
            progress.update(task, completed=runs_total, description="done")
            rig_info = rig.describe()
    except hr.TargetAboveMaxError as e:
        raise click.BadParameter(str(e), param_hint="--target") from None
    except (RigError, ValueError, RuntimeError) as e:
        fail(str(e))
    k = step2.base.knobs
    cores = min(float(k.threads), cpus) if cpus else float(k.threads)
    result = {
        "labels": {"runs": "measured on this machine",
                   "t_burst_ns": "measured (median send time of a burst, in the run at the max delay)",
                   "t_burst_delay0_ns": "measured (the same at delay 0, step 1: the thesis's t_burst)",
                   "max_delay_ns": "measured (binary search over runs)",
                   "headroom": "computed: (max_delay - t_burst) / max_delay (thesis §4.3)",
                   "headroom_step1_t_burst": "computed: the same with t_burst_delay0_ns",
                   "cores_free": "computed: headroom x the cores the sender threads may use",
                   "cross_check": "measured: 1 - sender CPU time / (wall x cores), sleeping, paced to the rate kept"},
        "rig": rig_info | {"cpus_from": cpus_from, "wait": wait, "duration_s": duration},
        "max_bps": round(step1.best.delivered_bps), "target_bps": target,
        "rate_kept_bps": round(step2.floor_bps / (1 - tolerance)),
        "t_burst_ns": round(step2.t_burst_ns), "t_burst_delay0_ns": round(step2.base.t_burst_median_ns),
        "max_delay_ns": step2.max_delay_ns, "headroom": round(step2.headroom, 4),
        "headroom_step1_t_burst": round(step2.headroom_step1_t_burst, 4), "cores": cores, "cores_free": round(step2.headroom * cores, 4),
        "cross_check_headroom": None if step2.cross_check_headroom is None else round(step2.cross_check_headroom, 4),
        "step1": step1.to_dict(), "step2": step2.to_dict(),
    }
    if plot:
        from nearfaas.econ.headroom_plot import figure

        where = f"{rig_info['path']}" + (f", {link}" if link else "") + (f", {cpus:g} cores" if cpus else "")
        result["plot"] = str(figure(step1, step2, plot, f"Network processing headroom ({where}; measured)"))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    _print(result, step1, step2, hr)


def _print(result: dict, step1, step2, hr) -> None:
    rig = result["rig"]
    console.print(f"[bold]Path[/bold]: {rig['path']}" + (f" ({rig['link']}, shaped to {hr.fmt_rate(rig['shaped_bps'])})"
                                                        if rig.get("shaped_bps") else "")
                  + f"; sender CPU: {rig['cpus_from']}")
    t = Table(title="Step 1: sweep at delay 0 (measured)")
    for col in ("Threads", "Size B", "Burst", "Delivered", "Sent", "t_burst us", "CPU s", ""):
        t.add_column(col, justify="right")
    for r in step1.runs:
        mark = "chosen" if r is step1.chosen else ("best" if r is step1.best else "")
        t.add_row(str(r.knobs.threads), str(r.knobs.size), str(r.knobs.burst), hr.fmt_rate(r.delivered_bps),
                  hr.fmt_rate(r.sent_bps), f"{r.t_burst_median_ns / 1000:.1f}", f"{r.cpu_s:.2f}", mark)
    console.print(t)
    console.print(f"Step 2: delay search on {step2.base.knobs.label()}; a run keeps the rate at >= {hr.fmt_rate(step2.floor_bps)}")
    t = Table(title="Step 2 (measured)")
    for col in ("Delay us", "Delivered", "t_burst us", "Kept"):
        t.add_column(col, justify="right")
    for r in sorted(step2.runs, key=lambda r: r.knobs.delay_ns):
        t.add_row(f"{r.knobs.delay_ns / 1000:.1f}", hr.fmt_rate(r.delivered_bps), f"{r.t_burst_median_ns / 1000:.1f}",
                  "yes" if r.delivered_bps >= step2.floor_bps else "no")
    console.print(t)
    if step2.note:
        console.print(f"[dim]{step2.note}[/dim]")
    rate = hr.fmt_rate(result["target_bps"]) if result["target_bps"] else f"the top rate ({hr.fmt_rate(result['max_bps'])})"
    console.print(f"At {rate}: max delay {step2.max_delay_ns / 1000:.1f} us, t_burst {step2.t_burst_ns / 1000:.1f} us "
                  f"(measured) -> [bold]headroom {100 * step2.headroom:.1f}%[/bold] (computed), about "
                  f"{result['cores_free']:.2f} of {result['cores']:g} core{'s' * (result['cores'] != 1)} free for functions")
    console.print(f"[dim]With step 1's t_burst at delay 0 ({step2.base.t_burst_median_ns / 1000:.1f} us, the thesis's "
                  f"reading): headroom {100 * step2.headroom_step1_t_burst:.1f}%[/dim]")
    if result["cross_check_headroom"] is not None:
        cc = step2.cross_check
        console.print(f"Cross-check, sleeping instead of spinning, paced to the rate (delay {cc.knobs.delay_ns / 1000:.1f} us): "
                      f"{hr.fmt_rate(cc.delivered_bps)}, "
                      f"1 - busy = {100 * result['cross_check_headroom']:.1f}% (measured CPU time)")
    if "plot" in result:
        console.print(f"figure: {result['plot']}")

