"""The fast-path executor's control-port authentication (docs/fastpath.md, "Security").

The control port can swap any lambda's code, so every connection starts with a challenge: the
executor sends ``{"challenge": <hex nonce>, "auth": "hmac-sha256"}``; the client answers
``{"op": "auth", "hmac": <hex HMAC-SHA256(key, nonce)>}`` and gets ``{"ok": true}`` before any op.
The key is a hex string in a mode-0600 file (``--control-key-file``); it never crosses the socket.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path


class ControlAuthError(RuntimeError):
    """The key is unusable, or the executor refused the answer."""


def new_key_file(path: str | os.PathLike) -> Path:
    """Write a fresh 256-bit key (hex) to ``path``, mode 0600 from the start (never readable by others)."""
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode through O_CREAT
        os.write(fd, secrets.token_hex(32).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_key(path: str | os.PathLike) -> bytes:
    """The key in ``path``; ControlAuthError naming the fix when it is missing or not hex."""
    try:
        text = Path(path).read_text().strip()
    except OSError as exc:
        raise ControlAuthError(f"cannot read the fast path's control key {str(path)!r}: {exc}; "
                               "restart the cluster (nearfaas down; nearfaas up) to make a new one") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ControlAuthError(f"the fast path's control key {str(path)!r} is not a hex string") from None
    if len(key) < 16:
        raise ControlAuthError(f"the fast path's control key {str(path)!r} is {len(key)} bytes; it needs at least 16")
    return key


def answer(key: bytes, challenge_line: bytes) -> bytes:
    """The auth line (with its newline) answering the executor's challenge line."""
    try:
        nonce = bytes.fromhex(json.loads(challenge_line)["challenge"])
    except (ValueError, KeyError, TypeError):
        raise ControlAuthError(f"the executor's control port did not send a challenge (got {challenge_line[:200]!r}); "
                               "is it an executor older than the authenticated protocol?") from None
    mac = hmac.new(key, nonce, hashlib.sha256).hexdigest()
    return json.dumps({"op": "auth", "hmac": mac}).encode() + b"\n"


def check_reply(reply_line: bytes) -> None:
    """Raise ControlAuthError unless the executor accepted the answer."""
    try:
        reply = json.loads(reply_line) if reply_line else {}
    except ValueError:
        reply = {}
    if not reply.get("ok"):
        raise ControlAuthError("the fast-path executor refused the control key "
                               f"({reply.get('error') or 'connection closed'}); the key file does not match the executor's")
