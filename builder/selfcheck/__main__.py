"""`python -m builder.selfcheck`: the patched engine's checks, its runtime pieces and the launch lint, on CPU.

In a GPU image: `docker run --rm IMAGE qfn-selfcheck`. Exit 0 when everything passed, 1 when a
check or the lint failed (the engine's own message is printed), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from builder.selfcheck.engine import NotPatched, engine_checks, patched_backend
from builder.selfcheck.lint import LintFailed, TargetGpu, lint_launch
from builder.selfcheck.runtime import Missing, runtime_checks

DEFAULT_TARGET_FILE = Path("/opt/qfn/selfcheck/target.json")
DEFAULT_LAUNCH = Path("/opt/qfn/launch/run_qsa_int8kv.sh")
PARTS = ("engine", "runtime", "lint")


def _say(line: str) -> None:
    print(line, flush=True)


def _one_line(message: str) -> str:
    """The engine's message on one FAIL line (pydantic puts the field's name on a line of its own)."""
    return " | ".join(part.strip() for part in message.splitlines() if part.strip())


def run_engine_checks() -> bool:
    _say("== engine checks (the patched QSA backend, CPU) ==")
    try:
        backend = patched_backend()
    except NotPatched as exc:
        _say(f"FAIL patched backend: {exc}")
        return False
    return _run_checks((name, lambda check=check: check(backend)) for name, check in engine_checks())


def run_runtime_checks(arch: str) -> bool:
    _say(f"== runtime pieces (what the engine reaches for on a GPU, {arch}) ==")
    return _run_checks(runtime_checks(arch))


def _run_checks(checks: Iterable[tuple[str, Callable[[], str]]]) -> bool:
    """One ok/FAIL line per check; every check runs. A missing piece says what it is by itself; any
    other failure (an assertion, an engine error) is named by its type."""
    ok = True
    for name, check in checks:
        try:
            _say(f"ok   {name}: {check()}")
        except Exception as exc:
            ok = False
            kind = "" if isinstance(exc, Missing) else f"{type(exc).__name__}: "
            _say(f"FAIL {name}: {kind}{_one_line(str(exc))}")
    return ok


def run_lint(*, launch: Path, gpu: TargetGpu, launch_dirs: tuple[str, ...] = ()) -> bool:
    _say(f"== launch lint ({launch}, as {gpu.name}: {gpu.count}x {gpu.arch}, {gpu.memory_gib:g} GiB) ==")
    try:
        result = lint_launch(launch_script=launch, gpu=gpu, launch_dirs=launch_dirs)
    except LintFailed as exc:
        _say(f"FAIL {exc.stage}: {_one_line(exc.message)}")
        return False
    except Exception:
        _say("FAIL launch lint crashed:\n" + traceback.format_exc())
        return False
    _say("command: " + " ".join(result.argv))
    for stage, detail in result.stages:
        _say(f"ok   {stage}: {detail}")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="qfn-selfcheck", description=__doc__.splitlines()[0])
    ap.add_argument("--target-file", type=Path, default=DEFAULT_TARGET_FILE, help="the image's target facts (JSON)")
    ap.add_argument("--launch", type=Path, default=DEFAULT_LAUNCH, help="the rendered launch script")
    ap.add_argument("--only", choices=list(PARTS), help="run one part")
    args = ap.parse_args(argv)
    if not args.target_file.is_file():
        print(f"qfn-selfcheck: {args.target_file} is missing (not a GPU image of qfn-int8kv?)", file=sys.stderr)
        return 2
    facts = json.loads(args.target_file.read_text())
    gpu = TargetGpu(name=facts["name"], arch=facts["gpu_arch"], count=facts["gpu_count"], memory_gib=facts["gpu_memory_gib"])
    start = time.monotonic()
    ok = True
    if args.only is None:
        # Each part in its own interpreter: the lint must set vLLM's platform before any engine module
        # binds it, and the engine checks import half the engine.
        for part in PARTS:
            cmd = [sys.executable, "-m", "builder.selfcheck", "--only", part, "--target-file", str(args.target_file), "--launch", str(args.launch)]
            ok &= subprocess.run(cmd, check=False).returncode == 0
    elif args.only == "engine":
        ok &= run_engine_checks()
    elif args.only == "runtime":
        ok &= run_runtime_checks(gpu.arch)
    else:
        ok &= run_lint(launch=args.launch, gpu=gpu, launch_dirs=tuple(facts.get("launch_dirs", ())))
    _say(f"== self-check{'' if args.only is None else ' (' + args.only + ')'} {'passed' if ok else 'FAILED'} in {time.monotonic() - start:.0f} s ==")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
