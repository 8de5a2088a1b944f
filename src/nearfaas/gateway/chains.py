"""Running a chain: one call to an application runs every stage of its DAG.

Each stage is an ordinary invocation (same placement policy, warm pools and failover). What a
chain adds is where data goes between stages (DSCS-Serverless section 5.3, "function chaining"):

- a stage's output is a *local intermediate*: the worker writes it onto its own node when that
  node stores objects, and the gateway records where (``Invoker.located``), so the next
  acceleratable stage is placed on that same node and reads it through mmap;
- a stage that ran on a node's accelerator keeps it for its first acceleratable successor, so
  another call cannot take the drive between the two (run to completion, for the chain);
- the last stage's output is an ordinary replicated object; intermediates are deleted when the
  chain ends unless the first function sets ``keep_intermediates``.

Under ``compute-only`` the same code runs every stage on a compute node, so every intermediate
is written to and read back from storage over the link: the traditional path of the paper.
"""

from __future__ import annotations

import asyncio
import json
import time

from nearfaas.gateway.invoker import CallError, CallResult, Invoker, StageIO
from nearfaas.placement.chain import ChainError, Stage, intermediate_key, plan
from nearfaas.s3.errors import S3Error
from nearfaas.spec.stack import INTERMEDIATE_BUCKET
from nearfaas.telemetry.headers import format_link, format_timing

_PREVIOUS_BODY_LIMIT = 1 << 20  # larger stage answers are passed on as their size only: use objects for data


def _decoded(body: bytes):
    if len(body) > _PREVIOUS_BODY_LIMIT:
        return {"bytes": len(body), "note": "too large to pass inline; write it to context.output instead"}
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", errors="replace")


