"""f1 of the text applications (chatbot, translation): tokenize the uploaded UTF-8 text (a
question, or a page to translate) to 128 token ids with an attention mask, and write them as
.npz to context.output. The work is in nearfaas.apps.text."""

from nearfaas.apps.stages import run_pre, warm_up


def init():
    warm_up("text")  # load the tokenizers at cold start, not on the first call


def handle(event, context):
    return run_pre(event, context, kind="text")
