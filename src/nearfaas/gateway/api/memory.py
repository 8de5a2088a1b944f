"""/system/memory/{name} and /system/memory/{name}/tiers: a profiled function's memory, from the
nodes that ran it (docs/memory.md).

    GET /system/memory/thumbnail?dram_share=0.5        -> runs (measured) and Porter's hints (modelled)
    GET /system/memory/thumbnail/tiers?delta_ns=70     -> every tier policy over the runs (modelled)

A function is profiled with ``x-nearfaas: {memory: {profile: true}}``; any other is a 409 naming
that fix. The nodes keep the logs and do the reading and the simulating (memory/profile.py), so
only summaries cross the network.
"""

from __future__ import annotations

from aiohttp import web

from nearfaas.gateway.api.common import error
from nearfaas.gateway.nodes import NodeError

TIERS_DEFAULTS = {"delta_ns": 70.0, "dram_share": 0.5, "boundness": 0.5, "fast_ns": 200.0}


class _Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class MemoryAPI:
    def __init__(self, invoker, nodes):
        self.invoker, self.nodes = invoker, nodes

    def routes(self, r: web.UrlDispatcher) -> None:
        r.add_get("/system/memory/{name}", self.profiles)
        r.add_get("/system/memory/{name}/tiers", self.tiers)

    def _profiled(self, name: str) -> dict:
        """The function's x-nearfaas.memory block; a refusal when it is unknown or not profiled."""
        state = self.invoker.functions.get(name)
        if state is None:
            raise _Refusal(404, f"function {name!r} not found")
        memory = state.options.memory or {}
        if not memory.get("profile"):
            raise _Refusal(409, f"function {name!r} is not profiled: add x-nearfaas: {{memory: {{profile: true}}}} to "
                                "its stack file and deploy it again")
        return memory

    async def _gather(self, path: str, key: str, timeout: float) -> list[dict]:
        """``key``'s entries from every healthy node's ``path``, each tagged with its node; a node's
        400 (a bad argument) is the caller's 400, a node that cannot answer is left out."""
        out = []
        for node in self.nodes.nodes.values():
            if not node.healthy:
                continue
            try:
                body = await self.nodes.call(node.name, "GET", path, timeout=timeout)
            except NodeError as exc:
                if exc.status == 400:
                    raise _Refusal(400, str(exc)) from None
                continue
            out += [dict(r, node=node.name) for r in body.get(key, [])]
        return out

    async def profiles(self, request: web.Request) -> web.Response:
        """The memory profile of every profiled run on every node, and Porter's hints from all."""
        from nearfaas.memory.profile import hints

        name = request.match_info["name"]
        try:
            memory = self._profiled(name)
            share = float(request.query.get("dram_share", 0.5))
            if not 0 <= share <= 1:
                raise _Refusal(400, "dram_share: the share of the footprint DRAM may hold, between 0 and 1")
            period = memory.get("sample_ms") or 50
            runs = await self._gather(f"/_nearfaas/memory/{name}?period_ms={period}", "instances", 30)
        except ValueError:
            return error(400, "dram_share: the share of the footprint DRAM may hold, between 0 and 1")
        except _Refusal as exc:
            return error(exc.status, str(exc))
        profiles = [r["profile"] for r in runs if "profile" in r]
        return web.json_response({"function": name, "sample_ms": period, "runs": runs, "dram_share": share,
                                  "hints": hints(profiles, share),
                                  "label": "measured: allocations, the access sample and placements (memory shim); hints: modelled "
                                           "(Porter's tuner: hottest stacks on DRAM up to dram_share of the footprint)"})

    async def tiers(self, request: web.Request) -> web.Response:
        """Every tier policy over the function's runs, where their logs are; per policy the mean
        slowdown and slow-tier share over the runs."""
        from nearfaas.memory.tiersim import POLICIES

        name = request.match_info["name"]
        try:
            memory = self._profiled(name)
            args = {k: float(request.query.get(k, v)) for k, v in TIERS_DEFAULTS.items()}
            query = "&".join(f"{k}={v}" for k, v in args.items()) + f"&period_ms={memory.get('sample_ms') or 50}"
            runs = await self._gather(f"/_nearfaas/memory/{name}/tiers?{query}", "runs", 60)
        except ValueError:
            return error(400, f"{', '.join(TIERS_DEFAULTS)} must be numbers")
        except _Refusal as exc:
            return error(exc.status, str(exc))

        def mean(xs):
            return sum(xs) / len(xs) if xs else None

        policies = {p: {k: mean([r["policies"][p][k] for r in runs]) for k in ("slowdown", "slow_tier_bytes_share")}
                    for p in POLICIES}
        return web.json_response({"function": name, "runs": len(runs), "policies": policies, "per_run": runs, **args,
                                  "label": "modelled: the tier simulator over the function's measured access samples; "
                                           "boundness and fast_ns are inputs, not measured here"})
