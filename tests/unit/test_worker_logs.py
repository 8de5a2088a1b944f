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
    assert [r["text"] for r in _records(tmp_path / "_prewarm.log")] == ["warming"]
    assert [r["text"] for r in _records(tmp_path / "fn.log")] == ["the function speaks"]
    assert oct((tmp_path / "fn.log").stat().st_mode & 0o777) == "0o600"


def _records(path):
    import json

    return [json.loads(line) for line in path.read_text().splitlines()]


def test_raw_output_gets_each_line_its_own_time_and_a_record_passes_as_it_came(tmp_path):
    """A write to fd 1 (an image's process, pip, a binary) is timestamped as it arrives, a line in
    two writes is one record, a worker's print() record is kept as is, and the last part line is
    written at EOF. Without the stamping every raw line of a read carried the file's mtime."""
    import asyncio
    import json
    import os
    import time

    from nearfaas.node.worker_logs import LogPipe, read

    printed = json.dumps({"timestamp": 12.5, "name": "fn", "instance": "i-1", "stream": "stdout", "text": "from print"})

    async def go():
        pipe = await LogPipe(tmp_path / "fn.log").start()
        os.write(pipe.child_fd, b"Forking fprocess.\nWrote 3 By")
        while not (tmp_path / "fn.log").exists():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the second line's end comes later, and later than the first
        os.write(pipe.child_fd, b"tes\n" + printed.encode() + b"\nno newline at the end")
        pipe.release_child()
        await asyncio.wait_for(pipe.done, 5)

    before = time.time()
    asyncio.run(go())
    records = read(tmp_path / "fn.log", "fn", "node-a")
    assert [r["text"] for r in records] == ["Forking fprocess.", "Wrote 3 Bytes", "from print", "no newline at the end"]
    assert records[2]["timestamp"] == 12.5 and records[2]["instance"] == "i-1"
    assert before <= records[0]["timestamp"] < records[1]["timestamp"], records
