"""Access keys besides the cluster's own, each limited by a policy (``auth/policy.py``).

The keys file (``<state>/keys.yml`` unless the cluster file's ``auth: {keys_file: PATH}`` says
otherwise) holds the keys, YAML or JSON::

    keys:
      - name: reader                       # shown in AccessDenied messages and `nearfaas keys list`
        access_key: NKREADER0123456789
        secret_key: a-long-random-string   # or secret_file: reader.secret (relative to this file)
        policy:                            # or policy_file: reader-policy.json
          Version: "2012-10-17"
          Statement:
            - {Effect: Allow, Action: [s3:GetObject, s3:ListBucket],
               Resource: ["arn:aws:s3:::a", "arn:aws:s3:::a/reports/*"]}

Adding or revoking a key needs no restart: the gateway stats the file on each lookup of a key
it does not otherwise know (one ``stat``) and reloads it when it changed (inode, size or
mtime), so a revoked key is refused from the next request on. A file that does not load (bad
YAML, a bad policy, a duplicate key) is logged with what to fix and the last good set stays in
force; a missing file means no extra keys. ``nearfaas keys add/list/revoke`` edit the file
under a lock and replace it atomically (written to a temporary file, fsynced, renamed), mode
0600: it holds secrets.

The cluster's own key keeps full access and is never in this file; function keys
(``auth/function_keys.py``) keep their bucket scope.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nearfaas import atomic
from nearfaas.auth.policy import Policy, PolicyError

log = logging.getLogger(__name__)

DEFAULT_FILE = "keys.yml"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_ACCESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,127}$")
_ENTRY_KEYS = {"name", "access_key", "secret_key", "secret_file", "policy", "policy_file"}
MIN_SECRET = 16


class KeysFileError(ValueError):
    """A keys file that cannot be used; the message names the entry, the field and the fix."""


@dataclass(frozen=True)
class KeyEntry:
    name: str
    access_key: str
    secret_key: str = field(repr=False)
    policy: Policy = field(repr=False)
    document: dict = field(repr=False, compare=False, default_factory=dict)  # as written, for `keys list`


def keys_path(auth: dict | None, state_dir: Path | str) -> Path:
    """Where a cluster's keys file is: the auth block's keys_file, else <state>/keys.yml."""
    configured = (auth or {}).get("keys_file")
    path = Path(configured).expanduser() if configured else Path(state_dir) / DEFAULT_FILE
    return path if path.is_absolute() else Path(state_dir) / path


# -- reading -----------------------------------------------------------------------------------


def _parse_text(text: str, path: Path) -> Any:
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except ValueError as e:
            raise KeysFileError(f"{path}: not valid JSON ({e})") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KeysFileError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None


def parse_keys(document: Any, path: Path, reserved: Iterable[str] = ()) -> dict[str, KeyEntry]:
    """Entries by access key; KeysFileError naming the first problem."""
    if document is None:
        return {}
    if isinstance(document, dict):
        unknown = sorted(set(document) - {"keys"})
        if unknown:
            raise KeysFileError(f"{path}: unknown field {unknown[0]!r}; the file holds `keys:` and a list of keys")
        document = document.get("keys") or []
    if not isinstance(document, list):
        raise KeysFileError(f"{path}: `keys` must be a list of {{name, access_key, secret_key, policy}}")
    reserved = set(reserved)
    entries: dict[str, KeyEntry] = {}
    names: set[str] = set()
    for i, raw in enumerate(document):
        where = f"{path}: keys[{i}]"
        if not isinstance(raw, dict):
            raise KeysFileError(f"{where}: must be a mapping with name, access_key, secret_key and policy")
        unknown = sorted(set(raw) - _ENTRY_KEYS)
        if unknown:
            raise KeysFileError(f"{where}: unknown field {unknown[0]!r}; use {', '.join(sorted(_ENTRY_KEYS))}")
        access = raw.get("access_key")
        if not isinstance(access, str) or not _ACCESS.match(access):
            raise KeysFileError(f"{where}.access_key: must be 3-128 letters, digits, '.', '_' or '-', not {access!r}")
        if access in reserved or access.startswith(("nff.", "nfr.")):  # function and chain-call keys (function_keys.py)
            raise KeysFileError(f"{where}.access_key: {access!r} is the cluster's own key or a function key's form; "
                                "give this key an access key of its own")
        if access in entries:
            raise KeysFileError(f"{where}.access_key: {access!r} is listed twice; access keys must be unique")
        name = raw.get("name", access)
        if not isinstance(name, str) or not _NAME.match(name):
            raise KeysFileError(f"{where}.name: must be 1-64 letters, digits, '.', '_', '@' or '-', not {name!r}")
        where = f"{path}: keys[{i}] ({name})"
        if name in names:
            raise KeysFileError(f"{where}.name: {name!r} is used twice; names must be unique")
        secret = _secret(raw, where, path)
        document_policy = _policy_document(raw, where, path)
        try:
            policy = Policy.parse(document_policy, f"{where}.policy")
        except PolicyError as e:
            raise KeysFileError(str(e)) from None
        names.add(name)
        entries[access] = KeyEntry(name, access, secret, policy, document_policy)
    return entries


def _secret(raw: dict, where: str, path: Path) -> str:
    if ("secret_key" in raw) == ("secret_file" in raw):
        raise KeysFileError(f"{where}: give exactly one of secret_key or secret_file")
    if "secret_file" in raw:
        secret_path = Path(str(raw["secret_file"])).expanduser()
        secret_path = secret_path if secret_path.is_absolute() else path.parent / secret_path
        try:
            secret = secret_path.read_text().strip()
        except OSError as e:
            raise KeysFileError(f"{where}.secret_file: cannot read {secret_path} ({e.strerror})") from None
    else:
        secret = raw["secret_key"]
    if not isinstance(secret, str) or len(secret) < MIN_SECRET:
        raise KeysFileError(f"{where}.secret_key: must be a string of at least {MIN_SECRET} characters "
                            "(`nearfaas keys add` makes one)")
    return secret


def _policy_document(raw: dict, where: str, path: Path) -> Any:
    if ("policy" in raw) == ("policy_file" in raw):
        raise KeysFileError(f"{where}: give exactly one of policy (the policy itself) or policy_file (a JSON file)")
    if "policy" in raw:
        return raw["policy"]
    policy_path = Path(str(raw["policy_file"])).expanduser()
    policy_path = policy_path if policy_path.is_absolute() else path.parent / policy_path
    try:
        return json.loads(policy_path.read_text())
    except OSError as e:
        raise KeysFileError(f"{where}.policy_file: cannot read {policy_path} ({e.strerror})") from None
    except ValueError as e:
        raise KeysFileError(f"{where}.policy_file: {policy_path} is not valid JSON ({e})") from None


def load_keys(path: Path, reserved: Iterable[str] = ()) -> dict[str, KeyEntry]:
    """The keys of a file ({} when there is none); KeysFileError when it does not load."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise KeysFileError(f"{path}: cannot read ({e.strerror})") from None
    return parse_keys(_parse_text(text, path), path, reserved)


