"""Prints, as a table, every package whose version differs between two pinned requirement files
(the host lock and a fresh resolution), so drift is named before anyone re-locks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if m := PIN.match(line):
            found[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
    return found


def main(locked_path: str, newest_path: str) -> None:
    locked, newest = pins(Path(locked_path)), pins(Path(newest_path))
    rows = [(n, locked.get(n, "-"), newest.get(n, "-")) for n in sorted(locked.keys() | newest.keys())
            if locked.get(n) != newest.get(n)]
    if not rows:
        print(f"lock-check: the newest versions the ranges allow are the ones {locked_path} pins")
        return
    print(f"lock-check: {len(rows)} package(s) differ from {locked_path} (- = absent)")
    width = max(len(n) for n, _, _ in rows)
    print(f"  {'package':<{width}}  {'locked':<16}  newest")
    for name, old, new in rows:
        print(f"  {name:<{width}}  {old:<16}  {new}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: lock-diff.py LOCK NEWEST")
    main(*sys.argv[1:])
