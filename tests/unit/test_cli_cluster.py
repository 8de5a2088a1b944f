"""`nearfaas up` and `nearfaas status` say, every time, what the cluster file turned off
(`isolation: off`: functions run as root; `auth: off`: anyone may deploy). The cluster itself
is stubbed (launcher.up/status): what is checked is what the CLI prints for a layout."""

from __future__ import annotations

import json

from click.testing import CliRunner

from nearfaas.cli import main
from nearfaas.cluster import launcher

ISOLATION = "warning: isolation is off (`isolation: off`): functions run as root"
AUTH = "warning: auth is off (`auth: off`)"


def _layout(isolation: bool, auth: dict | None) -> dict:
    return {"isolation": isolation, "auth": auth, "nodes": [], "gateway_url": "http://127.0.0.1:9", "processes": []}


def _up(tmp_path, monkeypatch, lines: str):
    config = tmp_path / "cluster.yml"
    config.write_text(lines)
    started = {}

    def fake_up(spec, state_dir, on_step=None, ray_address=None):
        started["layout"] = _layout(spec.isolation, None if spec.auth is None else {"access_key": "AK"})
        return started["layout"]

    monkeypatch.setattr(launcher, "up", fake_up)
    result = CliRunner().invoke(main, ["up", "-c", str(config), "--state", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    return result, started["layout"]


def test_up_with_isolation_off_warns(tmp_path, monkeypatch):
    result, layout = _up(tmp_path, monkeypatch, "isolation: off\nauth: off\n")
    assert layout["isolation"] is False
    assert ISOLATION in result.stderr and AUTH in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "http://127.0.0.1:9"  # the URL stays stdout's last line

    result, _ = _up(tmp_path, monkeypatch, "isolation: on\n")
    assert "warning" not in result.stderr


def test_status_repeats_the_warnings(tmp_path, monkeypatch):
    layout = _layout(False, None)
    monkeypatch.setattr(launcher, "read_layout", lambda state: layout)
    monkeypatch.setattr(launcher, "status", lambda state: {"running": True, "state_dir": str(state), "gateway_url": "http://x",
                                                           "gateway": {"healthy": True}, "nodes": [], "functions": []})
    result = CliRunner().invoke(main, ["status", "--state", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert ISOLATION in result.stderr and AUTH in result.stderr
    result = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    warnings = json.loads(result.stdout)["warnings"]
    assert [w.split(":")[0] for w in warnings] == ["warning", "warning"] and ISOLATION in warnings[1]

    layout.update(isolation=True, auth={"access_key": "AK"})
    result = CliRunner().invoke(main, ["status", "--json", "--state", str(tmp_path)])
    assert json.loads(result.stdout)["warnings"] == [] and "warning" not in result.stderr


def test_up_warns_when_the_admin_key_is_in_a_file_others_may_read(tmp_path, monkeypatch):
    # Red team round 6: the cluster file (0644) held the admin's secret key; any local user could
    # have taken the cluster with it. `up` says so, naming the file and the fix.
    lines = 'auth: {access_key: AKTESTADMIN000000001, secret_key: "0123456789abcdef0123456789abcdef01234567"}\n'
    config = tmp_path / "cluster.yml"
    config.write_text(lines)
    config.chmod(0o644)
    result, _ = _up(tmp_path, monkeypatch, lines)
    assert f"{config} holds the admin's auth.secret_key" in result.stderr and f"chmod 600 {config}" in result.stderr
    config.chmod(0o600)
    result = CliRunner().invoke(main, ["up", "-c", str(config), "--state", str(tmp_path / "state")])
    assert "auth.secret_key" not in result.stderr
