"""Assemble the docker build context in a fresh directory: Dockerfile, docker/ and context/."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from builder import selfcheck
from builder.config import ReleaseConfig, launch_plan
from builder.config.launch import MODEL_DIR_ENV
from builder.constants import ENV_WHEEL_DIR, LAUNCH_K8S_DIR, REPO_ROOT, SELFCHECK_LIB, SELFCHECK_TARGET_FILE
from builder.errors import DockerError
from builder.image.recipe import BuildRecipe
from builder.launch import render_launch

#: What stage 1 needs to install the builder and run `python -m builder patches ...` against the
#: engine: pyproject.toml packages the target files and the series with it.
_BUILDER_FILES = ("pyproject.toml", "builder", "bundle/patches", "targets")


def assemble_context(
    *, cfg: ReleaseConfig, recipe: BuildRecipe, out: Path, ca_bundle: Path | None, repo_root: Path = REPO_ROOT
) -> Path:
    """Write the build context into ``out`` (which must not exist) and return it."""
    out.mkdir(parents=True)
    shutil.copy2(repo_root / "Dockerfile", out / "Dockerfile")
    shutil.copytree(repo_root / "docker", out / "docker")
    ctx = out / "context"
    for sub in ("ca", "wheels", "builder", "launch", "selfcheck"):
        (ctx / sub).mkdir(parents=True)

    if ca_bundle is not None:
        if not ca_bundle.is_file():
            raise DockerError(f"--ca-bundle {ca_bundle} is not a file", hint="pass a PEM bundle, e.g. /etc/ssl/certs/ca-certificates.crt")
        shutil.copyfile(ca_bundle, ctx / "ca" / "ca.crt")

    for pattern in recipe.engine.local_wheels:
        found = sorted(recipe.wheel_dir.glob(pattern))
        if not found:
            raise DockerError(
                f"engine {cfg.engine.profile} needs a wheel matching {pattern} in {recipe.wheel_dir}; no index carries it",
                hint=f"put the wheel there, or point {ENV_WHEEL_DIR} at a directory that has it",
            )
        _link_or_copy(found[-1], ctx / "wheels" / found[-1].name)

    if recipe.apply_patches:
        series = repo_root / "bundle" / "patches" / "series"
        if not series.is_file():
            raise DockerError(
                f"target {cfg.target.name} applies the patch series but {series} is missing",
                hint="check out the patch series (bundle/patches/), or set patches.apply = false with a reason",
            )
        for rel in _BUILDER_FILES:
            src = repo_root / rel
            dst = ctx / "builder" / rel
            if src.is_dir():
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)

        _selfcheck(cfg=cfg, out=ctx / "selfcheck")

    # The image runs the same rendered launch script (and ENV.md) the bundle ships; the Kubernetes
    # manifests are for the cluster that runs the image, not for the image.
    for rel, text in render_launch(cfg=cfg, plan=launch_plan(cfg)).items():
        if rel.startswith(LAUNCH_K8S_DIR + "/"):
            continue
        dst = ctx / rel  # "launch/..." lands in context/launch/
        dst.write_text(text)
        dst.chmod(0o755 if dst.suffix == ".sh" else 0o644)
    return out


def _selfcheck(*, cfg: ReleaseConfig, out: Path) -> None:
    """The self-check package (stdlib + engine only, from this builder) and the target's GPU facts,
    laid out as in the image."""
    package = Path(selfcheck.__file__).parent
    lib = out / SELFCHECK_LIB.lstrip("/") / "builder"
    lib.mkdir(parents=True)
    shutil.copy2(package.parent / "__init__.py", lib / "__init__.py")
    shutil.copytree(package, lib / "selfcheck", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    facts = out / SELFCHECK_TARGET_FILE.lstrip("/")
    facts.parent.mkdir(parents=True)
    facts.write_text(json.dumps(selfcheck_facts(cfg), indent=2) + "\n")


def selfcheck_facts(cfg: ReleaseConfig) -> dict:
    """What the self-check needs of the target: its GPU, and the folders the launch script requires
    besides MODEL_DIR (e.g. the PLE table-file folder), which the lint gives it as empty temp dirs."""
    t = cfg.target
    dirs = [r.env for r in launch_plan(cfg).required if r.is_dir and r.env != MODEL_DIR_ENV]
    return {"name": t.name, "gpu_arch": t.gpu_arch, "gpu_count": t.gpu_count, "gpu_memory_gib": t.gpu_memory_gib,
            "launch_dirs": dirs}


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another filesystem
        shutil.copy2(src, dst)
