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

# --- publish (Hugging Face Hub) ---
#: Gates a release must carry evidence for; a missing or failed one blocks publishing.
#: Names match builder.measure's gate names (evidence/<gate>.json).
PUBLISH_REQUIRED_GATES = ("golden_probes", "battery", "determinism", "needle", "prefix_cache", "kv_pool")
#: Model card metadata keys the Hub needs to list the release correctly.
CARD_REQUIRED_KEYS = ("library_name", "base_model", "license")
#: Tag added to the card metadata of a release published with --allow-failed-gates.
CARD_FAILED_GATES_TAG = "unverified-quality-gates"
#: Retry policy for transient Hub errors (5xx, 429, connection errors): attempts and backoff seconds.
PUBLISH_RETRY_ATTEMPTS = 5
PUBLISH_RETRY_INITIAL_S = 2.0
PUBLISH_RETRY_MAX_S = 30.0
#: Standard token places (read through huggingface_hub.get_token, never printed or stored).
ENV_HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
