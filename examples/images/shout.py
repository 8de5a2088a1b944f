"""A classic-watchdog Python function: stdin upper-cased, an Http_* variable, or ?alloc=MB of memory."""
import os
import sys
from urllib.parse import parse_qs

query = parse_qs(os.environ.get("Http_Query", ""))  # noqa: SIM112 - the classic watchdog's own names
if "alloc" in query:
    hog = bytearray(int(query["alloc"][0]) << 20)  # touched: counted against limits.memory
    print(f"allocated {len(hog) >> 20} MiB")
    sys.exit(0)
sys.stdout.write(sys.stdin.read().upper())
method, content_type = os.environ.get("Http_Method"), os.environ.get("Http_Content_Type")  # noqa: SIM112
sys.stdout.write(f"\nmethod={method} content_type={content_type}\n")
