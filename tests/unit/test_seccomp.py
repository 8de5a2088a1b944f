"""node/seccomp.py: the default profile, applied in a forked child (it cannot be removed)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import threading

import pytest

from nearfaas.node import seccomp
from nearfaas.node.oci import bundle

libc = ctypes.CDLL(None, use_errno=True)


def _in_child(fn) -> dict:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            out = fn()
        except BaseException as exc:
            out = {"error": repr(exc)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def _outcome(result: int) -> str:
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 syscall numbers")
def test_the_profile_refuses_what_it_names_and_allows_the_rest():
    def attempt():
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, as the jail sets it before
        seccomp.apply()
        seen = {}
        worker = threading.Thread(target=lambda: seen.update(thread=_outcome(libc.unshare(0x10000000))))
        worker.start()
        worker.join()
        child = os.fork()  # fork is clone without CLONE_NEW*: still allowed
        if child == 0:
            os._exit(7)
        _, code = os.waitpid(child, 0)
        return {"unshare": _outcome(libc.unshare(0x10000000)), "keyctl": _outcome(libc.syscall(250, 0, -3, 0)),
                "bpf": _outcome(libc.syscall(321, 0, 0, 0)), "ptrace": _outcome(libc.ptrace(0, 0, 0, 0)),
                "clone3": _outcome(libc.syscall(435, 0, 0)), "fork": os.waitstatus_to_exitcode(code),
                "getpid": _outcome(libc.getpid()), **seen,
                "status": [line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")][0]}

    got = _in_child(attempt)
    assert got == {"unshare": "EPERM", "keyctl": "EPERM", "bpf": "EPERM", "ptrace": "EPERM", "clone3": "ENOSYS",
                   "fork": 7, "getpid": "ok", "thread": "EPERM", "status": "2"}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 syscall numbers")
def test_a_filter_prepared_ahead_is_the_one_loaded_and_it_bites():
    """A pre-warmed worker builds the filter while idle (runtime/prewarm.py); its specialisation
    only loads it. The prepared filter must refuse what the profile names, and be used once."""
    def attempt():
        seccomp.prepare()
        prepared = seccomp._prepared is not None
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        seccomp.apply()
        return {"prepared": prepared, "used": seccomp._prepared is None, "unshare": _outcome(libc.unshare(0x10000000)),
                "keyctl": _outcome(libc.syscall(250, 0, -3, 0)), "clone3": _outcome(libc.syscall(435, 0, 0)),
                "getpid": _outcome(libc.getpid()),
                "status": [line.split()[1] for line in open("/proc/self/status") if line.startswith("Seccomp:")][0]}

    assert _in_child(attempt) == {"prepared": True, "used": True, "unshare": "EPERM", "keyctl": "EPERM", "clone3": "ENOSYS",
                                  "getpid": "ok", "status": "2"}


def test_without_libseccomp_apply_refuses_naming_the_fix(monkeypatch):
    def missing(*args, **kwargs):
        raise OSError("libseccomp.so.2: cannot open shared object file")

    monkeypatch.setattr(seccomp, "_lib", None)
    monkeypatch.setattr(seccomp.ctypes, "CDLL", missing)
    with pytest.raises(seccomp.SeccompError, match="apt-get install -y libseccomp2"):
        seccomp.apply()


def test_image_functions_get_the_same_list():
    cfg = bundle.config(__import__("pathlib").Path("/rootfs"), bundle.process(["/f"], {}, "/", 200001), hostname="h",
                        limits={}, tmp_size=1 << 20, secrets_dir=None, cgroups_path=None)
    profile = cfg["linux"]["seccomp"]
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" and not rule.get("args")
              and rule["errnoRet"] == errno.EPERM for n in rule["names"]}
    assert {"unshare", "setns", "mount", "ptrace", "bpf", "keyctl", "add_key", "kexec_load", "init_module"} <= denied
    assert denied == set(seccomp.DENIED)
    masked = {rule["args"][0]["value"] for rule in profile["syscalls"] if rule["names"] == ["clone"]}
    assert masked == set(seccomp.CLONE_NEW.values())


@pytest.mark.skipif(os.geteuid() != 0, reason="the jail's probe switches uid: needs root")
def test_the_nodes_probe_refuses_without_libseccomp(tmp_path, monkeypatch):
    from nearfaas.node import jail

    def missing(*args, **kwargs):
        raise OSError("libseccomp.so.2: cannot open shared object file")

    monkeypatch.setattr(seccomp, "_lib", None)
    monkeypatch.setattr(seccomp.ctypes, "CDLL", missing)  # the probe's forked child inherits it
    problems = jail._probe(tmp_path / "state", "n", jail.CGROUP_ROOT)
    assert any("cannot load the default seccomp profile" in p and "libseccomp2" in p for p in problems), problems
