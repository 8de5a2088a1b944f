"""A hostile function for tests/integration/test_isolation.py: given paths and pids in its JSON
body, it tries each attack and reports what happened. It never harms what it reaches: signals
are signal 0 (the permission check without the signal) and writes go to names of its own."""

import json
import os


def _try(action):
    try:
        result = action()
        return "ok" if result is None else result
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror}"


def _read(path):
    with open(path, "rb") as f:
        return f"read {len(f.read())} bytes"


def _write(path):
    with open(path, "x") as f:
        f.write("hostile was here")
    os.unlink(path)
    return "written"


def handle(event, context):
    body = event.json() or {}
    with open("/proc/self/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    return {"statusCode": 200, "headers": {"Content-Type": "application/json"}, "body": json.dumps({
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
        "no_new_privs": status.get("NoNewPrivs", "").strip(),
        "read": {p: _try(lambda p=p: _read(p)) for p in body.get("paths", [])},
        "list": {p: _try(lambda p=p: sorted(os.listdir(p))) for p in body.get("dirs", [])},
        "write": {p: _try(lambda p=p: _write(p)) for p in body.get("writes", [])},
        "signal": {str(pid): _try(lambda pid=pid: os.kill(int(pid), 0)) for pid in body.get("pids", [])},
        "proc_seen": {str(pid): os.path.exists(f"/proc/{pid}") for pid in body.get("pids", [])},
        "proc_uids": sorted({_try(lambda e=e: os.stat(f"/proc/{e}").st_uid) for e in os.listdir("/proc") if e.isdigit()},
                            key=str),
        "setuid_root": _try(lambda: os.setuid(0)),
        "own_secrets": {name: context.secrets.get(name) for name in body.get("own_secrets", [])},
        "object": bytes(context.objects.get(body["object"])).decode() if body.get("object") else None,
        "bundle": _try(lambda: _read(os.path.join(os.getcwd(), "handler.py"))),
        "env": dict(os.environ),
        "cgroup": open("/proc/self/cgroup").read(),
    })}
