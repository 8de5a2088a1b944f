"""Regenerate the applications' committed files.

    python -m nearfaas.apps examples             # rewrite <app>/stack.yml from stack.stack_for
    python -m nearfaas.apps tokenizers [--check] # retrain data/wordpiece.json and data/bpe.json
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["examples"]:
        from .stack import write_examples

        for path in write_examples():
            print(path)
        return 0
    if argv[:1] == ["tokenizers"]:
        from .build_tokenizers import main as build

        return build(argv[1:])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
