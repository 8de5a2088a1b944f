"""node/build.py's cache key: index-only requirements share an env between functions; a file
that may read the bundle (a path, a wheel file, -r, options, a direct URL) keys it to the
function's uid, so no function imports what another function's build wrote."""

from __future__ import annotations

import pytest

from nearfaas.node.build import env_key


@pytest.mark.parametrize("text", ["Pillow==10.4.0\n", "# pinned\nrequests[socks]>=2,<3  # why\nsix ; python_version > '3'\n",
                                  "numpy\n"])
def test_index_only_requirements_share_an_env(tmp_path, text):
    req = tmp_path / "requirements.txt"
    req.write_text(text)
    assert env_key(req, 200001) == env_key(req, 200002)


@pytest.mark.parametrize("line", ["./evil", "evil/", "nearfaas_testpkg-1.0-py3-none-any.whl", "pkg.tar.gz", "-r other.txt",
                                  "-e .", "--find-links wheels", "--index-url http://mirror/simple", "pkg @ file:///srv/pkg",
                                  "file:evil", "/abs/evil"])
def test_requirements_that_may_read_the_bundle_get_an_env_per_uid(tmp_path, line):
    req = tmp_path / "requirements.txt"
    req.write_text(f"Pillow==10.4.0\n{line}\n")
    assert env_key(req, 200001) != env_key(req, 200002)
