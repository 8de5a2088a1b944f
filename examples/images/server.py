"""An of-watchdog HTTP-mode function: a long-lived server on upstream_url's port.

GET/POST answer JSON: the body upper-cased, and on request a secret (?secret=NAME, read from
/var/openfaas/secrets), an attempt to write outside the container (?write=PATH), a listing
(?ls=DIR) or the size and SHA-256 of the input object a JSON body names (?object=1, read through
the S3 endpoint in the environment), so tests can see what the function sees."""
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from s3get import summary

PORT = int(urlsplit(os.environ.get("upstream_url", "http://127.0.0.1:5000")).port or 5000)  # noqa: SIM112 - of-watchdog's name


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: without this, a delayed ACK costs 40 ms a call

    def do_GET(self):
        self.answer(b"")

    def do_POST(self):
        self.answer(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def answer(self, body: bytes) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        out = {"method": self.command, "path": url.path, "body": body.decode().upper(), "uid": os.getuid()}
        if "secret" in query:
            try:
                with open(f"/var/openfaas/secrets/{query['secret']}") as f:
                    out["secret"] = f.read()
            except OSError as exc:
                out["secret_error"] = exc.strerror
        if "write" in query:
            try:
                with open(query["write"], "w") as f:
                    f.write("written by a function\n")
                out["written"] = True
            except OSError as exc:
                out["write_error"] = exc.strerror
        if "object" in query:
            try:
                out["object"] = summary(json.loads(body))
            except (OSError, ValueError, KeyError) as exc:
                out["object_error"] = str(exc)
        if "ls" in query:
            out["ls"] = sorted(os.listdir(query["ls"]))
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Set-Cookie", "a=1")
        self.send_header("Set-Cookie", "b=2")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
