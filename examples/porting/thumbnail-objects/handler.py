"""The same thumbnailer written against context.objects (a zero-copy mmap when the image is local)."""

import io

from PIL import Image


def handle(event, context):
    ref = context.input
    image = Image.open(io.BytesIO(context.objects.get(ref)))
    image.thumbnail((200, 200))
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=85)
    context.objects.put({"bucket": ref.bucket, "key": ref.key + ".thumb.jpg"}, out.getvalue(), content_type="image/jpeg")
    return {"bucket": ref.bucket, "key": ref.key + ".thumb.jpg", "bytes": out.tell()}
