"""Train the applications' tokenizers on ``corpus.py`` and store them in ``data/``.

    python -m nearfaas.apps tokenizers            # writes data/wordpiece.json, data/bpe.json
    python -m nearfaas.apps tokenizers --check    # exit 1 if the stored files are stale

Training is deterministic, so rebuilding from the same corpus gives the same vocabulary and
merges; run it after editing the corpus and commit the JSON files.
"""

from __future__ import annotations

import argparse
import json
import sys

from .text import TOKENIZER_FILES, TRAINERS


def model_of(tokenizer_json: str) -> dict:
    """The trained part of a tokenizer (vocabulary, merges): what a rebuild must reproduce."""
    return json.loads(tokenizer_json)["model"]


def build(write: bool = True) -> dict[str, bool]:
    """Train every tokenizer; write it when ``write``. Returns, per kind, whether the stored file
    already had the same model."""
    same: dict[str, bool] = {}
    for kind, train in TRAINERS.items():
        fresh = train().to_str(pretty=True)
        path = TOKENIZER_FILES[kind]
        same[kind] = path.is_file() and model_of(path.read_text()) == model_of(fresh)
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(fresh + "\n")
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the stored files")
    args = parser.parse_args(argv)
    same = build(write=not args.check)
    for kind, ok in same.items():
        state = "unchanged" if ok else ("stale" if args.check else "written")
        print(f"{TOKENIZER_FILES[kind]}: {state}")
    return 0 if (all(same.values()) or not args.check) else 1


if __name__ == "__main__":
    sys.exit(main())
