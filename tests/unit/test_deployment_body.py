"""What `nearfaas deploy` sends for a stack function (present.deployment_body)."""

from __future__ import annotations

from pathlib import Path

from nearfaas.present import deployment_body
from nearfaas.spec.stack import parse_stack


def _function(tmp_path: Path, **fields):
    (tmp_path / "fn").mkdir(exist_ok=True)
    (tmp_path / "fn" / "handler.py").write_text("def handle(event, context):\n    return 'x'\n")
    stack = parse_stack({"version": "1.0", "provider": {"name": "openfaas"},
                         "functions": {"fn": {"lang": "python3-http", "handler": "./fn", **fields}}}, tmp_path)
    return stack.functions["fn"]


def test_a_handler_with_an_image_echoes_the_image_and_sends_fprocess_and_requests(tmp_path):
    """Both handler: and image: (as faas-cli stack files have): the code runs, the image is
    echoed in the function's status (it was dropped); fprocess and requests travel too."""
    body = deployment_body(_function(tmp_path, image="ghcr.io/acme/fn:1.2", fprocess="python3 index.py",
                                     requests={"memory": "64Mi"}))
    assert body["image"] == "ghcr.io/acme/fn:1.2" and "bundle" in body
    assert body["envProcess"] == "python3 index.py" and body["requests"] == {"memory": "64Mi"}
    plain = deployment_body(_function(tmp_path))
    assert "image" not in plain and "envProcess" not in plain and "requests" not in plain
