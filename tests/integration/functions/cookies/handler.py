def handle(event, context):
    """Two cookies at once: a header whose value is a list is sent once per item."""
    return {"statusCode": 200, "body": "cookies",
            "headers": {"Set-Cookie": ["session=abc; Path=/", "theme=dark; Path=/"], "Content-Type": "text/plain"}}
