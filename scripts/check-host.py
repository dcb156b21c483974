"""Refuse, before anything is installed, an interpreter or machine the host lock was not resolved for.

`make venv` runs this with the interpreter it is about to use ($(PY)); the supported CPython and
machine are the ones `make lock` resolves for (LOCK_PYTHON, LOCK_PLATFORM), so the check and the
lock cannot disagree. Exit 2 with what was found, what is supported, and the fix.
"""

from __future__ import annotations

import argparse
import platform
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", required=True, help="the lock file, for the message")
    parser.add_argument("--python", required=True, help="the CPython minor version the lock is resolved for, e.g. 3.11")
    parser.add_argument("--platform", required=True, help="the lock's uv platform, e.g. x86_64-manylinux_2_28")
    args = parser.parse_args()
    want_machine = args.platform.split("-", 1)[0]
    found_python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found_machine = platform.machine()
    python_ok = sys.implementation.name == "cpython" and found_python == args.python
    machine_ok = sys.platform == "linux" and found_machine == want_machine
    if python_ok and machine_ok:
        return 0
    problems, fix = [], []
    if not python_ok:
        problems.append(f"{sys.implementation.name} {found_python} ({sys.executable})")
        fix.append(f"install CPython {args.python} and run: PY=python{args.python} make venv")
    if not machine_ok:
        problems.append(f"{sys.platform} {found_machine}")
        fix.append(f"run the builder on a linux {want_machine} host")
    print(
        f"make venv: {args.lock} is resolved for CPython {args.python} on linux {want_machine}; found "
        + " on ".join(problems) + ". Nothing was installed. Fix: " + "; ".join(fix) + ".",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
