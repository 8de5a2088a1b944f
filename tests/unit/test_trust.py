"""Units of the trust layer: internal call signatures, function keys, bundles, refused variables."""

from __future__ import annotations

import base64
import io
import os
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nearfaas.auth import function_keys, internal
from nearfaas.spec.bundle import MAX_FILES, BundleError, pack, unpack
from nearfaas.spec.cluster import parse_cluster
from nearfaas.spec.errors import SpecError
from nearfaas.spec.stack import interpreter_variable, parse_stack


# -- internal signatures -------------------------------------------------------------------------

def test_a_signature_verifies_only_for_its_method_path_and_secret():
    header = internal.sign("s3cret", "POST", "/_nearfaas/functions/f/workers", now=1000)[internal.HEADER]
    assert internal.verify("s3cret", "POST", "/_nearfaas/functions/f/workers", header, now=1010) is None
    assert "does not match" in internal.verify("other", "POST", "/_nearfaas/functions/f/workers", header, now=1010)
    assert "does not match" in internal.verify("s3cret", "GET", "/_nearfaas/functions/f/workers", header, now=1010)
    assert "does not match" in internal.verify("s3cret", "POST", "/_nearfaas/functions/g/workers", header, now=1010)


def test_missing_malformed_and_stale_signatures_are_refused():
    assert "missing" in internal.verify("k", "GET", "/_nearfaas/health", None)
    assert "malformed" in internal.verify("k", "GET", "/_nearfaas/health", "t=abc,s=")
    old = internal.sign("k", "GET", "/_nearfaas/health", now=0)[internal.HEADER]
    assert "older" in internal.verify("k", "GET", "/_nearfaas/health", old, now=internal.MAX_SKEW_S + 1)


# -- function keys -------------------------------------------------------------------------------

@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True), st.integers(200_000, 2**31 - 1))
def test_function_keys_name_their_function_and_differ_per_uid(name, uid):
    creds = function_keys.credentials("cluster", name, uid)
    assert function_keys.parse(creds["access_key"]) == (name, uid)
    assert creds["secret_key"] != function_keys.credentials("cluster", name, uid + 1)["secret_key"]
    assert creds["secret_key"] != function_keys.credentials("other-cluster", name, uid)["secret_key"]


def test_other_keys_are_not_function_keys():
    for key in ("AKIDEXAMPLE", "nff.Bad_Name.1", "nff.ok", "nff.ok.x", "nearfaas-internal"):
        assert function_keys.parse(key) is None


# -- bundles -------------------------------------------------------------------------------------

def _tar(*members) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return base64.b64encode(raw.getvalue()).decode()


def test_a_bundle_round_trips_and_the_same_content_reuses_its_folder(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "handler.py").write_text("def handle(event, context):\n    return 'hi'\n")
    (src / "pkg" / "data.txt").write_text("x")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    first, second = unpack(pack(src), tmp_path / "fns", "f"), unpack(pack(src), tmp_path / "fns", "f")
    assert first == second and (first / "handler.py").read_text().startswith("def handle")
    assert (first / "pkg" / "data.txt").read_text() == "x" and not (first / "__pycache__").exists()
    assert oct(first.stat().st_mode & 0o777) == "0o755" and oct((first / "handler.py").stat().st_mode & 0o777) == "0o644"


def test_links_and_escapes_are_refused_both_ways(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "handler.py").write_text("")
    os.symlink("/etc/shadow", src / "shadow")
    with pytest.raises(BundleError, match="link"):
        pack(src)
    escape = tarfile.TarInfo("../../escape.py")
    escape.size = 1
    with pytest.raises(BundleError, match="leaves the handler folder"):
        unpack(_tar((escape, b"x")), tmp_path / "fns", "f")
    absolute = tarfile.TarInfo("/etc/cron.d/x")
    absolute.size = 1
    with pytest.raises(BundleError, match="leaves"):
        unpack(_tar((absolute, b"x")), tmp_path / "fns", "f")
    link = tarfile.TarInfo("handler.py")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(BundleError, match="link or special"):
        unpack(_tar((link, None)), tmp_path / "fns", "f")
    assert not any((tmp_path / "fns").rglob("*.py")), "nothing of a refused bundle is left behind"


def test_junk_bundles_get_a_clear_error(tmp_path):
    for junk, text in ((5, "must be a string"), ("%%%", "not valid base64"), (base64.b64encode(b"no tar").decode(), "readable")):
        with pytest.raises(BundleError, match=text):
            unpack(junk, tmp_path, "f")
    many = [(tarfile.TarInfo(f"d{i}"), None) for i in range(MAX_FILES + 1)]
    for info, _ in many:
        info.type = tarfile.DIRTYPE
    with pytest.raises(BundleError, match="entries"):
        unpack(_tar(*many), tmp_path, "f")


# -- environment and cluster file ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["PYTHONWARNINGS", "PYTHONSTARTUP", "LD_PRELOAD", "BROWSER", "GLIBC_TUNABLES", "NEARFAAS_SECRET_KEY",
                                  "PERL5OPT", "NODE_OPTIONS", "BASH_ENV", "PATH", "pythonpath"])
def test_interpreter_variables_are_refused_with_their_path(tmp_path, name):
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "handler.py").write_text("def handle(e, c):\n    pass\n")
    assert interpreter_variable(name)
    with pytest.raises(SpecError) as err:
        parse_stack({"functions": {"f": {"lang": "python3-http", "handler": "./f", "environment": {name: "x"}}}}, tmp_path)
    assert f"functions.f.environment.{name}" in str(err.value)


def test_ordinary_variables_are_fine():
    assert not any(interpreter_variable(n) for n in ("GREETING", "MODEL_SIZE", "exec_timeout", "APP", "SLEEP"))


def test_auth_and_isolation_switches():
    assert parse_cluster({}).auth.generated and parse_cluster({}).isolation
    assert parse_cluster({"auth": "off"}).auth is None and parse_cluster({"auth": False}).auth is None
    assert parse_cluster({"isolation": "off"}).isolation is False and parse_cluster({"isolation": False}).isolation is False
    with pytest.raises(SpecError, match="isolation: must be on or off"):
        parse_cluster({"isolation": "maybe"})
    with pytest.raises(SpecError, match="auth: must be off, generate, or a mapping"):
        parse_cluster({"auth": 5})
