"""f3 of every application: read f2's result, build the notification event, POST it to
WEBHOOK_URL (when set), store it as s3://RESULT_BUCKET/<app>/<call id>.json, and return it."""

from nearfaas.apps.stages import run_notify


def handle(event, context):
    return run_notify(event, context)
