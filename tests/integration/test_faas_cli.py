"""The real faas-cli against a real cluster (issue 42): what OpenFaaS users type, not an imitation
of what it sends. The binary is OpenFaaS's own (openfaas/faas-cli at c8191b71, MIT), unpacked into
the venv by `make setup` from ../shared/tools/faas-cli.xz; without it these tests skip and say so.

faas-cli keeps its login in ~/.openfaas/config.yml: each test module run gets a HOME of its own,
so nothing of the user's is read or written. It cannot reach the internet here (its version
check fails quietly); everything that talks to a gateway works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from test_images import images, runtime  # noqa: F401 - fixtures, shared with the image tests

pytestmark = pytest.mark.integration

FAAS_CLI = shutil.which("faas-cli", path=str(Path(sys.executable).parent)) or shutil.which("faas-cli")


class FaasCli:
    def __init__(self, gateway: str, home: Path):
        self.gateway, self.home = gateway, home

    def __call__(self, *args: str, stdin: str | None = None, ok: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.home), "OPENFAAS_URL": self.gateway, "NO_COLOR": "1"}
        done = subprocess.run([FAAS_CLI, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout,
                              cwd=self.home)
        if ok:
            assert done.returncode == 0, f"faas-cli {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture(scope="module")
def faas(cluster, tmp_path_factory) -> FaasCli:
    """faas-cli logged in to the session cluster as the admin (what `nearfaas credentials` says to run)."""
    if FAAS_CLI is None:
        pytest.skip("faas-cli is not installed: `make setup` unpacks it from ../shared/tools/faas-cli.xz")
    cli = FaasCli(cluster.url, tmp_path_factory.mktemp("faas-home"))
    login = cli("login", "-u", "admin", "--password-stdin", stdin=cluster.layout["auth"]["secret_key"])
    assert "credentials saved for admin" in login.stdout, login.stdout
    return cli


def test_without_a_login_faas_cli_is_refused_and_changes_nothing(cluster, tmp_path):
    if FAAS_CLI is None:
        pytest.skip("faas-cli is not installed: `make setup` unpacks it from ../shared/tools/faas-cli.xz")
    stranger = FaasCli(cluster.url, tmp_path)
    created = stranger("namespace", "create", "intruder", ok=False)
    assert "401" in created.stdout + created.stderr or "nauthorized" in created.stdout + created.stderr, created
    secret = stranger("secret", "create", "intruder", "--from-literal", "x", ok=False)
    assert secret.returncode != 0 or "nauthorized" in secret.stdout + secret.stderr, secret
    assert "intruder" not in cluster.http.get(f"{cluster.url}/system/namespaces", timeout=10).json()
    assert "intruder" not in cluster.http.get(f"{cluster.url}/system/secrets", timeout=10).text


def test_namespaces_are_created_read_updated_and_removed_with_faas_cli(cluster, faas):
    assert "openfaas-fn" in faas("namespace", "list").stdout
    created = faas("namespace", "create", "team-cli", "--label", "team=cli", "--annotation", "owner=ops")
    assert "Namespace Created: team-cli" in created.stdout, created.stdout
    assert "- team-cli" in faas("namespace", "list").stdout
    got = cluster.http.get(f"{cluster.url}/system/namespace/team-cli", timeout=10).json()
    assert got["labels"]["team"] == "cli" and got["annotations"]["owner"] == "ops", got
    assert "Name: team-cli" in faas("namespace", "get", "team-cli").stdout
    faas("namespace", "update", "team-cli", "--label", "team=ops")
    assert cluster.http.get(f"{cluster.url}/system/namespace/team-cli", timeout=10).json()["labels"]["team"] == "ops"
    again = faas("namespace", "create", "team-cli", ok=False)
    assert "409" in again.stdout + again.stderr and "already exists" in again.stdout + again.stderr, again
    bad = faas("namespace", "create", "Team_Bad", ok=False)
    assert "400" in bad.stdout + bad.stderr and "not a namespace name" in bad.stdout + bad.stderr, bad
    # the cluster file's namespaces stay: removing one is refused with where to change it
    kept = faas("namespace", "remove", "openfaas-fn", ok=False)
    assert "409" in kept.stdout + kept.stderr and "cluster file" in kept.stdout + kept.stderr, kept
    faas("namespace", "remove", "team-cli")
    assert "team-cli" not in faas("namespace", "list").stdout
    gone = faas("namespace", "get", "team-cli", ok=False)
    assert "team-cli not found" in gone.stdout + gone.stderr, gone


def test_a_namespace_holding_a_function_or_a_secret_is_not_removed(cluster, faas, images):  # noqa: F811
    faas("namespace", "create", "team-held")
    faas("secret", "create", "held-token", "--from-literal", "s3cr3t", "-n", "team-held")
    faas("deploy", "--image", images["watchdog"], "--name", "held-fn", "--fprocess", "cat", "-n", "team-held")
    try:
        refused = faas("namespace", "remove", "team-held", ok=False)
        text = refused.stdout + refused.stderr
        assert "409" in text and "function held-fn" in text and "secret held-token" in text, text
        call = requests.post(f"{cluster.url}/function/held-fn.team-held", data=b"still here", timeout=60)
        assert call.status_code == 200 and call.text == "still here", call.text
    finally:
        faas("remove", "held-fn", "-n", "team-held")
        faas("secret", "remove", "held-token", "-n", "team-held")
    faas("namespace", "remove", "team-held")
    assert "team-held" not in faas("namespace", "list").stdout


def test_secrets_are_created_listed_updated_and_removed_with_faas_cli(cluster, faas, functions_dir):
    """An update reaches running instances: they are replaced, as a redeploy replaces them."""
    faas("secret", "create", "cli-token", "--from-literal", "first")
    assert "cli-token" in faas("secret", "list").stdout
    assert cluster.deploy("cli-reads-secret", functions_dir / "readsecret", secrets=["cli-token"]).status_code == 202
    try:
        url = f"{cluster.url}/function/cli-reads-secret"
        assert requests.post(url, data=b"cli-token", timeout=60).text == "first"
        faas("secret", "update", "cli-token", "--from-literal", "second")
        assert requests.post(url, data=b"cli-token", timeout=60).text == "second"
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "cli-reads-secret"}, timeout=30)
    faas("secret", "remove", "cli-token")
    assert "cli-token" not in faas("secret", "list").stdout


def test_a_classic_watchdog_image_deployed_from_a_stack_file_runs_its_fprocess(cluster, faas, images):  # noqa: F811
    """The image names no fprocess and its CMD is fwatchdog (functions/alpine style): only the
    stack file's ``fprocess:`` says what runs. Deploy, list, describe, invoke, logs, remove."""
    stack = faas.home / "stack.yml"
    stack.write_text(f"""version: 1.0
provider:
  name: openfaas
  gateway: {cluster.url}
functions:
  cli-shout:
    lang: dockerfile
    image: {images["watchdog"]}
    fprocess: tr a-z A-Z
    labels:
      team: cli
    environment:
      greeting: hello
""")
    deployed = faas("deploy", "-f", str(stack))
    assert "Deployed. 202 Accepted." in deployed.stdout, deployed.stdout
    try:
        answer = faas("invoke", "cli-shout", stdin="hello from faas-cli")
        assert answer.stdout.strip() == "HELLO FROM FAAS-CLI", answer
        assert "cli-shout" in faas("list").stdout
        described = faas("describe", "cli-shout").stdout
        assert "Function Process:   tr a-z A-Z" in described and f"Image:              {images['watchdog']}" in described, described
        status = cluster.http.get(f"{cluster.url}/system/function/cli-shout", timeout=10).json()
        assert status["envProcess"] == "tr a-z A-Z" and "handler" not in status and "lang" not in status, status
        faas("invoke", "cli-shout", stdin="again")
        deadline = time.monotonic() + 30
        while True:  # the node drains the instance's output into its log as it comes
            logs = faas("logs", "cli-shout", "--tail=false", "--output", "json").stdout
            records = [json.loads(line) for line in logs.splitlines() if line.strip()]
            forks = [r for r in records if "Forking fprocess." in r["text"]]
            if len(forks) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(forks) >= 2, logs
        assert len({r["timestamp"] for r in records}) > 1, records  # each line its own time, not the file's
        # A new deployment of the name (another environment) has a log of its own: no lines of the last one's
        stack.write_text(stack.read_text().replace("greeting: hello", "greeting: hi"))
        faas("deploy", "-f", str(stack))
        assert faas("invoke", "cli-shout", stdin="anew").stdout.strip() == "ANEW"
        deadline = time.monotonic() + 30
        while True:
            texts = [json.loads(line)["text"] for line in faas("logs", "cli-shout", "--tail=false", "--output", "json").stdout.splitlines()
                     if line.strip()]
            if any("Wrote 4 Bytes" in t for t in texts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sum("Forking fprocess." in t for t in texts) == 1, texts
        faas("remove", "cli-shout")
        assert "cli-shout" not in faas("list").stdout
        assert requests.post(f"{cluster.url}/function/cli-shout", data=b"x", timeout=30).status_code == 404
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "cli-shout"}, timeout=30)


def test_fprocess_from_the_rest_api_reaches_an_image_that_names_none(cluster, images):  # noqa: F811
    """envProcess alone (no environment fprocess), as faas-cli --fprocess and other clients send it."""
    body = {"service": "rest-fprocess", "image": images["watchdog"], "envProcess": "cat"}
    assert cluster.http.post(f"{cluster.url}/system/functions", json=body, timeout=30).status_code == 202
    try:
        call = requests.post(f"{cluster.url}/function/rest-fprocess", data=b"echoed by cat", timeout=60)
        assert call.status_code == 200 and call.text == "echoed by cat", call.text
    finally:
        cluster.http.delete(f"{cluster.url}/system/functions", json={"functionName": "rest-fprocess"}, timeout=30)
