"""Who may use a bucket: its owner, the admin, and whom its bucket policy lets in.

Mechanism. A bucket records its **owner**: the access key that created it, for a key of the keys
file (auth/keys.py); a bucket made by the cluster's own key (the admin), by a function's key, or
before owners were recorded has none and is the **admin's**. A keys-file key's request on a bucket
is decided from three things, as S3 decides a request from an IAM user's policy, the bucket's
policy and the bucket's account:

1. the key's own policy (the keys file's, written by the admin) and the bucket's policy
   (PutBucketPolicy; statements naming the key's access key, or ``"*"``) each say Allow, Deny or
   nothing;
2. a Deny in either wins;
3. on a bucket the key owns, or one of the admin's, an Allow in either is enough (one account:
   the admin wrote the key's policy for the admin's buckets);
4. on a bucket another key owns, both must Allow (two accounts): with no bucket policy, a second
   user's key stays out however broad its own policy is.

The admin (the cluster's key) may do anything, and a function's key keeps the bucket scope its
deployment declares (x-nearfaas.buckets: the deployer is the admin); neither is affected by
bucket policies. Only a bucket's owner (or the admin) may put or delete its policy, whatever the
policy says; creating a bucket another key owns is 409 BucketAlreadyExists.

Worked example: key ``alice`` (own policy ``s3:*`` on ``*``) creates ``photos``; key ``bob``
(also ``s3:*`` on ``*``) gets AccessDenied on ``photos`` (rule 4: no bucket policy allows him).
Alice puts ``{"Effect": "Allow", "Principal": {"AWS": "<bob's access key>"}, "Action":
"s3:GetObject", "Resource": "arn:aws:s3:::photos/*"}``: bob may now GET ``photos/cat.jpg``, still
not PUT (his own policy allows it, the bucket's does not), and not put a policy (not the owner).

The gateway keeps each bucket's owner and policy in a cache it fills before deciding a request
(``BucketAccessCache.prepare``: one HEAD of the bucket, kept ``TTL_S``) and drops when it changes
them; the values themselves are bucket options on every storage node, replicated like
versioning (gateway/versions.py).

Known caveats: a policy has no Condition; Principal names access keys (or ``*``), not IAM ARNs;
another gateway's change of a policy is seen here within ``TTL_S``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nearfaas.auth.policy import Policy, PolicyError
from nearfaas.s3.actions import CREATE_BUCKET, resource_arn
from nearfaas.s3.bucket_policy_api import MAX_POLICY_BODY, OWNER_OPTION, POLICY_OPTION
from nearfaas.s3.errors import S3Error
TTL_S = 5.0
UNKNOWN = object()  # a bucket the cache was not asked to prepare: its authorizer refuses (fail closed)


@dataclass(frozen=True)
class BucketAccess:
    """A bucket's owner (an access key; None: the admin's) and its policy, if any."""

    owner: str | None
    policy: Policy | None

    @classmethod
    def from_options(cls, bucket: str, options: dict) -> BucketAccess:
        text = options.get(POLICY_OPTION)
        try:
            policy = Policy.parse(text, "bucket policy", bucket=bucket) if text else None
        except PolicyError:
            policy = Policy(())  # stored before a stricter parser: grants nothing rather than everything
        return cls(options.get(OWNER_OPTION) or None, policy)


def allowed(own: Policy, account: str, access: BucketAccess | None, action: str, bucket: str | None, key: str | None) -> bool:
    """May key ``account`` (its own policy ``own``) do ``action`` on bucket/key? (See above.)"""
    resource = resource_arn(bucket, key)
    mine = own.decide(action, resource)
    if bucket is None or access is None or action == CREATE_BUCKET:
        # the service (ListAllMyBuckets), a bucket that does not exist, or making one (another
        # key's name is BucketAlreadyExists, not a policy question: s3/bucket_policy_api.py)
        return mine == "Allow"
    theirs = access.policy.decide(action, resource, principal=account) if access.policy is not None else None
    if "Deny" in (mine, theirs):
        return False
    if access.owner in (None, account):
        return "Allow" in (mine, theirs)
    return mine == "Allow" and theirs == "Allow"


def validate(bucket: str, text: bytes) -> str:
    """A PutBucketPolicy body as the text to store; ValueError naming the fix when it is unusable."""
    if len(text) > MAX_POLICY_BODY:
        raise ValueError(f"the policy is {len(text)} bytes; a bucket policy may be at most {MAX_POLICY_BODY}")
    try:
        decoded = text.decode()
    except UnicodeDecodeError:
        raise ValueError("the policy must be UTF-8 JSON") from None
    Policy.parse(decoded, "Policy", bucket=bucket)  # PolicyError (a ValueError) names the statement and field
    return decoded


class BucketAccessCache:
    """Each bucket's BucketAccess, filled by ``prepare`` (``head`` is the backend's HEAD bucket)
    and read by the keys' authorizers, which cannot wait for a HEAD themselves."""

    def __init__(self, head, ttl_s: float = TTL_S):
        self._head, self.ttl_s = head, ttl_s
        self._entries: dict[str, tuple[float, BucketAccess | None]] = {}

    async def prepare(self, bucket: str) -> BucketAccess | None:
        found = self._entries.get(bucket)
        if found is not None and time.monotonic() - found[0] < self.ttl_s:
            return found[1]
        try:
            info = await self._head(bucket)
        except S3Error as exc:  # NoSuchBucket: no owner to consult (the request answers it); others: fail
            if exc.code != "NoSuchBucket":
                raise
            self._entries[bucket] = (time.monotonic(), None)
            return None
        return self.learn(bucket, info.options)

    def learn(self, bucket: str, options: dict) -> BucketAccess:
        access = BucketAccess.from_options(bucket, options)
        self._entries[bucket] = (time.monotonic(), access)
        return access

    @staticmethod
    def validate(bucket: str, body: bytes) -> str:
        return validate(bucket, body)

    @staticmethod
    def is_public(bucket: str, text: str) -> bool:
        return BucketAccess.from_options(bucket, {POLICY_OPTION: text}).policy.is_public

    def get(self, bucket: str):
        """The bucket's BucketAccess, None when it does not exist, UNKNOWN when never prepared."""
        found = self._entries.get(bucket)
        return found[1] if found is not None else UNKNOWN

    def authorizer(self, own: Policy, account: str):
        """A Principal's authorizer for key ``account`` with its own policy ``own``."""
        def authorize(action: str, bucket: str | None, key: str | None) -> bool:
            access = self.get(bucket) if bucket is not None else None
            return access is not UNKNOWN and allowed(own, account, access, action, bucket, key)

        return authorize

    def forget(self, bucket: str) -> None:
        """The bucket changed (made, deleted, a new policy): the next ``prepare`` asks again. The
        last value stays readable meanwhile: dropping it made a concurrent request, prepared a
        moment before, read UNKNOWN and be refused (a second key's CreateBucket racing the first
        got AccessDenied instead of 409)."""
        found = self._entries.get(bucket)
        if found is not None:
            self._entries[bucket] = (float("-inf"), found[1])
