"""Streaming Top-K (K=16) as a nearfaas Python function: the serverless baseline of
benchmarks/stream_topk.py. The request body is raw little-endian u32 values; the answer is the 16
largest, largest first, as little-endian u32 (the same bytes as the bare-metal baseline)."""

import heapq
import struct

K = 16


def handle(event, context):
    body = event.body or b""
    if len(body) % 4:
        return {"statusCode": 400, "body": f"body length {len(body)} is not a multiple of 4 (u32 values)"}
    values = struct.unpack(f"<{len(body) // 4}I", body)
    top = heapq.nlargest(K, values)
    return struct.pack(f"<{len(top)}I", *top)