class KeyStore:
    """The gateway's view of the keys file, reloaded when the file changes."""

    def __init__(self, path: Path, reserved: Iterable[str] = ()):
        self.path = Path(path)
        self.reserved = frozenset(reserved)
        self._entries: dict[str, KeyEntry] = {}
        self._seen: tuple | None = ("unread",)  # (inode, size, mtime_ns) of the version last read, good or bad; None: no file
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self.refresh()

    def _signature(self) -> tuple | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def refresh(self) -> None:
        signature = self._signature()
        if signature == self._seen:
            return
        with self._lock:
            if signature == self._seen:
                return
            try:
                entries = load_keys(self.path, self.reserved)
            except KeysFileError as e:
                self._seen = signature
                self.last_error = str(e)
                log.error("keys file not loaded, the previous keys stay in force: %s", e)
                print(json.dumps({"event": "keys-file-error", "error": str(e)}), flush=True)
                return
            self._entries, self._seen, self.last_error = entries, signature, None

    def lookup(self, access_key: str) -> KeyEntry | None:
        self.refresh()
        return self._entries.get(access_key)

    def entries(self) -> list[KeyEntry]:
        self.refresh()
        return list(self._entries.values())


def resolver(store: KeyStore, fallback=None, buckets=None):
    """An S3Auth resolver: keys of the keys file (with their policies), then ``fallback``.
    ``buckets``: the gateway's BucketAccessCache (auth/bucket_policy.py): with it, a key's
    requests also answer to each bucket's owner and policy, and the buckets it creates are its own."""
    from nearfaas.s3.sigv4 import Principal

    def resolve(access: str):
        entry = store.lookup(access)
        if entry is not None:
            authorizer = buckets.authorizer(entry.policy, access) if buckets is not None else entry.policy.authorize
            return Principal(f"key {entry.name}", entry.secret_key, authorizer=authorizer,
                             account=access if buckets is not None else None)
        return fallback(access) if fallback is not None else None

    return resolve


