def handle(event, context):
    return context.secrets["api-key"]
