"""A storage node's anti-entropy endpoints, for the gateway only (signed with the cluster secret
like every ``/_nearfaas`` route).

    GET  /_nearfaas/replica/{bucket}/digest           {"digest", "objects", "tombstones", "oldest_tombstone"}
    GET  /_nearfaas/replica/{bucket}/entries?after=&limit=
                                                      {"entries": [[key, version, deleted], ...], "truncated"}
    POST /_nearfaas/replica/{bucket}/purge            {"tombstones": [[key, version], ...]} -> {"purged": n}

The digest is order-independent (node/objectstore.py), so two replicas that hold the same
entries answer the same digest however they got there; only when digests differ does the
gateway page through the entries to find which keys to repair.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from nearfaas.s3.errors import S3Error

MAX_ENTRIES_PAGE = 10_000


def add_replica_routes(app: web.Application, store, prefix: str) -> None:
    async def digest(request: web.Request) -> web.Response:
        return _answer(lambda: store.digest(request.match_info["bucket"]))

    async def entries(request: web.Request) -> web.Response:
        raw = request.query.get("limit", str(MAX_ENTRIES_PAGE))
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_ENTRIES_PAGE:
            return web.json_response({"error": f"limit must be an integer from 1 to {MAX_ENTRIES_PAGE}"}, status=400)
        limit = int(raw)

        def page():
            found = store.entries(request.match_info["bucket"], request.query.get("after", ""), limit + 1)
            return {"entries": found[:limit], "truncated": len(found) > limit}

        return _answer(page)

    async def purge(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            pairs = [(str(k), str(v)) for k, v in body["tombstones"]]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'body must be {"tombstones": [[key, version], ...]}'}, status=400)
        loop = asyncio.get_running_loop()  # unlink + fsync: off the event loop
        try:
            purged = await loop.run_in_executor(None, store.purge_tombstones, request.match_info["bucket"], pairs)
        except S3Error as exc:
            return web.json_response({"error": exc.message, "code": exc.code}, status=exc.status)
        return web.json_response({"purged": purged})

    app.router.add_get(f"{prefix}/replica/{{bucket}}/digest", digest)
    app.router.add_get(f"{prefix}/replica/{{bucket}}/entries", entries)
    app.router.add_post(f"{prefix}/replica/{{bucket}}/purge", purge)


def _answer(compute) -> web.Response:
    try:
        return web.json_response(compute())
    except S3Error as exc:
        return web.json_response({"error": exc.message, "code": exc.code}, status=exc.status)
