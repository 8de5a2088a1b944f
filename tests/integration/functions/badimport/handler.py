import module_that_does_not_exist  # noqa: F401  the cold start must fail with this name


def handle(event, context):
    return "unreachable"
