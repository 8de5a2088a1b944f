def handle(event, context):
    """The secret the body names, read where OpenFaaS mounts secrets (a fresh open per call)."""
    name = event.body.decode().strip()
    with open(f"/var/openfaas/secrets/{name}") as f:
        return f.read()
