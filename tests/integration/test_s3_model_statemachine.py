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