# -- editing (the CLI) -------------------------------------------------------------------------


def _raw_entries(path: Path) -> list[dict]:
    try:
        document = _parse_text(path.read_text(), path)
    except FileNotFoundError:
        return []
    if isinstance(document, dict):
        document = document.get("keys") or []
    if not isinstance(document, list):
        raise KeysFileError(f"{path}: `keys` must be a list; fix the file by hand first")
    return document


def write_atomically(path: Path, entries: list[dict]) -> None:
    """Replace the keys file with ``entries``: temp file (0600), fsync, rename, fsync the folder."""
    if path.suffix == ".json":
        text = json.dumps({"keys": entries}, indent=2) + "\n"
    else:
        import yaml

        text = "# nearfaas access keys (docs/security.md); edited by `nearfaas keys`\n" + \
            yaml.safe_dump({"keys": entries}, sort_keys=False, default_flow_style=False)
    parse_keys(_parse_text(text, path), path)  # never write a file the gateway would refuse
    atomic.write_text(path, text, 0o600)


def new_access_key() -> str:
    return "NK" + secrets.token_hex(9).upper()


def new_secret_key() -> str:
    return secrets.token_urlsafe(30)


def add_key(path: Path, name: str, policy: dict, *, access_key: str | None = None, secret_key: str | None = None,
            reserved: Iterable[str] = ()) -> KeyEntry:
    """Add a key (its access key and secret made here unless given); KeysFileError or PolicyError
    when it cannot be added (a name in use, a bad policy)."""
    Policy.parse(policy, f"policy of key {name}")
    with atomic.locked(path):
        entries = _raw_entries(path)
        if any(e.get("name", e.get("access_key")) == name for e in entries if isinstance(e, dict)):
            raise KeysFileError(f"a key named {name!r} exists; revoke it first or pick another name")
        entry = {"name": name, "access_key": access_key or new_access_key(),
                 "secret_key": secret_key or new_secret_key(), "policy": policy}
        new = entries + [entry]
        parse_keys(new, path, reserved)
        write_atomically(path, new)
    return parse_keys([entry], path)[entry["access_key"]]


def revoke_key(path: Path, name_or_access: str) -> str:
    """Remove a key by name or access key; the name removed. KeysFileError when there is none."""
    with atomic.locked(path):
        entries = _raw_entries(path)
        keep = [e for e in entries if not (isinstance(e, dict) and name_or_access in (e.get("name"), e.get("access_key")))]
        if len(keep) == len(entries):
            raise KeysFileError(f"no key named {name_or_access!r} in {path}; `nearfaas keys list` shows them")
        gone = next(e for e in entries if e not in keep)
        write_atomically(path, keep)
    return str(gone.get("name", gone.get("access_key")))


def list_keys(path: Path) -> list[KeyEntry]:
    return list(load_keys(path).values())
