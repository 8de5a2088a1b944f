"""The link file system (link/linkfs.py): files pass through intact, each data access pays the
link's first-byte latency, and what the daemon (root) creates belongs to the caller."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from nearfaas.link.profiles import PROFILES

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
                                reason="needs root, /dev/fuse and fusermount3 (Debian fuse3, installed by make setup)")


@pytest.fixture
def mounted():
    # Not under pytest's tmp_path: /tmp/pytest-of-root is 0700, which another uid cannot traverse.
    import tempfile
    from pathlib import Path

    tmp_path = Path(tempfile.mkdtemp(prefix="nearfaas-linkfs-", dir="/var/tmp"))
    tmp_path.chmod(0o755)
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "nearfaas.link.linkfs", str(backing), str(mnt), "--profile", "s3-like"],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"linkfs did not mount: {proc.stderr.read().decode()[-300:]}")
        time.sleep(0.05)
    try:
        yield backing, mnt
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
        proc.wait(timeout=10)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_data_crosses_intact_and_pays_the_link(mounted):
    backing, mnt = mounted
    data = os.urandom(300_000)
    (mnt / "f").write_bytes(data)
    assert (backing / "f").read_bytes() == data
    median = PROFILES["s3-like"].first_byte_median_s
    started = time.monotonic()
    for _ in range(5):
        with open(mnt / "f", "rb") as fh:
            assert fh.read(4096) == data[:4096]
    waited = time.monotonic() - started
    assert waited > 5 * median * 0.5, waited  # five reads, each at least about one first byte (lognormal)
    os.rename(mnt / "f", mnt / "g")
    assert sorted(os.listdir(mnt)) == ["g"] and not (backing / "f").exists()
    os.unlink(mnt / "g")
    assert os.listdir(backing) == []


def test_what_a_caller_creates_is_the_callers(mounted):
    backing, mnt = mounted
    os.chown(mnt, 54321, 54321)  # through the mount: the backing folder is chowned
    assert (backing.stat().st_uid, backing.stat().st_gid) == (54321, 54321)
    script = f"import os; os.setgid(54321); os.setuid(54321); os.mkdir(r'{mnt / 'd'}'); open(r'{mnt / 'd' / 'file'}', 'w').write('x')"
    subprocess.run([sys.executable, "-c", script], check=True)
    for p in (backing / "d", backing / "d" / "file"):
        assert (p.stat().st_uid, p.stat().st_gid) == (54321, 54321)
    # Another uid is refused by the folder's permissions, checked by the kernel.
    other = subprocess.run([sys.executable, "-c", f"import os; os.setuid(54322); open(r'{mnt / 'd' / 'y'}', 'w')"],
                           capture_output=True, text=True)
    assert other.returncode != 0 and "Permission denied" in other.stderr
