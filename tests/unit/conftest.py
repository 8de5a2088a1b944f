"""Shared fixtures of the unit tests: a node's ObjectStore with bucket "bkt" (the store tests),
and for the S3 front-end tests (test_s3_frontend.py, test_s3_multipart.py) one real front end
over a LocalBackend per test module, a boto3 client for it and a fresh bucket per test."""

from __future__ import annotations

import pytest

from nearfaas.node.objectstore import ObjectStore
from s3_test_server import NAMES, S3TestServer

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = S3TestServer(tmp_path_factory.mktemp("node"), min_part_size=5, max_body=16 << 20).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def s3(server):
    return server.client()


@pytest.fixture
def bucket(s3):
    name = f"bucket-{next(NAMES)}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def store(tmp_path):
    s = ObjectStore(tmp_path / "node", min_part_size=5)
    s.create_bucket("bkt")
    yield s
    s.close()
