"""What the second red-team round of issue 39 found, reproduced on the shared cluster (isolation on):

- a function's own files on sys.path while its worker was still root: a bundle (or a requirements
  env) with ``aiohttp.py`` ran as uid 0 in the host's namespaces when the worker imported the
  runtime before entering its jail (node/spawning.py starts workers with ``python -P``; the
  handler folder and the env go on sys.path only after ``jail.enter``: runtime/worker.py
  ``_function_paths``);
- System V IPC shared with the host: a segment a function made outlived it, uncharged, and any
  local user could attach it (the jail unshares CLONE_NEWIPC).
The third finding (an index-only requirements env shared between functions, written into by one
of them while it was built) is tests/unit/test_build.py: every env belongs to one uid."""

from __future__ import annotations

import os
import secrets

import pytest
import requests

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs root")]


@pytest.mark.parametrize("start", ["prewarmed", "spawned"])
def test_a_bundles_modules_named_like_the_runtimes_never_run_before_the_jail(cluster, scratch, functions_dir, tmp_path, start):
    proof = tmp_path / "rootproof.txt"
    env = {"ROOTPROOF": str(proof)}
    if start == "spawned":
        env["LC_ALL"] = "C"  # a start-up variable (not the node's own value): the pool spawns a fresh interpreter (node/prewarm.py)
    name = f"rootproof-{start}"
    if start == "prewarmed":  # a burst just before (another test's cold start) may have taken them
        cluster.wait_prewarmed()
    assert scratch(name, functions_dir / "rootproof", wait=False, envVars=env).status_code < 300
    resp = requests.post(f"{cluster.url}/function/{name}", data=b"{}", timeout=60)
    # A pre-warmed worker had imported the runtime already: the call is served. A spawned one
    # finds the bundle's aiohttp.py first once jailed (a function's own files shadow the
    # runtime's, as its requirements do): its own start fails, as its uid, inside its jail.
    assert resp.status_code == 200 if start == "prewarmed" else resp.status_code in (200, 502), resp.text
    assert not proof.exists(), f"the bundle's planted modules ran before the jail: {proof.read_text()!r}"


def _host_segments() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        next(f)
        return {int(line.split()[0]) for line in f if line.strip()}


def test_a_functions_shared_memory_is_not_the_hosts(cluster, scratch, functions_dir):
    key = secrets.randbelow(1 << 30) + 1
    assert scratch("ipcleak", functions_dir / "ipcleak").status_code < 300
    resp = requests.post(f"{cluster.url}/function/ipcleak", json={"key": key}, timeout=60)
    assert resp.status_code == 200 and resp.json()["shmid"] >= 0, resp.text
    assert key not in _host_segments(), "the function's segment is in the host's IPC namespace"
