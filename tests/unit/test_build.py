"""node/build.py's cache key: an env belongs to one function's uid, whatever its requirements say
(red team round 2: an index-only env shared between functions was written into by one of them
while it was built, through /proc/<pip>/root, and imported by the other)."""

from __future__ import annotations

import pytest

from nearfaas.node.build import env_key


@pytest.mark.parametrize("text", ["Pillow==10.4.0\n", "# pinned\nrequests[socks]>=2,<3  # why\nsix ; python_version > '3'\n",
                                  "numpy\n", "Pillow==10.4.0\n./evil\n", "nearfaas_testpkg-1.0-py3-none-any.whl\n",
                                  "-r other.txt\n", "--find-links wheels\npkg\n", "pkg @ file:///srv/pkg\n", "evil/\n",
                                  "pkg.tar.gz\n", "-e .\n", "--index-url http://mirror/simple\npkg\n", "file:evil\n", "/abs/evil\n"])
def test_every_env_belongs_to_one_uid(tmp_path, text):
    req = tmp_path / "requirements.txt"
    req.write_text(text)
    assert env_key(req, 200001) != env_key(req, 200002)
    assert env_key(req, 200001) == env_key(req, 200001)  # the same function's next start reuses it


def test_the_key_follows_the_text(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("Pillow==10.4.0\n")
    b.write_text("Pillow==10.3.0\n")
    assert env_key(a, 200001) != env_key(b, 200001)
    assert env_key(a, None) != env_key(b, None) and env_key(a, None) == env_key(a, None)


def _slow_package(folder, marker):
    """A local requirement whose in-tree build backend writes ``marker`` and then sleeps: a build
    that only ends when it is stopped."""
    pkg = folder / "slowpkg"
    pkg.mkdir(parents=True)
    (pkg / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n')
    (pkg / "backend.py").write_text(
        "import time\n"
        "def get_requires_for_build_wheel(config_settings=None):\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    time.sleep(60)\n"
        "    return []\n")
    (folder / "requirements.txt").write_text("./slowpkg\n")
    return folder / "requirements.txt"


def test_a_newer_versions_build_stops_the_older_one(tmp_path):
    # Red team round 9 (H1): each redeploy with a changed requirements.txt started a build while
    # the earlier ones ran on (six at once, each allowed 512 pids, 2 GiB, 2 CPUs). A function has
    # one build at a time now: the newer one stops the older.
    import asyncio

    from nearfaas.node import build

    async def scenario():
        running = build.RunningBuilds()
        envs = tmp_path / "envs"
        envs.mkdir()
        old_marker, new_marker = tmp_path / "old-started", tmp_path / "new-started"
        old_req = _slow_package(tmp_path / "v1", old_marker)
        new_req = _slow_package(tmp_path / "v2", new_marker)
        new_req.write_text("./slowpkg\n# v2\n")  # another env key, as a redeploy's
        log = tmp_path / "build.log"
        old = asyncio.ensure_future(build._install(envs, "k1", "fn", old_req.parent, old_req, None, log, None, running))
        while not old_marker.exists():  # the old build's backend runs (the event, not a sleep)
            assert not old.done(), old.exception()
            await asyncio.sleep(0.05)
        new = asyncio.ensure_future(build._install(envs, "k2", "fn", new_req.parent, new_req, None, log, None, running))
        with pytest.raises(build.BuildError) as stopped:
            await asyncio.wait_for(old, 30)
        assert stopped.value.status == 404 and "updated" in str(stopped.value)
        while not new_marker.exists():  # the newer build runs on
            assert not new.done(), new.exception()
            await asyncio.sleep(0.05)
        running.stop("fn")  # as removing the function does
        with pytest.raises(build.BuildError):
            await asyncio.wait_for(new, 30)

    asyncio.run(scenario())


def test_a_node_runs_at_most_build_slots_builds_at_once():
    import asyncio

    from nearfaas.node import build

    async def scenario():
        slots = build.RunningBuilds().slots()
        held = [await asyncio.wait_for(slots.acquire(), 1) for _ in range(build.BUILD_SLOTS)]
        assert slots.locked()  # the next build waits for a slot
        slots.release()
        await asyncio.wait_for(slots.acquire(), 1)
        assert len(held) == build.BUILD_SLOTS == 2

    asyncio.run(scenario())
