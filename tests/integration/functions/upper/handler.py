"""Reads its input object, writes an upper-cased copy as a new object, returns the reference."""


def handle(event, context):
    data = context.objects.get(context.input)
    out = {"bucket": context.input.bucket, "key": context.input.key + ".upper"}
    context.objects.put(out, bytes(data).upper())
    return {"output": out, "node": context.node}
