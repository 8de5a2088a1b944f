"""A data-heavy stage: read the input object, transform every byte, write an output of the same
size (like an image filter). Used by the placement benchmark."""

import hashlib


def handle(event, context):
    data = context.objects.get(context.input)
    out = bytes(data).translate(_INVERT)  # touches every byte, as a pre-processing stage would
    ref = {"bucket": context.input.bucket, "key": context.input.key + ".out"}
    context.objects.put(ref, out)
    return {"output": ref, "sha256": hashlib.sha256(out).hexdigest(), "node": context.node}


_INVERT = bytes(255 - b for b in range(256))
