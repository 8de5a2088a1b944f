"""A function with one hot and one cold buffer: a 4 MiB array read and written 40 times on
every call, and a 32 MiB one written once when allocated (the memory profiling test's workload).
Both live as long as the worker: the sampler watches blocks that outlive a sampling period."""

import numpy as np

COLD = np.ones(4 << 20)  # 32 MiB, written once at import
HOT = np.zeros(512 << 10)  # 4 MiB, rewritten on every call


def handle(event, context):
    HOT[:] = 0.0
    for _ in range(40):
        HOT[:] += 1.0
    return {"statusCode": 200, "body": f"{HOT[0] + COLD[0]:.0f}"}
