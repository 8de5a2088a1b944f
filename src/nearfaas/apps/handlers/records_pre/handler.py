"""f1 of credit_risk: parse loan applications (JSON lines or CSV, German-credit schema) and
write 200 standardised float32 features per application as .npy to context.output. The work is
in nearfaas.apps.records."""

from nearfaas.apps.stages import run_pre


def handle(event, context):
    return run_pre(event, context, kind="records")
