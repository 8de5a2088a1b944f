"""What the memory shim's test modules share: skip where no C compiler can build the shim, and
the ``built`` fixture (the shim and its probe programs, built once per module). A test module
takes them with ``from memshim_fixtures import *`` (``pytestmark`` included)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from nearfaas.memory import shim

__all__ = ["built", "pytestmark"]

pytestmark = pytest.mark.skipif(not (shim.NATIVE / "build" / shim.LIBRARY).is_file() and not shutil.which("cc"),
                                reason="no C compiler here to build the memory shim (make -C native/memshim)")


@pytest.fixture(scope="module")
def built():
    subprocess.run(["make", "-s", "-C", str(shim.NATIVE)], check=True)
    return shim.NATIVE / "build"
