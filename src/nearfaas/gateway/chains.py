"""Running a chain: one call to an application runs every stage of its DAG.

Each stage is an ordinary invocation (same placement policy, warm pools and failover). What a
chain adds is where data goes between stages (DSCS-Serverless section 5.3, "function chaining"):

- a stage's output is a *local intermediate*: the worker writes it onto its own node when that
  node stores objects, and the gateway records where (``Invoker.located``), so the next
  acceleratable stage is placed on that same node and reads it through mmap;
- a stage that ran on a node's accelerator keeps it for the acceleratable stage that reads its
  output, so another call cannot take the drive between the two (run to completion, for the
  chain);
- the last stage's output is an ordinary replicated object; intermediates are deleted when the
  chain ends unless the first function sets ``keep_intermediates``.

Under ``compute-only`` the same code runs every stage on a compute node, so every intermediate
is written to and read back from storage over the link: the traditional path of the paper.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field

from multidict import CIMultiDict

from nearfaas.auth import function_keys
from nearfaas.gateway.errors import CallError
from nearfaas.gateway.invoker import CallResult, Invoker, StageIO
from nearfaas.placement.chain import ChainCycle, Stage, StageMissing, intermediate_key, plan
from nearfaas.s3.errors import S3Error
from nearfaas.spec.options import INTERMEDIATE_BUCKET
from nearfaas.telemetry.headers import format_link, format_timing

_PREVIOUS_BODY_LIMIT = 1 << 20  # larger stage answers are passed on as their size only: use objects for data


def _decoded(body: bytes):
    if len(body) > _PREVIOUS_BODY_LIMIT:
        return {"bytes": len(body), "note": "too large to pass inline; write it to context.output instead"}
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


@dataclass
class _ChainCall:
    """One call of an application, while it runs."""

    app: str
    call_id: str  # the client's (or the gateway's) id, echoed in X-Call-Id
    request: tuple  # (method, path, query, headers, body) of the call, given to the first stage
    waves: list[list[Stage]]
    # Intermediates are named by an id the gateway makes: two calls that share a client's
    # X-Call-Id must never share (or delete) each other's data.
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started: float = field(default_factory=time.perf_counter)
    results: dict[str, CallResult] = field(default_factory=dict)
    begun: set[str] = field(default_factory=set)  # stages that were sent, whether or not they answered
    holds: dict[str, str] = field(default_factory=dict)  # stage -> node whose accelerator is kept for it
    # The key each stage gets for this call's intermediates only (auth/function_keys.py); None
    # without a cluster secret (local mode, no S3 auth).
    run_key: dict | None = field(default=None, repr=False)

    def output_of(self, stage: str) -> tuple[str, str]:
        return INTERMEDIATE_BUCKET, intermediate_key(self.app, self.run_id, stage)


class ChainRunner:
    """Runs a call to a function with an ``x-nearfaas.chain`` as the whole chain; any other call
    goes straight to the invoker."""

    def __init__(self, invoker: Invoker, backend):
        self.invoker = invoker
        self.backend = backend  # the cluster's S3 backend: intermediates are deleted through it
        self._cleanups: set[asyncio.Task] = set()

    def is_chain(self, name: str) -> bool:
        state = self.invoker.functions.get(name)
        return bool(state and state.options.chain)

    async def invoke(self, name, method, path, query, headers, body, call_id=None) -> CallResult:
        if not self.is_chain(name):
            return await self.invoker.invoke(name, method, path, query, headers, body, call_id)
        return await self.run(name, (method, path, query, headers, body), call_id or f"chain-{uuid.uuid4().hex}")

    async def run(self, app: str, request: tuple, call_id: str) -> CallResult:
        try:
            waves = plan(app, {n: s.options.chain for n, s in self.invoker.functions.items()})
        except StageMissing as exc:
            raise CallError(404, f"chain {app!r}: {exc}", "gateway") from None
        except ChainCycle as exc:
            raise CallError(409, f"chain {app!r}: {exc}", "gateway") from None
        call = _ChainCall(app, call_id, request, waves)
        secret = getattr(self.invoker.nodes, "secret", None)
        call.run_key = function_keys.run_credentials(secret, app, call.run_id) if secret else None
        outcome = "failed"
        try:
            for wave in waves:
                done = await asyncio.gather(*(self._stage(call, s) for s in wave), return_exceptions=True)
                for stage, result in zip(wave, done, strict=True):
                    if isinstance(result, CallError):
                        raise CallError(result.status, f"chain {app!r}, stage {stage.function!r}: {result}", result.layer,
                                        result.headers) from None
                    if isinstance(result, BaseException):
                        raise result
                failed = next((s.function for s in wave if call.results[s.function].status >= 400), None)
                if failed is not None:
                    return self._answer(call, failed)
            outcome = "ok"
            return self._answer(call)
        finally:
            for node in call.holds.values():
                self.invoker.accel_inflight[node] -= 1
            self.invoker.metrics.chains.labels(app, outcome).inc()
            self._clean_up(call)

    async def _stage(self, call: _ChainCall, stage: Stage) -> None:
        inputs = tuple(call.output_of(p) for p in stage.after if self._wrote(call, p))
        self._check_inputs_reachable(stage, inputs)
        io = StageIO(call.output_of(stage.function), output_local=not stage.is_sink, app=call.app,
                     held_accelerator=call.holds.get(stage.function), inputs=inputs if stage.after else None,
                     run_key=call.run_key)
        method, path, query, headers, body = call.request
        if stage.after:  # not the first stage: the predecessors' outputs and answers, as JSON
            policy = {k: v for k, v in headers.items() if k.lower() == "x-nearfaas-policy"}
            method, path, query, headers = "POST", "/", "", {"Content-Type": "application/json"} | policy
            body = json.dumps(self._stage_body(call, stage, inputs)).encode()
        call.begun.add(stage.function)
        try:
            result = await self.invoker.invoke(stage.function, method, path, query, headers, body,
                                               f"{call.call_id}/{stage.function}", io)
        finally:
            node = call.holds.pop(stage.function, None)
            if node is not None:
                self.invoker.accel_inflight[node] -= 1
        call.results[stage.function] = result
        # No await from the stage's end to here: the accelerator passes to the stage that reads
        # this one's output without a moment in which another call could be placed on it. Only a
        # successor fed by this stage alone gets it: it runs in the very next wave, so the hold
        # never idles the drive while unrelated stages run.
        if result.status < 400 and result.report.get("target") == "dscs":
            nxt = next((name for name in stage.successors if self._fed_only_by(call, name, stage.function)), None)
            if nxt is not None and nxt not in call.holds:
                node = result.report["node"]
                self.invoker.accel_inflight[node] = self.invoker.accel_inflight.get(node, 0) + 1
                call.holds[nxt] = node

    def _fed_only_by(self, call: _ChainCall, name: str, predecessor: str) -> bool:
        state = self.invoker.functions.get(name)
        stage = next((s for wave in call.waves for s in wave if s.function == name), None)
        return bool(state and state.options.accelerator == "dscs" and stage and stage.after == (predecessor,))

    @staticmethod
    def _wrote(call: _ChainCall, stage: str) -> bool:
        return call.results[stage].report.get("output", "none") != "none"

    def _check_inputs_reachable(self, stage: Stage, inputs: tuple) -> None:
        """An intermediate has one copy, on the node that made it: if that node is gone, say so,
        rather than let the stage fail on a missing object as if the function were at fault."""
        nodes = self.invoker.nodes.nodes
        for ref in inputs:
            holders = self.invoker.located.get(ref)
            if holders and not any(nodes[n].healthy for n in holders if n in nodes):
                raise CallError(502, f"the intermediate s3://{ref[0]}/{ref[1]} lived only on {', '.join(holders)}, which was "
                                     f"lost before {stage.function!r} could read it; retry the call", "node")

    @staticmethod
    def _stage_body(call: _ChainCall, stage: Stage, inputs: tuple) -> dict:
        """What a later stage receives: ``input`` is its (first) predecessor's output object when
        that one wrote it, ``previous`` holds each predecessor's answer."""
        outputs = [{"bucket": b, "key": k} for b, k in inputs]
        return {"input": outputs[0] if outputs else None, "inputs": outputs,
                "previous": {p: _decoded(call.results[p].body) for p in stage.after}, "app": call.app, "call_id": call.call_id}

    def _answer(self, call: _ChainCall, failed: str | None = None) -> CallResult:
        ran = [s for wave in call.waves for s in wave if s.function in call.results]
        sinks = [s.function for s in ran if s.is_sink]
        results = call.results
        last = results[failed] if failed else results[sinks[0]] if len(sinks) == 1 else None
        if last is not None:
            status, body = last.status, last.body
            headers = CIMultiDict((k, v) for k, v in last.headers.items() if not k.lower().startswith("x-nearfaas-"))
        else:
            status, headers = 200, {"Content-Type": "application/json"}
            body = json.dumps({name: _decoded(results[name].body) for name in sinks}).encode()
        reports = [results[s.function].report for s in ran]
        timing = _critical_path_timing(call, time.perf_counter() - call.started)
        link = {key: sum(r["link"].get(key, r["link"].get(key.removesuffix("_wire"), 0)) for r in reports)
                for key in ("read", "write", "seconds", "read_wire", "write_wire")}
        profile = reports[0]["link"]["profile"] if reports else "local"
        headers.update({
            "X-Call-Id": call.call_id,  # the chain's, not its last stage's
            "X-Nearfaas-Policy": call.request[3].get("X-Nearfaas-Policy") or self.invoker.policy.name,  # validated by stage 1
            "X-Nearfaas-App": call.app,
            "X-Nearfaas-Chain": json.dumps([_stage_summary(r) for r in reports], separators=(",", ":")),
            "X-Nearfaas-Node": ",".join(f"{r['function']}={r['node']}" for r in reports),
            "X-Nearfaas-Placement": ",".join(f"{r['function']}={r['target']};{r['reason']}" for r in reports),
            "X-Nearfaas-Start": "cold" if any(r["start"] == "cold" for r in reports) else "warm",
            "X-Nearfaas-Timing": format_timing(timing),
            "X-Nearfaas-Link": format_link(profile, link["read"], link["write"], link["seconds"], link["read_wire"], link["write_wire"]),
            "X-Duration-Seconds": f"{timing['total']:.6f}",
        })
        if failed:
            headers["X-Nearfaas-Chain-Failed"] = failed
        elif len(sinks) == 1 and self._wrote(call, sinks[0]):
            bucket, key = call.output_of(sinks[0])
            headers["X-Nearfaas-Output"] = json.dumps({"bucket": bucket, "key": key})
        return CallResult(status, headers, body, {"stages": reports, "timing": timing, "link": link})

    # -- intermediates ---------------------------------------------------------------------------
    def _clean_up(self, call: _ChainCall) -> None:
        """Forget where this call's intermediates were and delete them (not the last stages'
        outputs), after answering. Every stage that was sent counts: one that wrote its output
        and then failed reported nothing, and deleting a key that was never written is harmless."""
        state = self.invoker.functions.get(call.app)
        keep = state is not None and state.options.keep_intermediates
        refs = [call.output_of(s.function) for wave in call.waves for s in wave if not s.is_sink and s.function in call.begun]
        for ref in refs:
            self.invoker.located.pop(ref, None)
        if refs and not keep:
            task = asyncio.get_running_loop().create_task(self._delete(refs))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)

    async def _delete(self, refs: list) -> None:
        for ref in refs:
            try:
                await self.backend.delete_object(*ref)
            except S3Error as exc:  # a node down now keeps a stray intermediate; it is harmless and listed
                print(json.dumps({"event": "intermediate-not-deleted", "ref": list(ref), "error": str(exc)}), flush=True)


def _critical_path_timing(call: _ChainCall, total: float) -> dict:
    """The chain's breakdown along its critical path: per wave, the parts of its slowest stage
    (stages of one wave run side by side, so summing them all would exceed the wall time)."""
    critical = [max((call.results[s.function].report for s in wave if s.function in call.results),
                    key=lambda r: r["timing"]["total"], default=None) for wave in call.waves]
    critical = [r for r in critical if r is not None]
    parts = {part: sum(r["timing"][part] for r in critical) for part in ("cold_start", "data", "compute")}
    busy = sum(r["exec_s"] for r in critical) + parts["cold_start"]
    return {"total": total, "stack": max(0.0, total - busy)} | parts


def _stage_summary(report: dict) -> dict:
    out = {k: report[k] for k in ("function", "node", "target", "reason", "start", "output")}
    out["timing"] = format_timing(report["timing"])
    out["link"] = report["link"]
    if "modelled" in report:
        out["modelled"] = report["modelled"]
    return out
