"""Regenerate the golden files under tests/golden/ (the only command that writes them).

The tests compare against these files and fail on any mismatch; they never rewrite them. After
an intended change to the model (or to a measured input it reads), run this, then review the
diff (``git diff tests/golden``) before committing it:

    .venv/bin/python tests/golden/regenerate.py                 # every table (make golden)
    .venv/bin/python tests/golden/regenerate.py evaluate        # only the named tables
    .venv/bin/python tests/golden/regenerate.py --check         # write nothing; exit 1 if a table moved
    .venv/bin/python tests/golden/regenerate.py --out /tmp/g    # write elsewhere (to compare by hand)

For each table it prints how many numbers moved against the file it replaces.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))  # twin_golden lives beside its tests

import twin_golden as golden


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"tables to regenerate (default: all of {', '.join(golden.TABLES)})")
    ap.add_argument("--out", type=Path, default=None, help=f"folder to write into (default {golden.GOLDEN_DIR})")
    ap.add_argument("--check", action="store_true", help="write nothing; list what moved and exit 1 if anything did")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in golden.TABLES]
    if unknown:
        ap.error(f"unknown table(s) {', '.join(unknown)}; choose from {', '.join(golden.TABLES)}")
    folder = golden.GOLDEN_DIR if args.out is None else args.out
    moved_any = False
    for name in args.names or list(golden.TABLES):
        table = golden.TABLES[name]()
        old = folder / f"{name}.json"
        if old.exists():
            moved = golden.diff(table, json.loads(old.read_text()))
            what = f"{len(moved)} number(s) moved" if moved else "unchanged"
        else:
            moved, what = ["(no file)"], "new file"
        moved_any |= bool(moved)
        if args.check:
            print(f"{name}: {what}")
            for line in moved[:40]:
                print(f"  {line}")
        else:
            print(f"{name}: {what}; wrote {golden.write(name, table, folder)}")
    return 1 if args.check and moved_any else 0


if __name__ == "__main__":
    sys.exit(main())
