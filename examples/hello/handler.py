def handle(event, context):
    return "ok"
