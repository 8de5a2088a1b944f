"""A folder reached across an emulated storage link: a FUSE passthrough file system that makes
every data access pay the link (issue 20's *disaggregated* landscape, the thesis's iSCSI-attached
storage: a function on a compute node whose store lives on a storage node's disk).

    python -m nearfaas.link.linkfs BACKING MOUNTPOINT --profile dc-25g    # foreground, until unmounted

Mechanism: every ``read`` and ``write`` waits one sampled first-byte latency of the profile and
drains its bytes through the profile's bandwidth (``EmulatedLink``, shared by the whole mount, as
one link is); every ``fsync`` costs one round trip. Metadata (``getattr``, ``readdir``, opens)
is free, as a block protocol's client caches its file system's metadata. Caching is minimised
on both sides: the kernel is told ``direct_io`` (no client page cache) and the backing pages
are dropped after each access (``POSIX_FADV_DONTNEED``, the server not caching either).

Worked example: at ``dc-25g`` (0.1 ms median first byte, 2.8 GB/s), RocksDB reading one 4 KiB
block waits ~0.1 ms + 1.5 us; a 64 MiB compaction write of 128 KiB chunks waits 512 first bytes
and 24 ms of bandwidth.

Known caveats:
- Python FUSE: each request also crosses the FUSE daemon (tens of microseconds), which the thesis's
  kernel iSCSI initiator does not; the result is a storage-network stack's cost, measured, not
  the link's alone.
- ``fallocate`` with flags (keep-size, punch-hole) is refused with EOPNOTSUPP; RocksDB treats
  preallocation as a hint and goes on.
- POSIX locks are the kernel's own on the mount (one client, as with one iSCSI initiator).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import time

from nearfaas import atomic
from nearfaas.link.profiles import EmulatedLink, get_profile

UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2  # <sys/stat.h>


def _operations():
    from mfusepy import FuseOSError, Operations, fuse_get_context

    class LinkFS(Operations):
        use_ns = True  # times in nanoseconds, as RocksDB's file times are compared (mfusepy raises OSError as -errno)

        def __init__(self, backing: str, link: EmulatedLink):
            self.backing, self.link = os.path.realpath(backing), link

        def _full(self, path: str) -> str:
            return os.path.join(self.backing, path.lstrip("/"))

        def _pay(self, nbytes: int) -> None:
            self.link.first_byte()
            self.link.transfer(nbytes)

        # -- metadata: free (cached by a block protocol's client) ---------------------------------
        def getattr(self, path, fh=None):
            st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
            out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks", "st_blksize")}
            return out | {"st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def readdir(self, path, fh):
            return [".", "..", *os.listdir(self._full(path))]

        def access(self, path, amode):
            if not os.access(self._full(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        def chmod(self, path, mode):
            return os.chmod(self._full(path), mode)

        def chown(self, path, uid, gid):
            return os.chown(self._full(path), uid, gid)

        def _own(self, full: str) -> None:
            """A file the daemon (root) made belongs to the caller, as on the caller's own disk."""
            uid, gid, _pid = fuse_get_context()
            os.chown(full, uid, gid)

        def mkdir(self, path, mode):
            os.mkdir(self._full(path), mode)
            self._own(self._full(path))
            return 0

        def rmdir(self, path):
            return os.rmdir(self._full(path))

        def unlink(self, path):
            return os.unlink(self._full(path))

        def rename(self, old, new):
            return atomic.move(self._full(old), self._full(new))  # the mounted filesystem's own rename

        def link(self, target, source):
            return os.link(self._full(source), self._full(target))

        def utimens(self, path, times=None):
            full = self._full(path)
            if not times:
                return os.utime(full)
            st = os.lstat(full)  # UTIME_NOW and UTIME_OMIT arrive as their special nanosecond values
            now = time.time_ns()
            pick = lambda t, old: now if t == UTIME_NOW else old if t == UTIME_OMIT else t  # noqa: E731
            return os.utime(full, ns=(pick(times[0], st.st_atime_ns), pick(times[1], st.st_mtime_ns)))

        def statfs(self, path):
            st = os.statvfs(self._full(path))
            return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                                "f_files", "f_flag", "f_frsize", "f_namemax")}

        def open(self, path, flags):
            return os.open(self._full(path), flags & ~os.O_DIRECT)  # the kernel already bypasses its cache

        def create(self, path, mode, fi=None):
            fd = os.open(self._full(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
            self._own(self._full(path))
            return fd

        def release(self, path, fh):
            return os.close(fh)

        def flush(self, path, fh):
            return 0

        def truncate(self, path, length, fh=None):
            if fh is not None:
                return os.ftruncate(fh, length)
            return os.truncate(self._full(path), length)

        # -- data: every access crosses the link --------------------------------------------------
        def read(self, path, size, offset, fh):
            data = os.pread(fh, size, offset)
            os.posix_fadvise(fh, offset, size, os.POSIX_FADV_DONTNEED)
            self._pay(len(data))
            return data

        def write(self, path, data, offset, fh):
            self._pay(len(data))
            return os.pwrite(fh, data, offset)

        def fsync(self, path, datasync, fh):
            self.link.first_byte()
            (os.fdatasync if datasync else os.fsync)(fh)
            os.posix_fadvise(fh, 0, 0, os.POSIX_FADV_DONTNEED)  # clean now: the server drops them
            return 0

        def fallocate(self, path, mode, offset, size, fh):
            if mode:
                raise FuseOSError(errno.EOPNOTSUPP)
            return os.posix_fallocate(fh, offset, size)

    return LinkFS


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("backing", help="the folder on the storage side")
    p.add_argument("mountpoint", help="where it appears, across the link")
    p.add_argument("--profile", default="dc-25g", help="link profile (nearfaas.link.profiles), default dc-25g")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    try:
        link = EmulatedLink(get_profile(a.profile), seed=a.seed)
    except ValueError as exc:
        p.error(str(exc))
    for path, what in ((a.backing, "backing folder"), (a.mountpoint, "mount point")):
        if not os.path.isdir(path):
            p.error(f"the {what} {path} is not a folder")
    try:
        from mfusepy import FUSE
    except (ImportError, OSError) as exc:  # OSError: the library is installed, libfuse3 is not
        print(f"linkfs needs mfusepy and libfuse3 (Debian: fuse3; both installed by `make setup`): {exc}", file=sys.stderr)
        return 2
    FUSE(_operations()(a.backing, link), a.mountpoint, foreground=True, allow_other=True, default_permissions=True,
         direct_io=True, fsname="nearfaas-linkfs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
