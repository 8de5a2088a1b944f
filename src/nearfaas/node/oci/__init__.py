"""OpenFaaS functions that ship only an ``image:``, run without Docker (issue 23, docs/images.md).

An image function is a container made by an OCI runtime from Debian (crun, else runc) out of an
image read from disk (an OCI layout, an OCI or docker archive) or a registry when one answers.
A small host process (runtime/image_host.py) stands in for the Python worker: it speaks the same worker
contract to the gateway (ready pipe, loopback port, call token) and runs each call in the
container, the classic watchdog way (``fprocess`` per call, body on stdin, ``Http_*`` variables)
or the of-watchdog HTTP way (a long-lived server in the container, proxied).

Modules: tools.py finds and probes the runtime and the image tools (fail closed, naming what is
missing); images.py imports and unpacks images into a cache shared by every instance; bundle.py
writes one instance's runtime config; runtime/image_host.py is the per-instance process; launch.py is what
node/pool.py calls.
"""

from __future__ import annotations


def is_image_function(spec: dict) -> bool:
    """Whether ``spec`` is an image-only function (spec/stack.py set its ``image_source``)."""
    return bool(spec.get("image_source"))
