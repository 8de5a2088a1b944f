"""A function with one hot and one cold buffer: a 4 MiB array written on every call, and a
32 MiB one written once when allocated (the memory profiling test's workload)."""

import numpy as np

COLD = np.ones(4 << 20)  # 32 MiB, written once at import


def handle(event, context):
    hot = np.zeros(512 << 10)  # 4 MiB, allocated and written on every call
    for _ in range(40):
        hot += 1.0
    return {"statusCode": 200, "body": f"{hot[0] + COLD[0]:.0f}"}
