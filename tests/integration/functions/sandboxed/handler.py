"""A hostile function for tests/integration/test_attacks_sandbox.py: it tries the system calls
the default seccomp profile (node/seccomp.py) refuses and reports each outcome ("ok" or the errno
name), then does what a legitimate function does: boto3 on its S3 endpoint and a call of another
function through OPENFAAS_URL. It harms nothing: every namespace or mount it might get would be
its own and die with it."""

import ctypes
import errno
import json
import os
import urllib.request

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
SYS = {"bpf": 321, "keyctl": 250}  # x86-64 numbers (glibc has no wrappers for these)


def _call(fn):
    ctypes.set_errno(0)
    result = fn()
    return "ok" if result >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def _fork_and(fn):
    """Run ``fn`` in a child (a namespace it makes is then the child's alone); its outcome."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, _call(fn).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    out = os.read(r, 100).decode()
    os.close(r)
    return out


def _userns_mount():
    # the classic escape surface: an unprivileged user namespace gives CAP_SYS_ADMIN over mounts
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        return -1
    return libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)


def handle(event, context):
    body = json.loads(event.body or b"{}")
    with open("/proc/self/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    attempts = {
        "unshare": _fork_and(lambda: libc.unshare(CLONE_NEWUSER)),
        "unshare_net": _fork_and(lambda: libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)),
        "userns_mount": _fork_and(_userns_mount),
        "mount": _fork_and(lambda: libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)),
        "ptrace": _fork_and(lambda: libc.ptrace(0, 0, 0, 0)),  # PTRACE_TRACEME
        "bpf": _call(lambda: libc.syscall(SYS["bpf"], 0, 0, 0)),
        "keyctl": _call(lambda: libc.syscall(SYS["keyctl"], 0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the session keyring
    }
    legit = {}
    if body.get("bucket"):
        import boto3

        s3 = boto3.client("s3")
        s3.put_object(Bucket=body["bucket"], Key="sandboxed", Body=b"still works")
        legit["s3"] = s3.get_object(Bucket=body["bucket"], Key="sandboxed")["Body"].read().decode()
    if body.get("call"):
        url = os.environ["OPENFAAS_URL"].rstrip("/") + "/function/" + body["call"]
        with urllib.request.urlopen(urllib.request.Request(url, data=b"hi", method="POST"), timeout=20) as resp:
            legit["call"] = [resp.status, resp.read().decode()]
    return {"seccomp": status.get("Seccomp", "").strip(), "attempts": attempts, "legit": legit, "uid": os.getuid()}
