import nearfaas_testpkg  # installed from requirements.txt into a cached per-function environment


def handle(event, context):
    return nearfaas_testpkg.answer()
