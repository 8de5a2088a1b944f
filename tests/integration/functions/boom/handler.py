def handle(event, context):
    raise ZeroDivisionError("the handler divided by zero on purpose")
