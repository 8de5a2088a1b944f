"""A key-value data-access function (issue 20): RocksDB on this function's volume, on whichever
node runs it, caching minimised (nearfaas/econ/kvstore.py). The MBWU benchmark drives it with
YCSB workload A (benchmarks/mbwu.py). Deploy with ``x-nearfaas: {volume: true}`` and
``com.openfaas.scale.max: 1`` (one process owns a RocksDB).

POST one of:
    {"load": {"start": 0, "count": 10000, "value_bytes": 1000, "seed": 1}}   insert records
    {"settle": true}                                                      flush + compact
    {"ops": [["r", "user0000000001"], ["u", "user0000000002", "<value>"]]}  run operations
    {"ycsb": {"records": 10000, "ops": 5000, "batch": 64, "seed": 2}}       drive YCSB-A here: the client on the node
    {"stats": true}                                                       the worker's pid and block device
"""

import json
import os
import time

from nearfaas.econ import kvstore
from nearfaas.econ.ycsb import Workload

_db = None
_workloads = {}
MAX_LOAD = 1_000_000


def _reply(status, body):
    return {"statusCode": status, "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}


def _db_for(context):
    global _db
    if _db is None:
        _db = kvstore.open_db(os.path.join(context.volume, "rocksdb"))
    return _db


def _ops(raw):
    if not isinstance(raw, list) or not raw:
        raise ValueError('"ops" must be a non-empty list of ["r", key] or ["u", key, value]')
    for i, op in enumerate(raw):
        ok = isinstance(op, list) and all(isinstance(x, str) for x in op) and (
            (len(op) == 2 and op[0] == "r") or (len(op) == 3 and op[0] == "u"))
        if not ok:
            raise ValueError(f'ops[{i}] must be ["r", key] or ["u", key, value] with strings, got {str(op)[:80]}')
    return raw


def _ycsb(db, spec):
    """The integrated landscape: the workload generator runs in this process, next to the store."""
    records, ops, batch = spec.get("records"), spec.get("ops", 1000), spec.get("batch", 64)
    seed, read_share, value_bytes = spec.get("seed", 2), spec.get("read_share", 0.5), spec.get("value_bytes", 1000)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (records, ops, batch, seed, value_bytes)) \
            or not 1 <= records <= MAX_LOAD or not 1 <= ops <= 10_000_000 or not 1 <= batch <= 10_000:
        raise ValueError("ycsb needs integers: 1 <= records <= 1000000 (as loaded), 1 <= ops <= 10000000, 1 <= batch <= 10000")
    params = (records, value_bytes, float(read_share), seed)
    if params not in _workloads:  # kept: zeta(n) is O(n), and the key stream goes on across calls
        _workloads[params] = Workload(records, value_bytes=value_bytes, read_share=float(read_share), seed=seed)
    workload = _workloads[params]
    totals = {"reads": 0, "found": 0, "updates": 0, "app_bytes": 0}
    started = time.perf_counter()
    done = 0
    while done < ops:
        n = min(batch, ops - done)
        for k, v in kvstore.execute(db, workload.batch(n)).items():
            totals[k] += v
        done += n
    return totals | {"ops": done, "run_seconds": time.perf_counter() - started}


def handle(event, context):
    if not context.volume:
        return _reply(400, {"error": "this function needs a volume: deploy it with x-nearfaas: {volume: true}"})
    try:
        body = json.loads(event.body or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
    except ValueError as exc:
        return _reply(400, {"error": f"bad request: {exc}"})
    started = time.perf_counter()
    try:
        if "ops" in body:
            result = kvstore.execute(_db_for(context), _ops(body["ops"]))
        elif "load" in body:
            spec = body["load"] if isinstance(body["load"], dict) else {}
            start, count = spec.get("start", 0), spec.get("count")
            value_bytes, seed = spec.get("value_bytes", 1000), spec.get("seed", 1)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, count, value_bytes, seed)) \
                    or start < 0 or not 1 <= count <= MAX_LOAD or not 1 <= value_bytes <= 1 << 20:
                raise ValueError(f"load needs integers: start >= 0, 1 <= count <= {MAX_LOAD}, 1 <= value_bytes <= 1048576")
            result = {"loaded": count, "bytes": kvstore.load(_db_for(context), start, count, value_bytes, seed)}
        elif "ycsb" in body:
            result = _ycsb(_db_for(context), body["ycsb"] if isinstance(body["ycsb"], dict) else {})
        elif body.get("settle"):
            kvstore.settle(_db_for(context))
            result = {"settled": True}
        elif body.get("stats"):
            # The worker cannot read its own /proc/self/io once it dropped root (it is no longer
            # dumpable); the benchmark, as root, reads /proc/<pid>/io.
            result = {"pid": os.getpid(), "device": kvstore.disk_of(context.volume)}
        else:
            raise ValueError('send "ops", "load", "settle" or "stats" (see the handler docstring)')
    except ValueError as exc:
        return _reply(400, {"error": str(exc)})
    result["node"], result["seconds"] = context.node, time.perf_counter() - started
    return _reply(200, result)
