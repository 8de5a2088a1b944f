"""The default seccomp profile of every function: Python workers and image functions alike.

Mechanism. One denylist, ``DENIED``, names the system calls a function never needs and an
attacker uses to reach the kernel's larger surfaces: new namespaces (``unshare``, ``setns``, and
``clone`` with any ``CLONE_NEW*`` flag: an unprivileged user namespace would give the function
``CAP_SYS_ADMIN`` over mounts of its own), mounts, ``ptrace`` and cross-process memory access,
kernel keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``, module loading,
``kexec``, clock and swap changes. Each answers ``EPERM``; ``clone3`` answers ``ENOSYS``, as in
Docker's default profile, because its flags live in memory a filter cannot read, and glibc then
falls back to ``clone``, whose flags it can. Everything else is allowed: like Docker's profile it
is a second wall behind the uid switch, no_new_privs and the capabilities the function lacks.

- A Python worker loads it with ``apply()`` through libseccomp (``libseccomp.so.2``, loaded with
  ctypes; no Python binding needed) as the last step of ``node/jail.enter``, after the uid
  drop and ``PR_SET_NO_NEW_PRIVS``, with ``TSYNC`` so every thread of the worker is covered. A
  pre-warmed worker builds the filter while idle (``prepare()``), so its specialisation only
  loads it.
- An image function gets the same list as the ``linux.seccomp`` object of its OCI config
  (``oci_profile()``, used by node/oci/bundle.py); the runtime loads it right before it executes
  the image's process.

Worked example: a handler calling ``os.unshare(os.CLONE_NEWUSER)`` (or ``libc.keyctl(0, -1)``,
``libc.ptrace(0, 0, 0, 0)``) gets ``PermissionError: [Errno 1] Operation not permitted``;
``/proc/self/status`` of the worker says ``Seccomp: 2``. Threads, sockets, subprocesses and
``fork`` work as before.

Fail closed: ``apply()`` raises ``SeccompError`` naming what is missing (libseccomp, or a kernel
without ``CONFIG_SECCOMP_FILTER``), the jail turns that into a refusal to run the function, and
the node's start-up probe (``probe()``) reports it with the fix before any function is deployed.

Known caveats:
- A denylist, not Docker's allowlist: a system call added to Linux later is allowed until it is
  named here.
- ``clone``'s flags are checked as argument 0, which holds on x86-64 and arm64 (not s390x).
- Processes the function starts inherit the filter (seccomp cannot be removed); so a handler
  cannot run a program that needs namespaces (bubblewrap, a nested container runtime).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno

DENIED = (
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "chroot",
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    # kernel surfaces a function has no use for
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
    # the host's state
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "settimeofday", "clock_settime", "clock_adjtime",
    "adjtimex", "iopl", "ioperm", "vhangup", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
    "create_module", "get_kernel_syms", "query_module",
)
# clone(2) flags that make a namespace (CLONE_NEWTIME is not a clone(2) flag: its bit is the exit signal's)
CLONE_NEW = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
             "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
             "CLONE_NEWNET": 0x40000000}
FIX = "install libseccomp (apt-get install -y libseccomp2) on a kernel with CONFIG_SECCOMP_FILTER"

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_FLTATR_CTL_TSYNC = 4
SCMP_CMP_MASKED_EQ = 7


def scmp_act_errno(code: int) -> int:  # libseccomp's SCMP_ACT_ERRNO(x)
    return 0x00050000 | (code & 0xFFFF)


class SeccompError(Exception):
    """The profile could not be loaded; the worker must not run the function."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


_lib = None


def _libseccomp():
    global _lib
    if _lib is None:
        try:  # the soname first: find_library runs ldconfig in a subprocess (~4 ms of cold start)
            lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
        except OSError:
            try:
                lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so", use_errno=True)
            except OSError as exc:
                raise SeccompError(f"libseccomp is not installed ({exc}); {FIX}") from None
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(_ArgCmp)]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        _lib = lib
    return _lib


def _ok(result: int, what: str) -> None:
    if result < 0:  # libseccomp returns -errno
        raise SeccompError(f"seccomp: {what}: {errno.errorcode.get(-result, -result)} ({FIX})")


_prepared = None  # a filter built ahead by prepare(), loaded by the next apply()


def _build(lib):
    """The profile as a libseccomp filter context, not loaded yet (the caller releases it)."""
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompError(f"seccomp_init failed; {FIX}")
    try:
        _ok(lib.seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1), "set TSYNC")
        for name in DENIED:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:  # not a system call on this architecture (e.g. iopl on arm64)
                continue
            _ok(lib.seccomp_rule_add_array(ctx, scmp_act_errno(errno.EPERM), nr, 0, None), f"deny {name}")
        clone = lib.seccomp_syscall_resolve_name(b"clone")
        for flag in CLONE_NEW.values():
            cmp = _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag)
            _ok(lib.seccomp_rule_add_array(ctx, scmp_act_errno(errno.EPERM), clone, 1, ctypes.byref(cmp)), "deny clone(CLONE_NEW*)")
        clone3 = lib.seccomp_syscall_resolve_name(b"clone3")
        if clone3 >= 0:
            _ok(lib.seccomp_rule_add_array(ctx, scmp_act_errno(errno.ENOSYS), clone3, 0, None), "clone3 -> ENOSYS")
    except BaseException:
        lib.seccomp_release(ctx)
        raise
    return ctx


def prepare() -> None:
    """Load libseccomp and build the filter now, so that ``apply()`` only loads it: a pre-warmed
    worker does this while idle (runtime/prewarm.py), keeping ~1 ms off its cold start. Building
    changes nothing in the process; a failure here is left for ``apply()`` to raise."""
    global _prepared
    if _prepared is None:
        _prepared = _build(_libseccomp())


def apply() -> None:
    """Load the profile into this process (all its threads). Call after the uid drop and
    PR_SET_NO_NEW_PRIVS: without either, loading a filter needs CAP_SYS_ADMIN. Uses the filter
    ``prepare()`` built, if any (the same rules), else builds it now."""
    global _prepared
    lib = _libseccomp()
    ctx, _prepared = _prepared or _build(lib), None
    try:
        _ok(lib.seccomp_load(ctx), "load the filter")
    finally:
        lib.seccomp_release(ctx)


def oci_profile() -> dict:
    """The same profile as an OCI runtime config's ``linux.seccomp`` (runc and crun read it)."""
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [
            {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
            *({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
               "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]} for flag in CLONE_NEW.values()),
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS},
        ],
    }


def probe() -> list[str]:
    """In the jail's probe child, after its uid drop: load the profile and check that it bites."""
    try:
        apply()
    except SeccompError as exc:
        return [f"cannot load the default seccomp profile: {exc}"]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEW["CLONE_NEWUSER"]) == 0 or ctypes.get_errno() != errno.EPERM:
        return [f"the seccomp profile loaded but unshare was not refused with EPERM; {FIX}"]
    return []
