"""The ``store`` fixture shared by the object store's test modules: an ObjectStore on a fresh
directory with one bucket, "bkt", and a 5-byte minimum part size so multipart tests stay small.
A test module takes it with ``from store_fixtures import *``."""

from __future__ import annotations

import pytest

from nearfaas.node.objectstore import ObjectStore

__all__ = ["store"]


@pytest.fixture
def store(tmp_path):
    s = ObjectStore(tmp_path / "node", min_part_size=5)
    s.create_bucket("bkt")
    yield s
    s.close()
