"""A subset of S3 bucket policies, for the access keys of a keys file (``auth/keys.py``).

Shape (what S3 takes, less conditions and principals)::

    {"Version": "2012-10-17",
     "Statement": [
       {"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
        "Resource": ["arn:aws:s3:::photos", "arn:aws:s3:::photos/public/*"]},
       {"Effect": "Deny", "Action": "s3:*", "Resource": "arn:aws:s3:::photos/public/secret*"}]}

Evaluation, as S3 does it: an explicit Deny that matches wins; otherwise some Allow must match;
otherwise the request is refused (AccessDenied). ``*`` matches any run of characters (``/``
too) and ``?`` one character, in actions (case-insensitive, as in IAM) and in resources
(case-sensitive). An object's resource is ``arn:aws:s3:::bucket/key``, a bucket's
``arn:aws:s3:::bucket``, and ListAllMyBuckets is checked on ``arn:aws:s3:::*``.

Not supported (refused on load, with the statement's index, so a policy never means less than
its author thinks): ``Condition``, ``NotAction``, ``NotResource``, and in a key's policy a
``Principal`` other than ``*`` (the policy is attached to a key: the key is the principal).

A **bucket policy** (``Policy.parse(..., bucket=NAME)``, PutBucketPolicy; auth/bucket_policy.py
says how it combines with a key's own policy and the bucket's owner) has the same shape, but
each statement names whom it is about: ``"Principal": "*"`` (every key of this cluster) or
``{"AWS": "<access key>"}`` / ``{"AWS": ["<access key>", ...]}``, and its resources must lie in
that bucket (``arn:aws:s3:::NAME`` or ``arn:aws:s3:::NAME/...``), as S3 requires.

Which S3 operation needs which action: :mod:`nearfaas.s3.actions`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nearfaas.s3.actions import ACTIONS, resource_arn

VERSION = "2012-10-17"
_VERSIONS = ("2012-10-17", "2008-10-17")
_STATEMENT_KEYS = {"Sid", "Effect", "Action", "Resource", "Principal"}
_UNSUPPORTED = {"Condition": "conditions are not supported; split the statement by resource instead",
                "NotAction": "NotAction is not supported; list the actions to allow or deny in Action",
                "NotResource": "NotResource is not supported; list the resources in Resource (a Deny statement "
                               "can carve out exceptions)",
                "NotPrincipal": "NotPrincipal is not supported: the policy is attached to one key"}


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the statement, the field and the fix."""


@lru_cache(maxsize=4096)
def _pattern(glob: str, ignore_case: bool) -> re.Pattern:
    parts = []
    for ch in glob:
        parts.append(".*" if ch == "*" else "." if ch == "?" else re.escape(ch))
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def _matches(globs: tuple[str, ...], value: str, ignore_case: bool) -> bool:
    return any(_pattern(g, ignore_case).fullmatch(value) for g in globs)


@dataclass(frozen=True)
class Statement:
    effect: str  # "Allow" or "Deny"
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    sid: str = ""
    principals: tuple[str, ...] | None = None  # a bucket policy's: access keys, or "*"; None: a key's own

    def matches(self, action: str, resource: str, principal: str | None = None) -> bool:
        if self.principals is not None and "*" not in self.principals and principal not in self.principals:
            return False
        return _matches(self.actions, action, True) and _matches(self.resources, resource, False)


@dataclass(frozen=True)
class Policy:
    statements: tuple[Statement, ...]

    def decide(self, action: str, resource: str, principal: str | None = None) -> str | None:
        """"Deny", "Allow", or None when no statement matches (an implicit deny). ``principal``:
        the access key asking, for a bucket policy's statements."""
        allowed = False
        for statement in self.statements:
            if statement.matches(action, resource, principal):
                if statement.effect == "Deny":
                    return "Deny"
                allowed = True
        return "Allow" if allowed else None

    def allows(self, action: str, resource: str) -> bool:
        return self.decide(action, resource) == "Allow"

    def authorize(self, action: str, bucket: str | None, key: str | None) -> bool:
        """The S3 front end's question (``Principal.authorize``): may this key do ``action``?"""
        return self.allows(action, resource_arn(bucket, key))

    @property
    def is_public(self) -> bool:
        """A bucket policy that allows something to every key (S3's PolicyStatus.IsPublic)."""
        return any(s.effect == "Allow" and s.principals is not None and "*" in s.principals for s in self.statements)

    @classmethod
    def parse(cls, document: Any, where: str = "policy", bucket: str | None = None) -> Policy:
        """A policy from its JSON text or the already-parsed document; PolicyError if unusable.
        ``bucket``: a bucket policy for that bucket (principals named, resources inside it)."""
        if isinstance(document, (str, bytes)):
            try:
                document = json.loads(document, object_pairs_hook=_no_duplicates)
            except ValueError as e:
                raise PolicyError(f"{where}: not valid JSON ({e}); write the policy as a JSON object with "
                                  f'"Version" and "Statement"') from None
        if not isinstance(document, dict):
            raise PolicyError(f"{where}: must be an object with \"Version\" and \"Statement\", not "
                              f"{type(document).__name__}")
        unknown = sorted(set(document) - {"Version", "Statement", "Id"})
        if unknown:
            raise PolicyError(f"{where}: unknown field {unknown[0]!r}; a policy has Version, Statement (and Id)")
        version = document.get("Version", VERSION)
        if version not in _VERSIONS:
            raise PolicyError(f"{where}.Version: {version!r} is not a policy language version; write \"{VERSION}\"")
        raw = document.get("Statement")
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            raise PolicyError(f"{where}.Statement: must be a non-empty list of statements, e.g. "
                              '[{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bucket/*"}]')
        return cls(tuple(_statement(s, f"{where}.Statement[{i}]", bucket) for i, s in enumerate(raw)))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """json's object hook: a policy whose text names a field twice is refused, not read as the
    last one (a statement reading "Deny ... Allow" would otherwise allow; red team, issue 42)."""
    seen: dict = {}
    for name, value in pairs:
        if name in seen:
            raise ValueError(f"the field {name!r} appears twice in one object")
        seen[name] = value
    return seen


