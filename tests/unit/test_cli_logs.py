"""`nearfaas logs`: what it prints for each log record, piped (not a terminal)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from nearfaas.cli import functions as F
from nearfaas.cli import main


class _Resp:
    status_code = 200

    def __init__(self, records):
        self.text = "".join(json.dumps(r) + "\n" for r in records)


def test_piped_logs_are_plain_text_and_the_logs_own_brackets_survive(monkeypatch):
    # catches: Rich markup printed literally ("[dim]...[/]") when piped, or a log line's own
    # "[bold]" read as markup and swallowed
    records = [{"name": "f", "instance": "w-1", "timestamp": "2026-11-29T10:00:00Z", "text": "got [bold] and [/] raw"}]
    monkeypatch.setattr(F, "http", lambda state, method, url: _Resp(records))
    monkeypatch.setattr(F, "gateway_url", lambda state, gateway: "http://gw")
    res = CliRunner().invoke(main, ["logs", "f"])
    assert res.exit_code == 0, res.output
    assert res.output == "2026-11-29T10:00:00Z w-1 got [bold] and [/] raw\n"
