"""Clients for a running cluster: a boto3 S3 client configured for the gateway."""

from __future__ import annotations

from pathlib import Path


def s3_client(gateway_url: str, state_dir: Path | None = None, access_key: str | None = None, secret_key: str | None = None):
    """A boto3 S3 client for the cluster. Keys come from the cluster's layout when it set any;
    a cluster in local mode accepts any (boto3 insists on having some to sign with)."""
    import boto3
    from botocore.config import Config

    if access_key is None and state_dir is not None:
        from nearfaas.cluster.launcher import read_layout

        auth = (read_layout(Path(state_dir)) or {}).get("auth")
        if auth:
            access_key, secret_key = auth["access_key"], auth["secret_key"]
    return boto3.client(
        "s3",
        endpoint_url=gateway_url,
        aws_access_key_id=access_key or "nearfaas",
        aws_secret_access_key=secret_key or "nearfaas",
        region_name="us-east-1",
        # s3v4 everywhere, presigned URLs and POST forms included (boto3 presigns POSTs with SigV2 otherwise).
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2, "mode": "standard"}, signature_version="s3v4"),
    )


def gateway_session(state_dir: Path | None = None, layout: dict | None = None):
    """A requests.Session for the gateway's OpenFaaS API, carrying the cluster admin's
    credentials (HTTP basic auth, as faas-cli sends them) when the cluster requires them."""
    import requests

    from nearfaas.cluster.launcher import admin_headers, read_layout

    session = requests.Session()
    if layout is None and state_dir is not None:
        layout = read_layout(Path(state_dir))
    session.headers.update(admin_headers(layout or {}))
    return session


def query(gateway_url: str, sql: str | None, source: str, state_dir: Path | None = None, timeout: float = 300.0,
          substrait: bytes | None = None):
    """Run ``sql`` (or ``substrait``, a serialized Substrait Plan) over the tabular objects under
    ``source`` (s3://bucket/prefix) through the gateway's POST /system/query; returns a
    pyarrow.Table. A refused query raises ValueError with the gateway's message (which names the
    field or the object at fault)."""
    import base64

    import pyarrow as pa

    session = gateway_session(state_dir)
    body = {"sql": sql} if substrait is None else {"substrait": base64.b64encode(substrait).decode()}
    resp = session.post(f"{gateway_url.rstrip('/')}/system/query", json={**body, "source": source, "format": "arrow"},
                        timeout=timeout)
    if resp.status_code != 200:
        raise ValueError(f"query refused ({resp.status_code}): {resp.text.strip()}")
    return pa.ipc.open_stream(resp.content).read_all()
