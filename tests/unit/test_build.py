"""node/build.py's cache key: an env belongs to one function's uid, whatever its requirements say
(red team round 2: an index-only env shared between functions was written into by one of them
while it was built, through /proc/<pip>/root, and imported by the other)."""

from __future__ import annotations

import pytest

from nearfaas.node.build import env_key


@pytest.mark.parametrize("text", ["Pillow==10.4.0\n", "# pinned\nrequests[socks]>=2,<3  # why\nsix ; python_version > '3'\n",
                                  "numpy\n", "Pillow==10.4.0\n./evil\n", "nearfaas_testpkg-1.0-py3-none-any.whl\n",
                                  "-r other.txt\n", "--find-links wheels\npkg\n", "pkg @ file:///srv/pkg\n", "evil/\n",
                                  "pkg.tar.gz\n", "-e .\n", "--index-url http://mirror/simple\npkg\n", "file:evil\n", "/abs/evil\n"])
def test_every_env_belongs_to_one_uid(tmp_path, text):
    req = tmp_path / "requirements.txt"
    req.write_text(text)
    assert env_key(req, 200001) != env_key(req, 200002)
    assert env_key(req, 200001) == env_key(req, 200001)  # the same function's next start reuses it


def test_the_key_follows_the_text(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("Pillow==10.4.0\n")
    b.write_text("Pillow==10.3.0\n")
    assert env_key(a, 200001) != env_key(b, 200001)
    assert env_key(a, None) != env_key(b, None) and env_key(a, None) == env_key(a, None)
