"""f1 of the image applications (asset_damage, ppe_detection, clinical_analysis,
content_moderation, remote_sensing): decode the uploaded JPEG/PNG, resize, normalise, and write
the model's float32 NCHW tensor as .npy to context.output. APP and INPUT_SHAPE come from the
environment; the work is in nearfaas.apps.preprocess."""

from nearfaas.apps.stages import run_pre


def handle(event, context):
    return run_pre(event, context, kind="image")
