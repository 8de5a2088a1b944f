"""Stage 1 of the asset-damage chain (DSCS-Serverless Table 1): pre-process the camera image.

Touches every byte of the input (as decoding and normalising an image would) and writes a
pre-processed tensor of the same size to ``context.output``. On a storage node that write
stays on the node; the next stage is placed there and reads it back through mmap.
"""

import hashlib


def handle(event, context):
    image = context.objects.get(context.input)
    tensor = bytes(image).translate(_NORMALISE)
    context.objects.put(context.output, tensor)
    return {"bytes": len(tensor), "sha256": hashlib.sha256(tensor).hexdigest()}


_NORMALISE = bytes(255 - b for b in range(256))
