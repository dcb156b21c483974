"""Image labels: the OCI annotation set plus ours (engine, KV dtype, patch series, target)."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from builder import __version__
from builder.checksums import tree_digest
from builder.config import ReleaseConfig
from builder.constants import ENV_SOURCE_URL, OCI_LABEL_PREFIX, QFN_LABEL_PREFIX, REPO_ROOT
from builder.image.base import addon_labels
from builder.image.recipe import BuildRecipe


def image_labels(
    *, cfg: ReleaseConfig, recipe: BuildRecipe, created: datetime | None = None, repo_root: Path = REPO_ROOT
) -> dict[str, str]:
    if recipe.base_image is None:
        raise ValueError("labels need the built base (BuildRecipe.with_base)")
    if recipe.base_source == "image":
        base_name, _, base_digest = recipe.base_image.partition("@")
    else:  # the lock base is local: its name is the tag, its digest the content-addressed image id
        base_name, base_digest = recipe.base_name or "", recipe.base_image
    engine = cfg.engine.resolved
    oci = {
        "created": (created or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
        "source": os.environ.get(ENV_SOURCE_URL) or _git(repo_root, "config", "--get", "remote.origin.url") or "unknown",
        "revision": _revision(repo_root),
        "version": __version__,
        "title": recipe.tag,
        "base.name": base_name,
        "base.digest": base_digest,
    }
    ours = {
        "target": cfg.target.name,
        "engine": f"{engine.package}=={engine.version}",
        # What `vllm --version` prints: the `vllm` distribution the build checked or wrote (docker/vllm-metadata).
        "vllm-version": recipe.vllm_version,
        "kv-cache-dtype": cfg.kv_cache.dtype,
        "patch-series.sha256": tree_digest(repo_root / "bundle" / "patches") if cfg.patches.apply else "none (patches.apply = false)",
        "base.source": recipe.base_source,
    }
    if recipe.base_source == "wheel-lock":
        ours["base.lock"] = recipe.base_pin  # path@sha256 of the lock the base was installed from
    labels = {f"{OCI_LABEL_PREFIX}.{k}": v for k, v in oci.items()} | {f"{QFN_LABEL_PREFIX}.{k}": v for k, v in ours.items()}
    return labels | addon_labels(recipe.addon_pins)  # one per add-on lock installed over the engine lock


def _revision(repo_root: Path) -> str:
    rev = _git(repo_root, "rev-parse", "HEAD") or "unknown"
    dirty = _git(repo_root, "status", "--porcelain", "--untracked-files=no")
    return f"{rev}-dirty" if dirty else rev


def _git(repo_root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo_root), *args], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""
