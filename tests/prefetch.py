"""The suite's slow set-ups, started in the background as soon as the run knows it needs them.

Each is a download or a build that a fixture used to do when its first test came: the engine wheel,
the lint venv (whose vllm is that wheel, so it waits for it), and the cpu-smoke image (the OS base,
the pinned target, the build). They do not depend on each other, so they fetch side by side, and
beside the tests that run before the first one that needs them, instead of one after another.
Each runs once per run; its fixture takes the result, or the error, from here and prints the job's
log, so a failing set-up still fails its tests with its own output.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path

from builder.constants import REPO_ROOT

BASE_REF = "127.0.0.1:5000/qfn-base:bookworm"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


class Prefetch:
    """Named jobs, each run at most once in its own thread, writing its output to ``root/NAME.log``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._jobs: dict[str, Future] = {}
        self._lock = threading.Lock()

    def start(self, name: str) -> Future:
        with self._lock:
            if name not in self._jobs:
                future: Future = Future()
                self._jobs[name] = future
                # A daemon thread: a run stopped early does not wait for a build nobody needs any more
                # (every job is safe to interrupt: each set-up writes its completion mark last).
                threading.Thread(target=self._run, args=(name, future), name=f"prefetch-{name}", daemon=True).start()
            return self._jobs[name]

    def _run(self, name: str, future: Future) -> None:
        with open(self.root / f"{name}.log", "w", buffering=1) as out:
            try:
                future.set_result(JOBS[name](self, out))
            except BaseException as exc:  # handed to the fixture, which raises it in its test
                future.set_exception(exc)

    def wait(self, name: str):
        """The job's result, or its error (started now if it was not yet)."""
        return self.start(name).result()

    def result(self, name: str):
        """wait(), with the job's log printed: a fixture's output, shown with its test's."""
        try:
            return self.wait(name)
        finally:
            print(f"--- {name}, run in the background ({self.root / f'{name}.log'}) ---\n{(self.root / f'{name}.log').read_text()}")

    def start_for(self, fixturenames: Iterable[Iterable[str]]) -> list[str]:
        """Start every job whose fixture one of the selected tests uses; the names started."""
        wanted: set[str] = set()
        for names in fixturenames:
            wanted.update(names)
        started = sorted({job for fixture, job in FIXTURE_JOBS.items() if fixture in wanted})
        for name in started:
            self.start(name)
        return started


def _engine(prefetch: Prefetch, out):
    from builder.patches.engine import fetch_engine

    return fetch_engine(log=lambda m: print(m, file=out), output=out).src_dir


def _lint_venv(prefetch: Prefetch, out):
    from builder.image.lintenv import ensure_lint_venv

    prefetch.wait("engine")  # its wheel is the lock's vllm: fetched once, for both
    return ensure_lint_venv(log=lambda m: print(m, file=out), output=out)


def _base_image(prefetch: Prefetch, out):
    """The debootstrap base (python3 inside); built once per machine, reused afterwards."""
    subprocess.run(["bash", str(REPO_ROOT / "scripts/build-base-image.sh"), "--if-missing", BASE_REF],
                   check=True, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    return BASE_REF


def _cpu_smoke_target(prefetch: Prefetch, out):
    """A copy of targets/cpu-smoke.toml pinned to this machine's base digest (the checkout stays clean)."""
    from builder.image import pin_target

    prefetch.wait("base_image")
    path = prefetch.root / "targets" / "cpu-smoke.toml"
    path.parent.mkdir()
    shutil.copy(REPO_ROOT / "targets/cpu-smoke.toml", path)
    pinned = pin_target(target=str(path))
    assert "@sha256:" in pinned
    return path


def _cpu_smoke_image(prefetch: Prefetch, out):
    from rich.console import Console

    from builder.config import load_target
    from builder.image import build_image

    target = prefetch.wait("cpu_smoke_target")
    return build_image(cfg=load_target(target), ca_bundle=HOST_CA if HOST_CA.is_file() else None,
                       console=Console(file=out, width=200))  # fmt: skip


JOBS: dict[str, Callable] = {
    "engine": _engine,
    "lint_venv": _lint_venv,
    "base_image": _base_image,
    "cpu_smoke_target": _cpu_smoke_target,
    "cpu_smoke_image": _cpu_smoke_image,
}
#: The fixture whose tests need each job (tests/conftest.py; `linted` is tests/image/test_lint.py's).
FIXTURE_JOBS = {
    "engine_src": "engine",
    "linted": "lint_venv",
    "base_image": "base_image",
    "cpu_smoke_target": "cpu_smoke_target",
    "cpu_smoke_image": "cpu_smoke_image",
}
#: The fixtures of the jobs that take minutes cold: their modules run last (tests/conftest.py).
LATE_FIXTURES = frozenset({"linted", "base_image", "cpu_smoke_target", "cpu_smoke_image"})