_ACCESS_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{2,127}$")  # auth/keys.py's rule for access keys


def _principals(raw: Any, where: str) -> tuple[str, ...]:
    """A bucket policy statement's Principal: "*", or {"AWS": "*" | KEY | [KEY, ...]}: nothing else,
    and no value that could never match a key (a wildcard, an ARN, a space), which would make a
    Deny silently do nothing."""
    fix = '"*" (every key of this cluster), {"AWS": "<access key>"} or {"AWS": ["<access key>", ...]}'
    if raw == "*":
        return ("*",)
    if not isinstance(raw, dict) or set(raw) != {"AWS"}:
        raise PolicyError(f"{where}.Principal: must be {fix}")
    value = raw["AWS"]
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise PolicyError(f"{where}.Principal.AWS: must be {fix}")
    for v in values:
        if v != "*" and not _ACCESS_KEY.match(v):
            raise PolicyError(f"{where}.Principal.AWS: {v!r} is not an access key of this cluster (no wildcards, ARNs or "
                              "names: `nearfaas keys list` shows the access keys); write one, or \"*\"")
    return tuple(values)


def _statement(raw: Any, where: str, bucket: str | None = None) -> Statement:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: must be an object with Effect, Action and Resource")
    for name, why in _UNSUPPORTED.items():
        if name in raw:
            raise PolicyError(f"{where}.{name}: {why}")
    unknown = sorted(set(raw) - _STATEMENT_KEYS)
    if unknown:
        raise PolicyError(f"{where}: unknown field {unknown[0]!r}; a statement has Sid, Effect, Action and Resource")
    principals = None
    if bucket is not None:
        if "Principal" not in raw:
            raise PolicyError(f'{where}.Principal: a bucket policy names whom each statement is about: "*" or '
                              '{"AWS": ["<access key>", ...]}')
        principals = _principals(raw["Principal"], where)
    elif "Principal" in raw and raw["Principal"] not in ("*", {"AWS": "*"}):
        raise PolicyError(f"{where}.Principal: the policy is attached to a key, which is its principal; remove "
                          "Principal (or write \"*\")")
    effect = raw.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise PolicyError(f"{where}.Effect: must be \"Allow\" or \"Deny\", not {effect!r}")
    actions = _strings(raw, "Action", where, 's3:GetObject, ["s3:Get*", "s3:ListBucket"] or s3:*')
    for action in actions:
        if action == "*":
            continue
        service, sep, name = action.partition(":")
        if not sep or service.lower() != "s3" or not name:
            raise PolicyError(f"{where}.Action: {action!r} is not an S3 action; write s3:<Action>, e.g. s3:GetObject "
                              "or s3:Get*")
        if "*" not in name and "?" not in name and action.lower() not in _KNOWN_LOWER:
            raise PolicyError(f"{where}.Action: {action!r} is not an action nearfaas checks; use one of "
                              f"{', '.join(sorted(ACTIONS))}, or a wildcard")
    resources = _strings(raw, "Resource", where, '"arn:aws:s3:::bucket" or "arn:aws:s3:::bucket/prefix*"')
    for resource in resources:
        if resource != "*" and not resource.startswith("arn:aws:s3:::"):
            raise PolicyError(f"{where}.Resource: {resource!r} is not an S3 ARN; write arn:aws:s3:::bucket for a "
                              "bucket, arn:aws:s3:::bucket/prefix* for objects, or *")
        if bucket is not None and resource != f"arn:aws:s3:::{bucket}" and not resource.startswith(f"arn:aws:s3:::{bucket}/"):
            raise PolicyError(f"{where}.Resource: {resource!r} is outside bucket {bucket!r}; a bucket policy may name "
                              f"arn:aws:s3:::{bucket} and arn:aws:s3:::{bucket}/... only")
    return Statement(effect, actions, resources, str(raw.get("Sid", "")), principals)


_KNOWN_LOWER = frozenset(a.lower() for a in ACTIONS)


def _strings(raw: dict, name: str, where: str, example: str) -> tuple[str, ...]:
    value = raw.get(name)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{where}.{name}: must be a non-empty string or list of strings, e.g. {example}")
    return tuple(value)


FULL_ACCESS = Policy((Statement("Allow", ("s3:*",), ("*",)),))
