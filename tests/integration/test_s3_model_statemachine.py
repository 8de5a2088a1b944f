"""Random sequences of PUT / conditional PUT / copy / DELETE / conditional DELETE / multipart / GET
against the cluster and against an in-memory model of S3's semantics: no difference allowed
(issue 22). Hypothesis shrinks any difference to the shortest sequence that shows it."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

pytestmark = pytest.mark.integration

KEYS = st.sampled_from(["k1", "k2", "dir/k3"])
DATA = st.binary(min_size=0, max_size=64)


def _status(call, *args, **kwargs) -> tuple[int, dict | None]:
    try:
        return 200, call(*args, **kwargs)
    except ClientError as exc:
        return exc.response["ResponseMetadata"]["HTTPStatusCode"], None


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture(scope="module")
def s3(cluster):
    return cluster.s3()


def test_the_cluster_behaves_like_the_s3_model(s3):
    class S3Model(RuleBasedStateMachine):
        @initialize()
        def bucket(self):
            self.bucket = f"model-{uuid.uuid4().hex[:12]}"
            s3.create_bucket(Bucket=self.bucket)
            self.objects: dict[str, tuple[bytes, str]] = {}  # key -> (bytes, etag)

        def _etag(self, key: str) -> str | None:
            return self.objects[key][1] if key in self.objects else None

        @rule(key=KEYS, data=DATA)
        def put(self, key, data):
            status, _ = _status(s3.put_object, Bucket=self.bucket, Key=key, Body=data)
            assert status == 200
            self.objects[key] = (data, _md5(data))

        @rule(key=KEYS, data=DATA)
        def put_if_absent(self, key, data):
            status, _ = _status(s3.put_object, Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            expected = 412 if key in self.objects else 200
            assert status == expected, (status, expected)
            if status == 200:
                self.objects[key] = (data, _md5(data))

        @rule(key=KEYS, data=DATA, stale=st.booleans())
        def put_if_match(self, key, data, stale):
            etag = "0" * 32 if stale or key not in self.objects else self._etag(key)
            status, _ = _status(s3.put_object, Bucket=self.bucket, Key=key, Body=data, IfMatch=f'"{etag}"')
            expected = 404 if key not in self.objects else (412 if stale and etag != self._etag(key) else 200)
            assert status == expected, (status, expected)
            if status == 200:
                self.objects[key] = (data, _md5(data))

        @rule(src=KEYS, dst=KEYS)
        def copy(self, src, dst):
            status, _ = _status(s3.copy_object, Bucket=self.bucket, Key=dst, CopySource={"Bucket": self.bucket, "Key": src},
                                MetadataDirective="REPLACE")
            expected = 200 if src in self.objects else 404
            assert status == expected, (status, expected)
            if status == 200:
                data = self.objects[src][0]
                self.objects[dst] = (data, _md5(data))

        @rule(key=KEYS)
        def delete(self, key):
            status, _ = _status(s3.delete_object, Bucket=self.bucket, Key=key)
            assert status in (200, 204)
            self.objects.pop(key, None)

        @rule(key=KEYS, stale=st.booleans())
        def delete_if_match(self, key, stale):
            etag = "0" * 32 if stale or key not in self.objects else self._etag(key)
            status, _ = _status(s3.delete_object, Bucket=self.bucket, Key=key, IfMatch=f'"{etag}"')
            expected = 404 if key not in self.objects else (412 if etag != self._etag(key) else 204)
            assert status in ((expected,) if expected != 204 else (200, 204)), (status, expected)
            if expected == 204:
                self.objects.pop(key)

        @rule(key=KEYS, parts=st.lists(st.binary(min_size=1, max_size=16), min_size=1, max_size=3))
        def multipart(self, key, parts):
            upload = s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
            done = []
            for number, data in enumerate(parts, 1):
                etag = s3.upload_part(Bucket=self.bucket, Key=key, UploadId=upload, PartNumber=number, Body=data)["ETag"]
                done.append({"PartNumber": number, "ETag": etag})
            status, _ = _status(s3.complete_multipart_upload, Bucket=self.bucket, Key=key, UploadId=upload,
                                MultipartUpload={"Parts": done})
            if len(parts) > 1:  # S3: every part but the last is at least 5 MiB, else EntityTooSmall
                assert status == 400
                s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload)
                return
            assert status == 200
            etag = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f"-{len(parts)}"
            self.objects[key] = (b"".join(parts), etag)

        @rule(key=KEYS)
        def get(self, key):
            status, got = _status(s3.get_object, Bucket=self.bucket, Key=key)
            if key not in self.objects:
                assert status == 404
                return
            assert status == 200
            assert got["Body"].read() == self.objects[key][0]
            assert got["ETag"].strip('"') == self.objects[key][1]

        @invariant()
        def listing_matches(self):
            if not hasattr(self, "objects"):
                return
            listed = s3.list_objects_v2(Bucket=self.bucket).get("Contents", [])
            assert {o["Key"]: (o["Size"], o["ETag"].strip('"')) for o in listed} == {
                k: (len(v[0]), v[1]) for k, v in self.objects.items()}

    S3Model.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None,
                                         suppress_health_check=list(HealthCheck))
    S3Model.TestCase().runTest()


def test_a_versioned_bucket_behaves_like_the_s3_model(s3):
    """The same, over a bucket with versioning Enabled: PUT / DELETE (a delete marker) / DELETE of one version /
    GET of the latest or of one version / a copy from one version / ListObjectVersions, against a model of each
    key's versions (S3's documented semantics: a GET of a delete marker's id is 405, a copy from one is 400, a
    version that is gone is 404 NoSuchVersion, and deleting it again is no error)."""
    from hypothesis.stateful import precondition

    marker = None  # the model's delete marker: a version with no bytes

    class VersionedModel(RuleBasedStateMachine):
        @initialize()
        def bucket(self):
            self.bucket = f"vmodel-{uuid.uuid4().hex[:12]}"
            s3.create_bucket(Bucket=self.bucket)
            s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
            self.versions: dict[str, list[tuple[str, bytes | None]]] = {}  # key -> [(version id, bytes or marker)], newest last
            self.history: list[tuple[str, str]] = []  # every (key, version id) ever made, gone or not

        def _find(self, key: str, vid: str) -> bytes | None | str:
            """The version's bytes, ``marker``, or "gone"."""
            return next((data for v, data in self.versions.get(key, []) if v == vid), "gone")

        def _add(self, key: str, vid: str, data: bytes | None) -> None:
            assert vid and vid != "null" and (key, vid) not in self.history, vid
            self.versions.setdefault(key, []).append((vid, data))
            self.history.append((key, vid))

        @rule(key=KEYS, data=DATA)
        def put(self, key, data):
            self._add(key, s3.put_object(Bucket=self.bucket, Key=key, Body=data)["VersionId"], data)

        @rule(key=KEYS)
        def delete(self, key):
            got = s3.delete_object(Bucket=self.bucket, Key=key)
            assert got.get("DeleteMarker") is True
            self._add(key, got["VersionId"], marker)

        @precondition(lambda self: self.history)
        @rule(data=st.data())
        def delete_version(self, data):
            key, vid = data.draw(st.sampled_from(self.history))
            status, got = _status(s3.delete_object, Bucket=self.bucket, Key=key, VersionId=vid)
            assert status == 204 or (status == 200 and got["ResponseMetadata"]["HTTPStatusCode"] == 204), status
            was = self._find(key, vid)
            if was == "gone":
                return
            assert got["VersionId"] == vid and bool(got.get("DeleteMarker")) == (was is marker), got
            self.versions[key] = [(v, d) for v, d in self.versions[key] if v != vid]

        @rule(key=KEYS)
        def get(self, key):
            try:
                got = s3.get_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                latest = self.versions.get(key, [])[-1:]
                assert (exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]) == (404, "NoSuchKey")
                assert not latest or latest[0][1] is marker, latest
                headers = exc.response["ResponseMetadata"]["HTTPHeaders"]
                assert (headers.get("x-amz-delete-marker") == "true") == bool(latest), headers
                return
            vid, expected = self.versions[key][-1]
            assert expected is not marker and got["VersionId"] == vid and got["Body"].read() == expected

        @precondition(lambda self: self.history)
        @rule(data=st.data())
        def get_version(self, data):
            key, vid = data.draw(st.sampled_from(self.history))
            expected = self._find(key, vid)
            try:
                got = s3.get_object(Bucket=self.bucket, Key=key, VersionId=vid)
            except ClientError as exc:
                found = (exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"])
                assert found == ((405, "MethodNotAllowed") if expected is marker else (404, "NoSuchVersion")), (found, expected)
                return
            assert expected not in (marker, "gone") and got["VersionId"] == vid and got["Body"].read() == expected

        @precondition(lambda self: self.history)
        @rule(data=st.data(), dst=KEYS)
        def copy_version(self, data, dst):
            key, vid = data.draw(st.sampled_from(self.history))
            expected = self._find(key, vid)
            status, got = _status(s3.copy_object, Bucket=self.bucket, Key=dst, MetadataDirective="REPLACE",
                                  CopySource={"Bucket": self.bucket, "Key": key, "VersionId": vid})
            assert status == (400 if expected is marker else 404 if expected == "gone" else 200), (status, expected)
            if status == 200:
                assert got["CopySourceVersionId"] == vid
                self._add(dst, got["VersionId"], expected)

        @invariant()
        def versions_listing_matches(self):
            if not hasattr(self, "versions"):
                return
            listed = s3.list_object_versions(Bucket=self.bucket)
            assert not listed["IsTruncated"]
            got_versions: dict[str, list] = {}
            got_markers: dict[str, list] = {}
            latest = set()
            for v in listed.get("Versions", []):
                got_versions.setdefault(v["Key"], []).append((v["VersionId"], v["Size"], v["ETag"].strip('"')))
                latest |= {(v["Key"], v["VersionId"])} if v["IsLatest"] else set()
            for m in listed.get("DeleteMarkers", []):
                got_markers.setdefault(m["Key"], []).append(m["VersionId"])
                latest |= {(m["Key"], m["VersionId"])} if m["IsLatest"] else set()
            # Newest first within a key; exactly one latest version (or marker) per key that has any.
            assert got_versions == {k: [(v, len(d), _md5(d)) for v, d in reversed(vs) if d is not marker]
                                    for k, vs in self.versions.items() if any(d is not marker for _, d in vs)}
            assert got_markers == {k: [v for v, d in reversed(vs) if d is marker]
                                   for k, vs in self.versions.items() if any(d is marker for _, d in vs)}
            assert latest == {(k, vs[-1][0]) for k, vs in self.versions.items() if vs}

    VersionedModel.TestCase.settings = settings(max_examples=25, stateful_step_count=12, deadline=None,
                                                suppress_health_check=list(HealthCheck))
    VersionedModel.TestCase().runTest()
