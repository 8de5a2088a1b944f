"""`nearfaas models …`: the model zoo's own command line (nearfaas.models.__main__), passed through.

    nearfaas models list
    nearfaas models build resnet50 --size full
"""

from __future__ import annotations

import sys

import click


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def models(args):
    """The model zoo: `models list`, `models build KEY --size full`, `models bench KEY --size full`.

    Seeded random-weight ONNX builds of Table 1's models (no downloads), cached under
    $NEARFAAS_MODEL_CACHE or ~/.cache/nearfaas/models; `nearfaas models --help` for the options."""
    from nearfaas.models.__main__ import main as models_main

    sys.exit(models_main(list(args) or ["--help"]))
