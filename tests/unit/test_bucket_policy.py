"""How a keys-file key's own policy, a bucket's policy and the bucket's owner combine
(auth/bucket_policy.py), exhaustively over the three verdicts each policy can give."""

from __future__ import annotations

import itertools

import pytest

from nearfaas.auth.bucket_policy import UNKNOWN, BucketAccess, BucketAccessCache, allowed, validate
from nearfaas.auth.policy import Policy, PolicyError

RESOURCE = "arn:aws:s3:::b/k"


def _own(verdict: str | None) -> Policy:
    if verdict is None:
        return Policy.parse({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*"}]})
    return Policy.parse({"Statement": [{"Effect": verdict, "Action": "s3:GetObject", "Resource": RESOURCE}]})


def _bucket(verdict: str | None, principal="AKBOB") -> Policy | None:
    if verdict is None:
        return None
    return Policy.parse({"Statement": [{"Effect": verdict, "Principal": {"AWS": principal}, "Action": "s3:GetObject",
                                        "Resource": RESOURCE}]}, bucket="b")


@pytest.mark.parametrize("mine,theirs,owner", list(itertools.product(["Allow", "Deny", None], ["Allow", "Deny", None],
                                                                     ["AKBOB", None, "AKALICE"])))
def test_deny_wins_one_allow_suffices_on_ones_own_and_both_are_needed_on_anothers(mine, theirs, owner):
    got = allowed(_own(mine), "AKBOB", BucketAccess(owner, _bucket(theirs)), "s3:GetObject", "b", "k")
    if "Deny" in (mine, theirs):
        assert got is False
    elif owner in ("AKBOB", None):  # bob's own bucket, or the admin's
        assert got is ("Allow" in (mine, theirs))
    else:
        assert got is (mine == "Allow" and theirs == "Allow")


def test_a_statement_for_another_key_says_nothing_and_star_is_everyone():
    assert allowed(_own("Allow"), "AKBOB", BucketAccess("AKALICE", _bucket("Allow", "AKCAROL")), "s3:GetObject", "b", "k") is False
    assert allowed(_own("Allow"), "AKBOB", BucketAccess("AKALICE", _bucket("Allow", "*")), "s3:GetObject", "b", "k") is True
    assert _bucket("Allow", "*").is_public and not _bucket("Allow").is_public


def test_a_bucket_policy_must_name_principals_and_stay_inside_its_bucket():
    for statement, field in (({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}, "Principal"),
                             ({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bx/*"}, "outside"),
                             ({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "*"}, "outside"),
                             ({"Effect": "Allow", "Principal": {"AWS": 5}, "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b"}, "Principal"),
                             ({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b",
                               "Condition": {}}, "Condition")):
        with pytest.raises(PolicyError, match=field):
            Policy.parse({"Statement": [statement]}, bucket="b")
    with pytest.raises(ValueError, match="at most"):
        validate("b", b"{" + b" " * 30000 + b"}")


def test_an_unprepared_bucket_is_refused_and_a_missing_one_answers_to_the_keys_own_policy():
    import asyncio

    from nearfaas.s3.backend import BucketInfo
    from nearfaas.s3.errors import S3Error

    async def head(name):
        if name == "missing":
            raise S3Error("NoSuchBucket")
        return BucketInfo(name, 0.0, {"owner": "AKALICE"})

    cache = BucketAccessCache(head)
    authorize = cache.authorizer(_own("Allow"), "AKBOB")
    assert cache.get("b") is UNKNOWN and authorize("s3:GetObject", "b", "k") is False  # fail closed
    asyncio.run(cache.prepare("b"))
    asyncio.run(cache.prepare("missing"))
    assert authorize("s3:GetObject", "b", "k") is False  # alice's, no bucket policy
    assert cache.get("missing") is None


def test_a_policy_that_reads_one_way_and_means_another_is_refused():
    """Red team: a statement naming Effect twice ("Deny" ... "Allow") was read as the last, and
    principals that can never match (wildcards, ARNs, bare strings) were stored silently."""
    doubled = '{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*", "Effect": "Allow"}]}'
    with pytest.raises(PolicyError, match="twice"):
        Policy.parse(doubled, bucket="b")
    with pytest.raises(PolicyError, match="twice"):
        Policy.parse('{"Statement": [], "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}')
    for principal in ("NKBOB0123", ["*"], {"AWS": "NK937*"}, {"AWS": "arn:aws:iam::123:user/bob"}, {"AWS": " NKBOB0123"},
                      {"AWS": []}, {"AWS": "*", "Service": "x"}):
        with pytest.raises(PolicyError, match="Principal"):
            Policy.parse({"Statement": [{"Effect": "Deny", "Principal": principal, "Action": "s3:GetObject",
                                         "Resource": "arn:aws:s3:::b/*"}]}, bucket="b")
    ok = Policy.parse({"Statement": [{"Effect": "Deny", "Principal": {"AWS": ["NKBOB0123", "*"]}, "Action": "s3:GetObject",
                                      "Resource": "arn:aws:s3:::b/*"}]}, bucket="b")
    assert ok.decide("s3:GetObject", "arn:aws:s3:::b/k", principal="NKANY") == "Deny"


def test_a_forgotten_bucket_is_asked_again_but_never_reads_unknown_meanwhile():
    """A concurrent request prepared just before another one's change still reads a value."""
    import asyncio

    from nearfaas.s3.backend import BucketInfo

    heads = []

    async def head(name):
        heads.append(name)
        return BucketInfo(name, 0.0, {"owner": "AKALICE"})

    cache = BucketAccessCache(head)
    asyncio.run(cache.prepare("b"))
    cache.forget("b")
    assert cache.get("b") is not UNKNOWN and cache.get("b").owner == "AKALICE"
    asyncio.run(cache.prepare("b"))
    assert heads == ["b", "b"]
