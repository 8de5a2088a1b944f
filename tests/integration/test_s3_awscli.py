"""aws-cli (v1, installed by `make setup` into .venv-awscli) against the local cluster: the flows
users run every day (issue 22). `aws s3 mv` and bucket-to-bucket `aws s3 cp` are server-side
copies (CopyObject; UploadPartCopy above the CLI's 8 MiB multipart threshold)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
AWS = Path(__file__).resolve().parents[2] / ".venv-awscli" / "bin" / "aws"


@pytest.fixture(scope="module")
def aws(cluster, tmp_path_factory):
    assert AWS.exists(), f"{AWS} is missing: run `make setup` (it installs aws-cli for these tests)"
    access, secret = cluster.keys(cluster.url)
    config = tmp_path_factory.mktemp("awscli") / "config"
    config.write_text("[default]\nregion = us-east-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret, "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(config.with_name("none")), "AWS_EC2_METADATA_DISABLED": "true"}

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(AWS), "--endpoint-url", cluster.url, *args], env=env, capture_output=True, text=True,
                              timeout=120)
        if check:
            assert done.returncode == 0, (args, done.stdout[-500:], done.stderr[-1500:])
        return done

    s3 = cluster.s3()
    for bucket in ("cli-a", "cli-b"):
        s3.create_bucket(Bucket=bucket)
    return run


def test_aws_s3_cp_bucket_to_bucket_and_mv(aws, cluster, tmp_path):
    s3 = cluster.s3()
    small, big = os.urandom(1000), os.urandom(12 * 1024 * 1024)  # big: the CLI copies it in parts (UploadPartCopy)
    s3.put_object(Bucket="cli-a", Key="small.bin", Body=small, Metadata={"keep": "me"})
    s3.put_object(Bucket="cli-a", Key="big.bin", Body=big)
    aws("s3", "cp", "s3://cli-a/small.bin", "s3://cli-b/small.bin")
    aws("s3", "cp", "s3://cli-a/big.bin", "s3://cli-b/big.bin")
    assert s3.get_object(Bucket="cli-b", Key="small.bin")["Body"].read() == small
    assert s3.head_object(Bucket="cli-b", Key="small.bin")["Metadata"] == {"keep": "me"}
    assert s3.get_object(Bucket="cli-b", Key="big.bin")["Body"].read() == big
    aws("s3", "mv", "s3://cli-b/small.bin", "s3://cli-a/moved.bin")
    assert s3.get_object(Bucket="cli-a", Key="moved.bin")["Body"].read() == small
    assert "small.bin" not in aws("s3", "ls", "s3://cli-b/").stdout
    # A directory's worth, recursively, server side.
    for i in range(3):
        s3.put_object(Bucket="cli-a", Key=f"dir/{i}.txt", Body=str(i).encode())
    aws("s3", "cp", "--recursive", "s3://cli-a/dir/", "s3://cli-b/dir/")
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket="cli-b", Prefix="dir/")["Contents"]) == [f"dir/{i}.txt" for i in range(3)]


def test_aws_s3_sync_and_rm_round_trip(aws, cluster, tmp_path):
    local = tmp_path / "tree"
    (local / "sub").mkdir(parents=True)
    (local / "a.txt").write_text("a")
    (local / "sub" / "b.txt").write_text("b")
    aws("s3", "sync", str(local), "s3://cli-a/tree/")
    back = tmp_path / "back"
    aws("s3", "sync", "s3://cli-a/tree/", str(back))
    assert (back / "sub" / "b.txt").read_text() == "b" and (back / "a.txt").read_text() == "a"
    aws("s3", "rm", "--recursive", "s3://cli-a/tree/")
    assert "Contents" not in cluster.s3().list_objects_v2(Bucket="cli-a", Prefix="tree/")


def test_aws_s3_cp_keeps_the_object_headers_it_is_given(aws, tmp_path):
    import gzip
    import json

    src = tmp_path / "page.html.gz"
    src.write_bytes(gzip.compress(b"<html>hi</html>"))
    aws("s3", "cp", str(src), "s3://cli-a/page.html", "--content-encoding", "gzip", "--cache-control", "max-age=60",
        "--content-disposition", "inline", "--content-type", "text/html", "--metadata", "team=web")
    head = json.loads(aws("s3api", "head-object", "--bucket", "cli-a", "--key", "page.html").stdout)
    assert (head["ContentEncoding"], head["CacheControl"], head["ContentDisposition"], head["ContentType"]) == (
        "gzip", "max-age=60", "inline", "text/html")
    assert head["Metadata"] == {"team": "web"}
    back = tmp_path / "back.gz"
    aws("s3", "cp", "s3://cli-a/page.html", str(back))
    assert back.read_bytes() == src.read_bytes()  # stored as sent, never decoded
    # A server-side copy keeps them too.
    aws("s3", "cp", "s3://cli-a/page.html", "s3://cli-b/page.html")
    copied = json.loads(aws("s3api", "head-object", "--bucket", "cli-b", "--key", "page.html").stdout)
    assert (copied["ContentEncoding"], copied["CacheControl"]) == ("gzip", "max-age=60")


def test_aws_s3api_manages_a_bucket_policy(aws, tmp_path):
    """put-/get-/delete-bucket-policy and get-bucket-policy-status as aws-cli 1.x sends them (they answered 501)."""
    policy = {"Version": "2012-10-17", "Statement": [{"Sid": "everyone-reads", "Effect": "Allow", "Principal": "*",
                                                      "Action": "s3:GetObject", "Resource": "arn:aws:s3:::cli-a/*"}]}
    aws("s3api", "put-bucket-policy", "--bucket", "cli-a", "--policy", json.dumps(policy))
    assert json.loads(json.loads(aws("s3api", "get-bucket-policy", "--bucket", "cli-a").stdout)["Policy"]) == policy
    status = json.loads(aws("s3api", "get-bucket-policy-status", "--bucket", "cli-a").stdout)
    assert status["PolicyStatus"]["IsPublic"] is True
    bad = aws("s3api", "put-bucket-policy", "--bucket", "cli-a", "--policy", '{"Statement": []}', check=False)
    assert bad.returncode != 0 and "MalformedPolicy" in bad.stderr, bad.stderr
    aws("s3api", "delete-bucket-policy", "--bucket", "cli-a")
    gone = aws("s3api", "get-bucket-policy", "--bucket", "cli-a", check=False)
    assert gone.returncode != 0 and "NoSuchBucketPolicy" in gone.stderr, gone.stderr
