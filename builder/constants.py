"""Every constant and environment-variable name the builder reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path

#: Repository root when running from a checkout (targets/, bundle/, evidence/ live here).
REPO_ROOT = Path(os.environ.get("QFN_REPO_ROOT", Path(__file__).resolve().parent.parent))
TARGETS_DIR = REPO_ROOT / "targets"
BUNDLE_SRC_DIR = REPO_ROOT / "bundle"
EVIDENCE_DIR = REPO_ROOT / "evidence"
PATCHES_DIR = BUNDLE_SRC_DIR / "patches"

#: Where downloads (engine wheel, models) are cached between runs.
CACHE_DIR = Path(os.environ.get("QFN_CACHE_DIR", Path.home() / ".cache" / "qfn-int8kv"))

#: Image repository name; the tag is "<target>-<version>".
IMAGE_REPO = "qfn-int8kv"

#: The pinned upstream engine the patch series is made against.
ENGINE_UPSTREAM_VERSION = "0.33.0"
ENGINE_FORK_VERSION = "0.1.dev20073+g8e685d198"

#: KV row alignment the QSA gather kernels need (bytes).
KV_ROW_ALIGN_BYTES = 128

#: Name of the manifest written into every bundle.
CHECKSUMS_NAME = "CHECKSUMS.sha256"

# Environment variables read by the builder (never written into images or bundles).
ENV_HF_TOKEN = "HF_TOKEN"
ENV_CACHE_DIR = "QFN_CACHE_DIR"
ENV_REPO_ROOT = "QFN_REPO_ROOT"

# --- patches step (engine wheel, patch series, kernel AOT checks) ---
#: The pinned engine wheel: PyPI's x86_64 manylinux build of vllm==0.33.0.
ENGINE_WHEEL_NAME = "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
ENGINE_WHEEL_SHA256 = "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"
ENGINE_WHEEL_PLATFORM = "manylinux_2_28_x86_64"
#: Where the wheel and its unpacked Python sources are cached.
ENGINE_CACHE_DIR = CACHE_DIR / "engine"
ENGINE_SRC_DIR = ENGINE_CACHE_DIR / f"vllm-{ENGINE_UPSTREAM_VERSION}-src"
#: The patch series file inside PATCHES_DIR.
PATCH_SERIES_NAME = "series"
#: Max dynamic shared memory per block (bytes) by target arch, for the AOT fit check.
ARCH_MAX_SHARED_BYTES = {
    "sm_80": 166_912,
    "sm_90": 232_448,
    "sm_120": 101_376,
    "sm_121": 101_376,
}
#: The engine folder the QSA series patches (relative to site-packages or the unpacked wheel).
ENGINE_QSA_DIR = Path("vllm/models/qwen4_exp/nvidia")
