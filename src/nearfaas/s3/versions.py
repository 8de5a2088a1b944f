"""Object versions on the wire between the gateway and the storage nodes.

A version is ``<16 lowercase hex digits>.<origin>``: a hybrid logical clock reading and who
stamped it (replication/version.py makes them). Its string order is the order of the writes.
These are nearfaas's own headers; the protocol layer checks and carries them, nothing more.
"""

from __future__ import annotations

import re

NO_VERSION = ""
# The version of a write, delete or read (request and response), and on a 404 whether the key
# was deleted (a tombstone) rather than never written there.
VERSION_HEADER = "x-nearfaas-version"
DELETED_HEADER = "x-nearfaas-deleted"
# A write's body ends with its version, this many bytes long (stamped when the body has ended).
VERSION_TRAILER_HEADER = "x-nearfaas-version-trailer"
_VERSION = re.compile(r"^[0-9a-f]{16}\.[A-Za-z0-9_-]{1,64}$")


def is_version(text: str) -> bool:
    return bool(_VERSION.match(text))
