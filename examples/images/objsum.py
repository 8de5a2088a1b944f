"""A classic-watchdog function that reads its input object: the body names it
(``{"input": {"bucket": ..., "key": ...}}``, the path x-nearfaas.inputs gives the gateway), the
object comes through the S3 endpoint in the environment; the answer is its size and SHA-256 and,
with ?secret=NAME, that secret from /var/openfaas/secrets."""
import json
import os
import sys
from urllib.parse import parse_qs

from s3get import summary

out = summary(json.loads(sys.stdin.read()))
query = parse_qs(os.environ.get("Http_Query", ""))  # noqa: SIM112 - the classic watchdog's own names
if "secret" in query:
    with open(f"/var/openfaas/secrets/{query['secret'][0]}") as f:
        out["secret"] = f.read()
sys.stdout.write(json.dumps(out))
