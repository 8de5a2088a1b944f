"""node/worker_logs.py's bounds (red team round 3: a function wrote 1 GB of log in five calls and
a read of it took the node to 4 GB, stalling another tenant's calls)."""

from __future__ import annotations

import json

from nearfaas.node import worker_logs


def test_a_read_looks_only_at_the_newest_part(tmp_path, monkeypatch):
    monkeypatch.setattr(worker_logs, "READ_BYTES", 1000)
    path = tmp_path / "f.log"
    path.write_text("".join(json.dumps({"timestamp": i, "text": f"line {i}"}) + "\n" for i in range(500)))
    records = worker_logs.read(path, "f", "n")
    assert 0 < len(records) < 50 and records[-1]["text"] == "line 499"
    assert all(r.get("stream") != "raw" for r in records)  # no half line from the cut
    assert worker_logs.tail(path, 3).splitlines()[-1].endswith('"line 499"}')


def test_a_log_past_the_cap_is_cut_to_its_newest_part_and_says_so(tmp_path):
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    big.write_bytes(b"x" * 5000 + b"\n" + b"newest line\n")
    small.write_bytes(b"short\n")
    assert worker_logs.trim(tmp_path, max_bytes=1000, keep=100) == ["big.log"]
    text = big.read_text()
    assert text.endswith("newest line\n") and "log cut" in text.splitlines()[0] and big.stat().st_size < 300
    assert small.read_bytes() == b"short\n"
    with open(big, "ab") as writer:  # an O_APPEND writer goes on at the new end
        writer.write(b"after\n")
    assert big.read_text().endswith("newest line\nafter\n")


def test_a_log_pipe_appends_what_comes_and_follows_a_retarget(tmp_path):
    import asyncio
    import os

    from nearfaas.node.worker_logs import LogPipe

    async def go():
        pipe = await LogPipe(tmp_path / "_prewarm.log").start()
        os.write(pipe.child_fd, b"warming\n")
        while not (tmp_path / "_prewarm.log").exists():
            await asyncio.sleep(0.01)
        pipe.retarget(tmp_path / "fn.log")  # specialised: its output is the function's from now on
        os.write(pipe.child_fd, b"the function speaks\n")
        pipe.release_child()  # the worker exits: EOF
        await asyncio.wait_for(pipe.done, 5)

    asyncio.run(go())
    assert (tmp_path / "_prewarm.log").read_bytes() == b"warming\n"
    assert (tmp_path / "fn.log").read_bytes() == b"the function speaks\n"
    assert oct((tmp_path / "fn.log").stat().st_mode & 0o777) == "0o600"