class ChainRunner:
    """Runs a call to a function with an ``x-nearfaas.chain`` as the whole chain; any other call
    goes straight to the invoker."""

    def __init__(self, invoker: Invoker, backend):
        self.invoker = invoker
        self.backend = backend  # the cluster's S3 backend: intermediates are deleted through it
        self._bucket_ready = False
        self._cleanups: set[asyncio.Task] = set()

    def is_chain(self, name: str) -> bool:
        state = self.invoker.functions.get(name)
        return bool(state and state.options.chain)

    async def invoke(self, name, method, path, query, headers, body, call_id=None) -> CallResult:
        if not self.is_chain(name):
            return await self.invoker.invoke(name, method, path, query, headers, body, call_id)
        return await self.run(name, (method, path, query, headers, body), call_id or f"chain-{time.time_ns():x}")

    async def run(self, app: str, request: tuple, call_id: str) -> CallResult:
        started = time.perf_counter()
        try:
            waves = plan(app, {n: s.options.chain for n, s in self.invoker.functions.items()})
        except ChainError as exc:
            status = 404 if "not deployed" in str(exc) else 409
            raise CallError(status, f"chain {app!r}: {exc}", "gateway") from None
        await self._ensure_bucket()
        results: dict[str, CallResult] = {}
        holds: dict[str, str] = {}  # stage -> node whose accelerator the chain keeps for it
        outcome = "failed"
        try:
            for wave in waves:
                done = await asyncio.gather(*(self._stage(app, s, request, results, call_id, holds) for s in wave),
                                            return_exceptions=True)
                for stage, result in zip(wave, done, strict=True):
                    if isinstance(result, CallError):
                        raise CallError(result.status, f"chain {app!r}, stage {stage.function!r}: {result}", result.layer,
                                        result.headers) from None
                    if isinstance(result, BaseException):
                        raise result
                failed = next((s.function for s in wave if results[s.function].status >= 400), None)
                if failed is not None:
                    return self._answer(app, call_id, waves, results, started, request, failed)
            outcome = "ok"
            return self._answer(app, call_id, waves, results, started, request)
        finally:
            for node in holds.values():
                self.invoker.accel_inflight[node] -= 1
            self.invoker.metrics.chains.labels(app, outcome).inc()
            self._clean_up(app, call_id, waves, results)

    async def _stage(self, app: str, stage: Stage, request: tuple, results: dict, call_id: str, holds: dict) -> None:
        output = (INTERMEDIATE_BUCKET, intermediate_key(app, call_id, stage.function))
        io = StageIO(output, output_local=not stage.is_sink, held_accelerator=holds.get(stage.function))
        method, path, query, headers, body = request
        if stage.after:  # not the first stage: the predecessors' outputs and answers, as JSON
            policy = {k: v for k, v in headers.items() if k.lower() == "x-nearfaas-policy"}
            method, path, query, headers = "POST", "/", "", {"Content-Type": "application/json"} | policy
            body = json.dumps(self._stage_body(app, call_id, stage, results)).encode()
        try:
            result = await self.invoker.invoke(stage.function, method, path, query, headers, body, f"{call_id}/{stage.function}", io)
        finally:
            node = holds.pop(stage.function, None)
            if node is not None:
                self.invoker.accel_inflight[node] -= 1
        results[stage.function] = result
        # No await from the stage's end to here: the accelerator passes to the successor
        # without a moment in which another call could be placed on it.
        if result.status < 400 and result.report.get("target") == "dscs":
            nxt = next((s for s in stage.successors if self._acceleratable(s)), None)
            if nxt is not None and nxt not in holds:
                node = result.report["node"]
                self.invoker.accel_inflight[node] = self.invoker.accel_inflight.get(node, 0) + 1
                holds[nxt] = node

    def _acceleratable(self, name: str) -> bool:
        state = self.invoker.functions.get(name)
        return bool(state and state.options.accelerator == "dscs")

    @staticmethod
    def _stage_body(app: str, call_id: str, stage: Stage, results: dict) -> dict:
        """What a later stage receives: ``input`` is its (first) predecessor's output object when
        that one wrote it, ``previous`` holds each predecessor's answer."""
        outputs = [{"bucket": INTERMEDIATE_BUCKET, "key": intermediate_key(app, call_id, p)} for p in stage.after
                   if results[p].report.get("output") != "none"]
        return {"input": outputs[0] if outputs else None, "inputs": outputs,
                "previous": {p: _decoded(results[p].body) for p in stage.after}, "app": app, "call_id": call_id}

    def _answer(self, app, call_id, waves, results, started, request, failed: str | None = None) -> CallResult:
        ran = [s for wave in waves for s in wave if s.function in results]
        sinks = [s.function for s in ran if s.is_sink]
        last = results[failed] if failed else results[sinks[0]] if len(sinks) == 1 else None
        if last is not None:
            status, body = last.status, last.body
            headers = {k: v for k, v in last.headers.items() if not k.lower().startswith("x-nearfaas-")}
        else:
            status, headers = 200, {"Content-Type": "application/json"}
            body = json.dumps({name: _decoded(results[name].body) for name in sinks}).encode()
        reports = [results[s.function].report for s in ran]
        total = time.perf_counter() - started
        summed = {part: sum(r["timing"][part] for r in reports) for part in ("cold_start", "data", "compute")}
        exec_s = sum(r["exec_s"] for r in reports)
        timing = {"total": total, "stack": max(0.0, total - exec_s - summed["cold_start"])} | summed
        link = {key: sum(r["link"][key] for r in reports) for key in ("read", "write", "seconds")}
        profile = reports[0]["link"]["profile"] if reports else "local"
        headers.update({
            "X-Call-Id": call_id,  # the chain's, not its last stage's
            "X-Nearfaas-Policy": request[3].get("X-Nearfaas-Policy") or self.invoker.policy.name,  # validated by the first stage
            "X-Nearfaas-App": app,
            "X-Nearfaas-Chain": json.dumps([_stage_summary(r) for r in reports], separators=(",", ":")),
            "X-Nearfaas-Node": ",".join(f"{r['function']}={r['node']}" for r in reports),
            "X-Nearfaas-Placement": ",".join(f"{r['function']}={r['target']};{r['reason']}" for r in reports),
            "X-Nearfaas-Start": "cold" if any(r["start"] == "cold" for r in reports) else "warm",
            "X-Nearfaas-Timing": format_timing(timing),
            "X-Nearfaas-Link": format_link(profile, link["read"], link["write"], link["seconds"]),
            "X-Duration-Seconds": f"{total:.6f}",
        })
        if failed:
            headers["X-Nearfaas-Chain-Failed"] = failed
        elif len(sinks) == 1 and results[sinks[0]].report.get("output") != "none":
            headers["X-Nearfaas-Output"] = json.dumps({"bucket": INTERMEDIATE_BUCKET, "key": intermediate_key(app, call_id, sinks[0])})
        return CallResult(status, headers, body, {"stages": reports, "timing": timing, "link": link})

    # -- intermediates ---------------------------------------------------------------------------
    async def _ensure_bucket(self) -> None:
        if self._bucket_ready:
            return
        try:
            await self.backend.create_bucket(INTERMEDIATE_BUCKET)  # idempotent on every node
        except S3Error as exc:
            raise CallError(503, f"could not create the intermediates bucket on every storage node: {exc}", "storage",
                            {"Retry-After": "1"}) from None
        self._bucket_ready = True

    def _clean_up(self, app: str, call_id: str, waves, results: dict) -> None:
        """Delete the intermediates of this call (not the last stage's output), after answering."""
        state = self.invoker.functions.get(app)
        if state is not None and state.options.keep_intermediates:
            return
        refs = []
        for wave in waves:
            for stage in wave:
                result = results.get(stage.function)
                if result is not None and not stage.is_sink and result.report.get("output") != "none":
                    refs.append((INTERMEDIATE_BUCKET, intermediate_key(app, call_id, stage.function)))
        if refs:
            task = asyncio.get_running_loop().create_task(self._delete(refs))
            self._cleanups.add(task)
            task.add_done_callback(self._cleanups.discard)

    async def _delete(self, refs: list) -> None:
        for ref in refs:
            self.invoker.located.pop(ref, None)
            try:
                await self.backend.delete_object(*ref)
            except S3Error as exc:  # a node down now keeps a stray intermediate; it is harmless and listed
                print(json.dumps({"event": "intermediate-not-deleted", "ref": list(ref), "error": str(exc)}), flush=True)


def _stage_summary(report: dict) -> dict:
    out = {k: report[k] for k in ("function", "node", "target", "reason", "start", "output")}
    out["timing"] = "measured;" + ";".join(f"{k}={v:.6f}" for k, v in report["timing"].items())
    out["link"] = report["link"]
    if "modelled" in report:
        out["modelled"] = report["modelled"]
    return out
