def handle(event, context):
    """An OpenFaaS function reads its secret where OpenFaaS mounts it, not through context."""
    with open("/var/openfaas/secrets/api-key") as f:
        return f.read()
