"""The launch lint on the host, without building an image: vllm==0.33.0 in a venv without CUDA.

A GPU image runs the lint on its own engine (`qfn-selfcheck`). Building one takes an hour here,
so CI lints the rendered launch command of every GPU target in a venv holding the same engine
wheel and the same hash-locked dependencies (the amd64 engine lock), minus the CUDA stack (torch
comes as the CPU build of the machine's local wheel; the CUDA libraries, Triton and the GPU kernel
packages are left out: the parser and the config builders do not load them). The venv lives in
the cache and is reused while the lock is unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import canonicalize_name

from builder import selfcheck
from builder.config import ReleaseConfig, launch_plan
from builder.constants import CACHE_DIR, ENGINE_UPSTREAM_VERSION, LOCKS_DIR, WHEEL_CACHE_DIR
from builder.errors import LockError, SelfCheckError
from builder.image.lock import read_lock
from builder.render import render_launch

LINT_VENV_DIR = CACHE_DIR / "lint-venv"
#: The CUDA stack and GPU kernel packages: what "without its CUDA libraries" leaves out.
CUDA_ONLY = ("torch", "torchaudio", "torchvision", "torchcodec", "triton", "flashinfer-python", "tilelang",
             "humming-kernels", "quack-kernels", "pynvvideocodec", "nccl4py", "nccl-extensions", "torch-c-dlpack-ext",
             "instanttensor", "fastsafetensors", "apache-tvm-ffi", "z3-solver", "cupy-cuda13x")  # fmt: skip
CUDA_ONLY_PREFIXES = ("nvidia-", "cuda-", "tokenspeed-")
#: torch for the venv: the CPU build pip finds on this machine (the repo's own test dependency).
CPU_TORCH = "torch==2.13.0"


def _cuda_only(name: str) -> bool:
    n = canonicalize_name(name)
    return n in {canonicalize_name(c) for c in CUDA_ONLY} or n.startswith(CUDA_ONLY_PREFIXES)


def lint_requirements(lock_path: Path) -> tuple[str, str]:
    """(hash-locked requirements without the CUDA stack, the lock digest they came from)."""
    lock = read_lock(lock_path)
    lines = [f"{e.name}=={e.version} --hash=sha256:{e.sha256}" for e in lock.entries if not _cuda_only(e.name)]
    if not any(canonicalize_name(line.split("==", 1)[0]) == "vllm" for line in lines):
        raise LockError(f"{lock_path} does not hold vllm", hint="regenerate it with `builder base lock`")
    return "\n".join(lines) + "\n", lock.digest


def ensure_lint_venv(
    *, lock_path: Path | None = None, venv: Path = LINT_VENV_DIR, wheel_cache: Path = WHEEL_CACHE_DIR / "amd64", log=print
) -> Path:
    """The venv's python; rebuilt when the lock it came from changed (stamp file)."""
    lock_path = lock_path or LOCKS_DIR / f"vllm-{ENGINE_UPSTREAM_VERSION}-linux-amd64.txt"
    requirements, digest = lint_requirements(lock_path)
    python = venv / "bin" / "python"
    stamp = venv / ".from-lock"
    if python.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return python
    # A venv's scripts name its path, so it is built in place; the stamp, written last, marks it
    # complete: an interrupted build has none and is rebuilt, never used half-installed.
    if venv.exists():
        shutil.rmtree(venv)
    log(f"lint venv: vllm=={ENGINE_UPSTREAM_VERSION} without CUDA, from {lock_path.name} ({digest[:19]}), into {venv}")
    pip = [str(python), "-m", "pip", "install", "--quiet", "--progress-bar", "off"]
    req = venv / "requirements.txt"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([*pip, CPU_TORCH], check=True)
        req.write_text(requirements)
        # The base build's wheel cache, when there, saves the download (the hashes still decide).
        cached = ["--find-links", str(wheel_cache)] if wheel_cache.is_dir() else []
        subprocess.run([*pip, *cached, "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", str(req)], check=True)
    except subprocess.CalledProcessError as exc:
        raise LockError(f"the lint venv could not be installed ({exc})", hint="check access to PyPI; the pip output is above") from exc
    stamp.write_text(digest + "\n")
    return python


def lint_target(*, cfg: ReleaseConfig, python: Path) -> str:
    """Render the target's launch script and run the self-check's lint half on it with ``python``."""
    with tempfile.TemporaryDirectory(prefix="qfn-lint-") as tmp:
        root = Path(tmp)
        for rel, text in render_launch(cfg=cfg, plan=launch_plan(cfg)).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        lib = root / "lib" / "builder"
        package = Path(selfcheck.__file__).parent
        lib.mkdir(parents=True)
        shutil.copy2(package.parent / "__init__.py", lib / "__init__.py")
        shutil.copytree(package, lib / "selfcheck", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        t = cfg.target
        facts = root / "target.json"
        facts.write_text(json.dumps({"name": t.name, "gpu_arch": t.gpu_arch, "gpu_count": t.gpu_count, "gpu_memory_gib": t.gpu_memory_gib}))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHONPATH"))} | {"PYTHONPATH": str(root / "lib")}
        proc = subprocess.run(
            [str(python), "-m", "builder.selfcheck", "--only", "lint", "--launch", str(root / "launch" / "run_qsa_int8kv.sh"),
             "--target-file", str(facts)],
            env=env, capture_output=True, text=True, check=False, cwd=root,
        )  # fmt: skip
    output = proc.stdout
    if proc.returncode != 0:
        failed = [ln for ln in output.splitlines() if ln.startswith("FAIL")]
        raise SelfCheckError(
            f"launch lint of target {cfg.target.name} failed: " + ("; ".join(failed) or (output + proc.stderr)[-2000:]),
            hint="the engine's own message is above; fix the target's flags",
        )
    return output
